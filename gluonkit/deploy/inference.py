"""Run a model written by :func:`gluonkit.export.export_model` on image files or arrays.

A classifier gives the top classes of each image; a detector gives boxes (class, score, corners
in the image's own pixels). Images are read batch by batch (:func:`iter_predict`), so memory
depends on the batch, not on the number of images.
"""
import itertools
import os
import re
import warnings

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon.data.vision import transforms

from ..validate import finite_real, positive_int
from ..data.images import MAX_ASPECT, MAX_PIXELS, check_limits, read_image
from .metadata import FORMAT, ExportError, ExportedModel, model_files, read_metadata
from .preprocessing import Plan, plan, short_within
from .results import check_finite, classified, detected, image_files, not_run

__all__ = ["Model", "load_model", "model_prefix", "predict", "iter_predict", "preprocess",
           "short_within", "shrink_to", "image_files"]

_EXPORT_FILE = re.compile(r"(-symbol\.json|-\d{4}\.params|\.json)$")


class Model(ExportedModel):
    """An exported network loaded for inference: ``net`` (a ``gluon.SymbolBlock``, called
    with a batch per input, in the order of :attr:`inputs`), ``metadata`` (the
    ``PREFIX.json`` dict), ``ctx`` and ``path`` (its parameter file, which errors name)."""

    def __init__(self, net, metadata, ctx, path=None):
        self.net, self.metadata, self.ctx, self.path = net, metadata, ctx, path


def model_prefix(path):
    """The export prefix that ``path`` names: a run folder (``runs/a`` -> ``runs/a/model``),
    one of the export's files (``runs/a/model-symbol.json``, ``model-0000.params``,
    ``model.json``), or the prefix itself."""
    path = os.fspath(path)
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.json")):
        return os.path.join(path, "model")
    stripped = _EXPORT_FILE.sub("", path)
    if stripped != path and os.path.isfile(path) and os.path.isfile(f"{stripped}.json"):
        return stripped
    return path


def load_model(prefix, ctx=None):
    """Load ``PREFIX-symbol.json``, its parameters and ``PREFIX.json`` as a :class:`Model`.

    The files are found by ``prefix``, as MXNet's checkpoints are, so an export copied under
    another prefix loads (``PREFIX-NNNN.params`` takes the number it was exported with).
    ``prefix`` may also be a recipe's run folder or one of the export's files
    (:func:`model_prefix`).

    Raises
    ------
    FileNotFoundError
        If one of the three files is missing.
    gluonkit.export.ExportError
        (a ``ValueError``) If they are damaged or do not belong together, naming the file.
    """
    prefix = model_prefix(prefix)
    metadata = read_metadata(prefix)
    files = model_files(prefix, metadata)
    model = Model(None, metadata, ctx or mx.cpu(), files["params"])
    try:
        with warnings.catch_warnings():   # MXNet notes that the input's type is not known yet
            warnings.filterwarnings("ignore", message="Cannot decide type")
            model.net = gluon.SymbolBlock.imports(files["symbol"],
                                                  [spec["name"] for spec in model.inputs],
                                                  files["params"], ctx=model.ctx)
    except (mx.base.MXNetError, AssertionError, ValueError, KeyError) as err:
        raise ExportError(f"{files['symbol']} and {files['params']} do not load as a network "
                          f"({type(err).__name__}); export the model again.") from None
    return model


def shrink_to(image, max_size):
    """``image`` (HWC) resized so that its longer side is at most ``max_size``, aspect kept."""
    height, width = image.shape[:2]
    if max(height, width) <= max_size:
        return image
    scale = max_size / max(height, width)
    return mx.image.imresize(image, max(1, round(width * scale)), max(1, round(height * scale)))


