"""Predict with a ``model.onnx`` in onnxruntime: the results of ``gluonkit.predict``."""
import itertools
import os

import numpy as np

from ..imagefiles import MAX_ASPECT, MAX_PIXELS, ImageError, check_limits
from ..metadata import ExportError
from ..results import check_finite, classified, detected, image_files, not_run, softmax
from ...validate import finite_real, positive_int
from .dump import Dump
from .images import check_interp, prepare
from .model import OnnxModel, load

__all__ = ["predict", "iter_predict"]


def _results(model, batch, top_k, threshold, report, dump):
    """The results of ``batch`` (``(name, plan, tensor)``), one network call per run of inputs
    of one shape (of at most the model's ``images_per_call``; one where the input's height and
    width vary, as the converter fixed such graphs at one image). A call the graph fails gives
    each image its ``ImageError`` (raised, or with ``report`` its result). ``dump`` (a
    :class:`gluonkit.serve.dump.Dump`, or None) records each input and its outputs."""
    most = (model.metadata.get("images_per_call") or len(batch)) if model.batches else 1
    for _, same in itertools.groupby(batch, key=lambda item: item[2].shape):
        same = list(same)
        for run in (same[i:i + most] for i in range(0, len(same), most)):
            try:
                outputs = model.run(np.stack([tensor for _, _, tensor in run]))
            except Exception:   # onnxruntime's errors have no common public base class
                errors = [not_run(name, steps, model.path) for name, steps, _ in run]
                if not report:
                    raise errors[0] from None
                yield from ({"image": name, "error": str(err)}
                            for (name, _, _), err in zip(run, errors))
                continue
            for i, (name, steps, tensor) in enumerate(run):
                row = [out[i] for out in outputs]
                if dump is not None:
                    dump.add(name, steps, tensor,
                             {o["name"]: r for o, r in zip(model.outputs, row)})
                check_finite(row, model.kind, model.path, name)
                yield (detected(name, steps, model.outputs[0]["classes"], row, threshold)
                       if model.kind == "detector"
                       else classified(name, model.outputs, [softmax(o) for o in row], top_k))


def iter_predict(model, images, top_k=5, *, batch_size=32, score_threshold=None,
                 max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT, on_error="raise", dump=None):
    """Like :func:`predict`, one result at a time: the images are read, preprocessed and run
    ``batch_size`` at a time. Arguments are checked, and the model loaded, at the call.
    ``on_error='report'``: an image that cannot be used gives ``{'image', 'error'}`` in its
    place and the others go on (``'raise'``: its ``ImageError`` ends the stream). ``dump``: a
    directory that receives every input tensor, the graph's outputs and the results
    (:mod:`gluonkit.serve.dump`), for another implementation to check itself against."""
    if on_error not in ("raise", "report"):
        raise ValueError(f"on_error must be 'raise' or 'report', got {on_error!r}.")
    top_k, batch_size = positive_int(top_k, "top_k"), positive_int(batch_size, "batch_size")
    threshold = None if score_threshold is None else finite_real(score_threshold, "score_threshold",
                                                                 minimum=0.0)
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    if not isinstance(model, OnnxModel):
        model = load(model)
    if threshold is None:
        threshold = model.score_threshold
    if len(model.inputs) > 1:
        names = ", ".join(spec["name"] for spec in model.inputs)
        raise ExportError(f"{model.path} takes {len(model.inputs)} inputs ({names}), not image "
                          "files; run it from Python with a batch per input: "
                          f"gluonkit.serve.load({model.path!r}).run({names}).")
    images = [images] if isinstance(images, (str, os.PathLike)) else list(images)
    if not all(isinstance(p, (str, os.PathLike)) for p in images):
        raise TypeError("images must be image files or directories (paths); gluonkit.serve "
                        "reads the files itself, as gluonkit-predict does.")
    preprocessing = model.metadata["preprocessing"]
    if preprocessing is None:
        raise ExportError(f"{model.path} was exported with preprocessing=None: its metadata "
                          "does not say how an image file becomes its input; export it again "
                          "with preprocessing=...")
    check_interp(preprocessing, model.path)
    names = image_files([os.fspath(p) for p in images])
    dump = None if dump is None else Dump(dump)

    def stream():
        for start in range(0, len(names), batch_size):
            batch, failed = [], {}
            for name in names[start:start + batch_size]:
                try:
                    batch.append((name, *prepare(name, preprocessing, max_pixels, max_aspect,
                                                  model.metadata["format"],
                                                  model.metadata["input"].get("pixels"))))
                except ImageError as err:
                    if on_error == "raise":
                        raise
                    failed[name] = str(err)
            results = iter(_results(model, batch, top_k, threshold, on_error == "report", dump)
                           if batch else ())
            for name in names[start:start + batch_size]:
                result = {"image": name, "error": failed[name]} if name in failed else next(results)
                yield result if dump is None else dump.result(result)

    def recorded():
        try:
            yield from stream()
        finally:
            dump.close()
    return stream() if dump is None else recorded()


def predict(model, images, top_k=5, *, batch_size=32, score_threshold=None,
            max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The top classes of each image (a classifier), or its boxes (a detector), from a
    ``model.onnx`` in onnxruntime: what ``gluonkit.predict`` gives with the MXNet export.

    Parameters
    ----------
    model : str, path-like or OnnxModel
        The ``model.onnx`` file, or one loaded by :func:`gluonkit.serve.load`.
    images : str, path-like, or list of them
        Image files, or directories (walked for image files).
    top_k, batch_size, score_threshold, max_pixels, max_aspect
        As ``gluonkit.predict`` (``score_threshold`` by default the one the model's run
        recorded, else 0.5).

    Returns
    -------
    list of dict
        One per image: ``'image'`` and ``'top'`` / ``'outputs'`` (a classifier), or
        ``'width'``, ``'height'`` and ``'boxes'`` (a detector), as ``gluonkit.predict``.

    Example::

        >>> gluonkit.serve.predict("model.onnx", ["seven.png"], top_k=2)[0]["top"]
        [{'class': '7', 'probability': 0.97...}, {'class': '1', 'probability': 0.01...}]
    """
    return list(iter_predict(model, images, top_k, batch_size=batch_size,
                             score_threshold=score_threshold, max_pixels=max_pixels,
                             max_aspect=max_aspect))
