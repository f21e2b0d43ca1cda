"""Run a model written by :func:`gluonkit.export.export_model` on image files or arrays."""
import os
import re
import warnings

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon.data.vision import transforms

from ._validate import positive_int
from .export import read_metadata

__all__ = ["Model", "load_model", "predict", "preprocess", "shrink_to", "image_files"]

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


class Model:
    """An exported network loaded for inference: ``net`` (a ``gluon.SymbolBlock``),
    ``metadata`` (the ``PREFIX.json`` dict) and ``ctx``."""

    def __init__(self, net, metadata, ctx):
        self.net, self.metadata, self.ctx = net, metadata, ctx

    @property
    def outputs(self):
        """``[{'name', 'classes'}, ...]``, one per network output."""
        return self.metadata["outputs"]


def load_model(prefix, ctx=None):
    """Load ``PREFIX-symbol.json``, its parameters and ``PREFIX.json`` as a :class:`Model`.

    The files are found by ``prefix``, as MXNet's checkpoints are, so an export copied under
    another prefix loads (``PREFIX-NNNN.params`` takes the number it was exported with).
    """
    prefix = os.fspath(prefix)
    metadata = read_metadata(prefix)
    ctx = ctx or mx.cpu()
    number = re.search(r"-(\d+)\.params$", metadata["files"]["params"])
    files = {"symbol": f"{prefix}-symbol.json",
             "params": f"{prefix}-{number.group(1) if number else '0000'}.params"}
    for path in files.values():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist; an exported model is three files: "
                                    f"{prefix}-symbol.json, {prefix}-NNNN.params and {prefix}.json.")
    with warnings.catch_warnings():   # MXNet notes that the input's type is not known yet
        warnings.filterwarnings("ignore", message="Cannot decide type")
        net = gluon.SymbolBlock.imports(files["symbol"], [metadata["input"]["name"]],
                                        files["params"], ctx=ctx)
    return Model(net, metadata, ctx)


def shrink_to(image, max_size):
    """``image`` (HWC) resized so that its longer side is at most ``max_size``, aspect kept."""
    height, width = image.shape[:2]
    if max(height, width) <= max_size:
        return image
    scale = max_size / max(height, width)
    return mx.image.imresize(image, max(1, round(width * scale)), max(1, round(height * scale)))


def _pixels(image, channels):
    """An HW or HWC array of 8-bit pixels as an HWC uint8 NDArray; ValueError for anything else
    (a float image in [0, 1] cast to uint8 would be all zeros)."""
    values = image.asnumpy() if isinstance(image, mx.nd.NDArray) else np.asarray(image)
    if values.ndim == 2:
        values = values[:, :, None]
    if values.ndim != 3 or values.shape[2] != channels:
        raise ValueError(f"the model takes one image per array, HWC with {channels} channel(s), "
                         f"got an array of shape {values.shape}; pass several images as a list.")
    integral = np.issubdtype(values.dtype, np.integer)
    if values.dtype != np.uint8 and not (integral and 0 <= values.min() and values.max() <= 255):
        raise ValueError(f"images given as arrays must hold 8-bit pixels (uint8, 0 to 255, as a "
                         f"decoded image file), got dtype {values.dtype} with values from "
                         f"{values.min()} to {values.max()}; for floats in [0, 1] pass "
                         "(x * 255).round().astype('uint8').")
    return mx.nd.array(values, dtype="uint8")


def preprocess(image, preprocessing):
    """One image (a file path, or an HWC uint8 array) as the network's input (CHW float32),
    following the ``preprocessing`` dict saved with the model."""
    channels = preprocessing["channels"]
    if isinstance(image, str):
        try:
            image = mx.image.imread(image, flag=1 if channels == 3 else 0)
        except mx.base.MXNetError:
            raise ValueError(f"{image} cannot be decoded as an image; pass image files "
                             f"({', '.join(_IMAGE_SUFFIXES)}).") from None
    else:
        image = _pixels(image, channels)
    if preprocessing.get("resize"):
        height, width = preprocessing["resize"]
        image = mx.image.imresize(image, width, height)
    if preprocessing.get("resize_short"):
        image = mx.image.resize_short(image, preprocessing["resize_short"])
    if preprocessing.get("crop"):
        height, width = preprocessing["crop"]
        image = mx.image.center_crop(image, (width, height))[0]
    if preprocessing.get("max_size"):
        image = shrink_to(image, preprocessing["max_size"])
    steps = transforms.Compose([transforms.ToTensor(),
                                transforms.Normalize(preprocessing["mean"], preprocessing["std"])])
    return steps(image)


def image_files(paths):
    """The image files among ``paths``: files as given, directories walked (sorted)."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                found += [os.path.join(root, n) for n in sorted(names)
                          if n.lower().endswith(_IMAGE_SUFFIXES)]
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such image file or directory.")
    if not found:
        raise FileNotFoundError(f"no image files ({', '.join(_IMAGE_SUFFIXES)}) in {list(paths)}.")
    return found


def _top(probabilities, classes, k):
    order = np.argsort(-probabilities, kind="stable")[:k]
    return [{"class": classes[i] if classes else int(i), "probability": float(probabilities[i])}
            for i in order]


def predict(model, images, top_k=5, ctx=None):
    """The top classes of each image, with probabilities (softmax of the network's outputs).

    Parameters
    ----------
    model : str, path-like or Model
        An export prefix (``'runs/classify/model'``) or a loaded :class:`Model`.
    images : str, path-like, array, or list of them
        Image files or directories (walked for image files), or HWC (or HW) uint8 arrays,
        one image each, RGB as ``mx.image.imread`` decodes (not OpenCV's BGR).
    top_k : int
        How many classes to report per image and output.

    Returns
    -------
    list of dict
        One per image: ``'image'`` (the path, or the index of an array), ``'top'`` (the first
        output's ``[{'class', 'probability'}, ...]``, best first) and ``'outputs'`` (output
        name -> that list, for networks with several outputs).

    Example::

        >>> gluonkit.predict("runs/classify/model", ["seven.png"], top_k=2)[0]["top"]
        [{'class': '7', 'probability': 0.97...}, {'class': '1', 'probability': 0.01...}]
    """
    top_k = positive_int(top_k, "top_k")
    if not isinstance(model, Model):
        model = load_model(model, ctx)
    if isinstance(images, (str, os.PathLike, np.ndarray, mx.nd.NDArray)):
        images = [images]
    images = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in images]
    paths = [p for p in images if isinstance(p, str)]
    if paths and len(paths) != len(images):
        raise TypeError("images must be all paths or all arrays, not a mix.")
    names = image_files(paths) if paths else list(range(len(images)))
    inputs = [preprocess(p if paths else images[p], model.metadata["preprocessing"]) for p in names]
    results = []
    for name, x in zip(names, inputs):
        outputs = model.net(x.expand_dims(0).as_in_context(model.ctx))
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        per_output = {}
        for spec, out in zip(model.outputs, outputs):
            probabilities = mx.nd.softmax(out).asnumpy()[0]
            per_output[spec["name"]] = _top(probabilities, spec["classes"], top_k)
        results.append({"image": name, "top": per_output[model.outputs[0]["name"]],
                        "outputs": per_output})
    return results