def _pixels(image, channels, name):
    """An HW or HWC array of 8-bit pixels as an HWC uint8 NDArray; ValueError for anything else
    (a float image in [0, 1] cast to uint8 would be all zeros)."""
    if isinstance(image, mx.nd.NDArray) and image.dtype == np.uint8 and image.ndim == 3 \
            and image.shape[2] == channels:
        return image                       # a decoded image, as the datasets give it
    values = image.asnumpy() if isinstance(image, mx.nd.NDArray) else np.asarray(image)
    if values.ndim == 2:
        values = values[:, :, None]
    if values.ndim != 3 or values.shape[2] != channels or not values.size:
        raise ValueError(f"image {name}: the model takes one image per array, HWC with "
                         f"{channels} channel(s), got an array of shape {values.shape}; pass "
                         "several images as a list.")
    integral = np.issubdtype(values.dtype, np.integer)
    if values.dtype != np.uint8 and not (integral and 0 <= values.min() and values.max() <= 255):
        raise ValueError(f"image {name}: images given as arrays must hold 8-bit pixels (uint8, "
                         f"0 to 255, as a decoded image file), got dtype {values.dtype} with "
                         f"values from {values.min()} to {values.max()}; for floats in [0, 1] "
                         "pass (x * 255).round().astype('uint8').")
    return mx.nd.array(values, dtype="uint8")


class _Prepared:
    """One image (or sample) made ready for the network: ``name``, ``tensors`` (its inputs:
    one CHW float32 image, or one array per input) and ``plan`` (a
    :class:`gluonkit.preprocessing.Plan`: its size, and the map from input pixels back to the
    image's)."""

    def __init__(self, name, plan, *tensors):
        self.name, self.plan, self.tensors = name, plan, tensors

    @property
    def tensor(self):
        """The network's input, where it takes one."""
        return self.tensors[0]


def _prepare(image, preprocessing, name, max_pixels, max_aspect, format=FORMAT):
    """``image`` (a path, or an HWC uint8 array) as a :class:`_Prepared`, following the
    ``preprocessing`` dict saved with the model (whose metadata has ``format``)."""
    channels = preprocessing["channels"]
    if isinstance(image, str):
        image = read_image(image, channels, max_pixels=max_pixels, max_aspect=max_aspect,
                           upright=preprocessing.get("exif_orientation", "apply") == "apply")
    else:
        image = _pixels(image, channels, name)
    steps = plan(image.shape[1::-1], preprocessing, name, max_pixels, format)
    for kind, *args in steps.steps:
        if kind == "resize":
            image = mx.image.imresize(image, *args[:2], interp=args[2])
        elif kind == "crop":
            image = mx.image.fixed_crop(image, *args)
        else:                                   # pad: zeros at the bottom and right
            width, height = args
            padded = mx.nd.zeros((height, width, image.shape[2]), dtype=image.dtype)
            padded[:image.shape[0], :image.shape[1]] = image
            image = padded
    to_tensor = transforms.Compose([
        transforms.ToTensor(), transforms.Normalize(preprocessing.get("mean", [0.0] * channels),
                                                    preprocessing.get("std", [1.0] * channels))])
    return _Prepared(name, steps, to_tensor(image))


def preprocess(image, preprocessing, *, name="array", max_pixels=MAX_PIXELS,
               max_aspect=MAX_ASPECT):
    """One image (a file path, or an HWC uint8 array) as the network's input (CHW float32),
    following the ``preprocessing`` dict saved with the model.

    Files are read by :func:`gluonkit.data.images.read_image` within ``max_pixels`` and
    ``max_aspect``; no resize makes more than ``max_pixels`` pixels. ``name`` is what errors
    call an array.
    """
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    return _prepare(image, preprocessing, image if isinstance(image, str) else name,
                    max_pixels, max_aspect).tensor


def _classified(model, item, outputs, top_k):
    return classified(item.name, model.outputs, [mx.nd.softmax(out).asnumpy() for out in outputs],
                      top_k)


def _detected(model, item, outputs, threshold):
    return detected(item.name, item.plan, model.outputs[0]["classes"],
                    [o.asnumpy() for o in outputs], threshold)


def _as_input(array, shape, name):
    """An array given to a model exported without preprocessing: its input, as float32."""
    values = array if isinstance(array, mx.nd.NDArray) else mx.nd.array(np.asarray(array))
    if tuple(values.shape) != tuple(shape):
        raise ValueError(f"image {name}: the model was exported without preprocessing, so it "
                         f"takes arrays of its input's shape {tuple(shape)}, got {values.shape}.")
    return _Prepared(name, Plan(values.shape[:0:-1][:2]), values.astype("float32"))


