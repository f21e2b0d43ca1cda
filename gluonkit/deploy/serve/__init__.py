"""Predict with an exported ``model.onnx`` where MXNet is not installed.

Needs only NumPy (1.24 or 2.x), onnxruntime, Pillow and (for the same pixels as
``gluonkit.predict``) OpenCV; nothing here imports mxnet. The
results, preprocessing, limits and errors are those of ``gluonkit.predict`` and
``gluonkit-predict``: :func:`predict` / :func:`iter_predict` as functions, ``gluonkit-serve
MODEL.onnx IMAGE...`` (or ``python -m gluonkit.serve``) as a command.

Example::

    >>> import gluonkit.serve
    >>> gluonkit.serve.predict("model.onnx", ["seven.png"], top_k=1)[0]["top"]
    [{'class': '7', 'probability': 0.97...}]
"""
from ..imagefiles import ImageError
from ..metadata import ExportError
from .model import OnnxModel, load
from .predict import iter_predict, predict

__all__ = ["load", "predict", "iter_predict", "OnnxModel", "ExportError", "ImageError"]