def _as_inputs(sample, specs, name):
    """A sample given to a model of several inputs (a tuple of arrays, one per input in
    order, or a dict input name -> array): its inputs, as float32."""
    names = [spec["name"] for spec in specs]
    if isinstance(sample, dict) and sorted(sample) == sorted(names):
        sample = [sample[n] for n in names]
    if not isinstance(sample, (tuple, list)) or len(sample) != len(specs):
        count = f" of {len(sample)}" if isinstance(sample, (tuple, list, dict)) else ""
        raise ValueError(f"sample {name}: the model takes {len(specs)} inputs ({', '.join(names)}"
                         f"), so each sample is a tuple of {len(specs)} arrays, one per input, or "
                         f"a dict by input name, got a {type(sample).__name__}{count}; pass a "
                         f"list of samples: predict(model, [({', '.join(names)}), ...]).")
    arrays = [array if isinstance(array, mx.nd.NDArray) else mx.nd.array(np.asarray(array))
              for array in sample]
    for spec, array in zip(specs, arrays):
        if tuple(array.shape) != tuple(spec["shape"]):
            raise ValueError(f"sample {name}: input {spec['name']!r} takes arrays of shape "
                             f"{tuple(spec['shape'])} (one sample, no batch axis), got "
                             f"{array.shape}.")
    return _Prepared(name, Plan(arrays[0].shape[:0:-1][:2]), *(a.astype("float32") for a in arrays))


def _results(model, batch, top_k, threshold, report):
    """The results of the :class:`_Prepared` ``batch``, one network call per run of inputs of
    one shape (of at most the model's ``images_per_call``: Faster R-CNN's graph takes one)."""
    most = model.metadata.get("images_per_call") or len(batch)
    for _, same in itertools.groupby(batch, key=lambda item: [t.shape for t in item.tensors]):
        same = list(same)
        for run in (same[i:i + most] for i in range(0, len(same), most)):
            yield from _run(model, run, top_k, threshold, report)


def _run(model, run, top_k, threshold, report):
    """The results of one network call on the :class:`_Prepared` inputs ``run``; a call the
    graph fails gives each image its ``ImageError`` (raised, or with ``report`` its result)."""
    inputs = [mx.nd.stack(*[item.tensors[k] for item in run]).as_in_context(model.ctx)
              for k in range(len(run[0].tensors))]
    try:
        outputs = model.net(*inputs)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        for out in outputs:
            out.wait_to_read()          # where MXNet raises what went wrong in the graph
    except mx.base.MXNetError:          # the graph cannot run on this input's size
        errors = [not_run(item.name, item.plan, model.path or "the model") for item in run]
        if not report:
            raise errors[0] from None
        yield from ({"image": item.name, "error": str(err)} for item, err in zip(run, errors))
        return
    for i, item in enumerate(run):
        row = [out[i] for out in outputs]
        check_finite([o.asnumpy() for o in row], model.kind, model.path or "the model", item.name)
        yield (_detected(model, item, row, threshold) if model.kind == "detector"
               else _classified(model, item, row, top_k))


def _stream(model, names, sources, batch_size, prepare, top_k, threshold, report):
    """The results of every image, ``batch_size`` at a time; with ``report``, an image that
    cannot be used gives ``{'image', 'error'}`` in its place and the others go on."""
    for start in range(0, len(names), batch_size):
        run = []
        for i in range(start, min(start + batch_size, len(names))):
            try:
                run.append(prepare(sources[i], names[i]))
            except (ValueError, OSError) as err:   # ImageError, or a file gone meanwhile
                if not report:
                    raise
                yield from _results(model, run, top_k, threshold, report)
                run = []
                yield {"image": names[i], "error": str(err)}
        yield from _results(model, run, top_k, threshold, report)


def iter_predict(model, images, top_k=5, ctx=None, *, batch_size=32, score_threshold=None,
                 max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT, on_error="raise"):
    """Like :func:`predict`, one result at a time: the images are read, preprocessed and run
    ``batch_size`` at a time, so memory is bounded by the batch and the first results come
    before later files are read. Arguments are checked, and the model loaded, at the call.

    ``on_error='report'`` gives an image that cannot be used (damaged, not an image, beyond
    the limits) the result ``{'image': ..., 'error': message}`` and goes on with the others;
    'raise' (the default) raises its ``ImageError``.
    """
    if on_error not in ("raise", "report"):
        raise ValueError(f"on_error must be 'raise' or 'report', got {on_error!r}.")
    report = on_error == "report"
    top_k, batch_size = positive_int(top_k, "top_k"), positive_int(batch_size, "batch_size")
    threshold = None if score_threshold is None else finite_real(score_threshold, "score_threshold",
                                                                 minimum=0.0)
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    if not isinstance(model, Model):
        model = load_model(model, ctx)
    if threshold is None:
        threshold = model.score_threshold
    if isinstance(images, (str, os.PathLike, np.ndarray, mx.nd.NDArray, dict)):
        images = [images]          # one image, or one sample (a dict) of several inputs
    images = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in images]
    paths = [p for p in images if isinstance(p, str)]
    if paths and len(paths) != len(images):
        raise TypeError(f"images must be all paths or all arrays, got {len(paths)} path(s) and "
                        f"{len(images) - len(paths)} array(s); call predict once for each kind.")
    preprocessing = model.metadata["preprocessing"]
    if len(model.inputs) > 1:
        names = ", ".join(spec["name"] for spec in model.inputs)
        if paths:
            raise ExportError(f"the model takes {len(model.inputs)} inputs ({names}), not image "
                              "files; predict from Python with one array per input: "
                              f"gluonkit.predict(model, [({names}), ...]), or "
                              f"gluonkit.load_model(model).net({names}) on batches.")
        return _stream(model, list(range(len(images))), images, batch_size,
                       lambda sample, name: _as_inputs(sample, model.inputs, name), top_k,
                       threshold, report)
    if preprocessing is None:
        if paths:
            raise ExportError(f"the model was exported with preprocessing=None: its metadata does "
                              "not say how an image file becomes its input; export it again with "
                              "preprocessing=..., or pass arrays of its input's shape "
                              f"{tuple(model.metadata['input']['shape'])}.")
        shape = model.metadata["input"]["shape"]
        return _stream(model, list(range(len(images))), images, batch_size,
                       lambda array, name: _as_input(array, shape, name), top_k, threshold, report)
    names = image_files(paths) if paths else list(range(len(images)))
    return _stream(model, names, names if paths else images, batch_size,
                   lambda source, name: _prepare(source, preprocessing, name, max_pixels,
                                                 max_aspect, model.metadata["format"]),
                   top_k, threshold, report)


def predict(model, images, top_k=5, ctx=None, *, batch_size=32, score_threshold=None,
            max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The top classes of each image (a classifier), or its boxes (a detector).

    Parameters
    ----------
    model : str, path-like or Model
        An export prefix (``'runs/classify/model'``) or a loaded :class:`Model`.
    images : str, path-like, array, or list of them
        Image files or directories (walked for image files), or HWC (or HW) uint8 arrays,
        one image each, RGB as ``mx.image.imread`` decodes (not OpenCV's BGR). A model
        exported with ``preprocessing=None`` takes arrays of its input's shape only; one of
        several inputs takes a list of samples, each a tuple of arrays (one per input, in
        order, of its shape) or a dict input name -> array.
    top_k : int
        How many classes to report per image and output (classifiers).
    batch_size : int
        Images read and run together.
    score_threshold : float, optional
        The lowest score of a box reported (detectors); default: the model's
        ``score_threshold`` (the best F1 its run found on its validation set), else 0.5.
    max_pixels, max_aspect
        Limits on the image files read (see :mod:`gluonkit.data.images`).

    Returns
    -------
    list of dict
        One per image, ``'image'`` (the path, or the index of an array) and, for a classifier,
        ``'top'`` (the first output's ``[{'class', 'probability'}, ...]``, best first) and
        ``'outputs'`` (output name -> that list, for networks with several outputs); for a
        detector, ``'width'`` and ``'height'`` of the image and ``'boxes'``:
        ``[{'class', 'score', 'box': [xmin, ymin, xmax, ymax]}, ...]``, best first, in the
        image's own pixels.

    Raises
    ------
    gluonkit.data.images.ImageError
        For an image file that is damaged, not an image, or beyond the limits.
    gluonkit.export.ExportError
        For model files that are damaged or do not belong together.

    Example::

        >>> gluonkit.predict("runs/classify/model", ["seven.png"], top_k=2)[0]["top"]
        [{'class': '7', 'probability': 0.97...}, {'class': '1', 'probability': 0.01...}]
    """
    return list(iter_predict(model, images, top_k, ctx, batch_size=batch_size,
                             score_threshold=score_threshold, max_pixels=max_pixels,
                             max_aspect=max_aspect))
