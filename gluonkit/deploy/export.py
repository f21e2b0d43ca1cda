"""Export a trained network for inference in a process that never imports gluonkit.

:func:`export_model` writes three files beside each other (four with ``model.onnx``)::

    PREFIX-symbol.json     the graph (MXNet's symbol format)
    PREFIX-0000.params     its parameters ('arg:NAME' / 'aux:NAME', as HybridBlock.export)
    PREFIX.json            what the graph needs around it: the kind of model (classifier or
                           detector), input name and shape, the preprocessing of an image
                           file, each output's class names, and the SHA-256 digests of the
                           other files
    PREFIX.onnx            the network with its metadata as an ONNX file, for onnxruntime
                           (:mod:`gluonkit.onnx_export`; where the onnx package is installed)

The first two load with ``gluon.SymbolBlock.imports(PREFIX + '-symbol.json', ['data'],
PREFIX + '-0000.params')`` or ``mx.mod.Module`` (no labels); ``gluonkit.predict`` reads all three,
and refuses files that are damaged or that come from different exports (:class:`ExportError`).
"""
import hashlib
import json
import os
import warnings

import mxnet as mx
import numpy as np

from ..atomic import atomic_replace
from .metadata import (FORMAT, KINDS, ExportError, check_preprocessing, file_sha256, model_files,
                       read_metadata)
from ..validate import choice, is_int, non_negative_int
from ..nn.views import flatten
from .onnx_export import onnx_model

__all__ = ["export_model", "read_metadata", "model_files", "check_preprocessing", "ExportError",
           "FORMAT", "KINDS"]

_DATA = "data"
_BATCHNORMS = ("BatchNorm", "_contrib_SyncBatchNorm")     # inputs: data, gamma, beta, mean, var
_MXNET_BATCHNORM_EPS = 1e-3     # the operators' default epsilon, where a node does not set its own
_DETECTOR_OUTPUTS = ("ids", "scores", "bboxes")


def _saved(arrays, path, digests):
    """A writer of ``arrays`` in MXNet's format (``mx.nd.save`` takes a path: the open file's),
    which puts the written file's SHA-256 into ``digests['params']``.

    A failed write (a full disk) raises ``OSError`` naming ``path``.
    """
    def write(f):
        try:
            mx.nd.save(f.name, arrays)
        except mx.base.MXNetError as err:   # how mx.nd.save reports a failed write
            raise OSError(f"cannot write {path}: {str(err).strip().splitlines()[-1]}; check the "
                          "free space and permissions of its directory.") from None
        digests["params"] = file_sha256(f.name)
    return write


def _input_specs(input_shape):
    """The ``inputs`` metadata, ``[{'name', 'shape'}]``, from ``export_model``'s
    ``input_shape``: one sample's shape (the input ``data``), a list of them (``data0``,
    ``data1``, ...), or a dict input name -> shape."""
    if isinstance(input_shape, dict):
        given = list(input_shape.items())
        bad = [name for name, _ in given if not (isinstance(name, str) and name.isidentifier())]
        if bad or not given:
            raise ValueError(f"input_shape's keys name the inputs and must be identifiers, such "
                             f"as 'anchor', got {bad or list(input_shape)!r}.")
    elif isinstance(input_shape, (tuple, list)) and input_shape and \
            all(isinstance(shape, (tuple, list)) for shape in input_shape):
        given = [(f"{_DATA}{i}", shape) for i, shape in enumerate(input_shape)]
        if len(given) == 1:
            given = [(_DATA, input_shape[0])]
    else:
        given = [(_DATA, input_shape)]
    specs = []
    for name, shape in given:
        where = "" if len(given) == 1 else f"[{name!r}]" if isinstance(input_shape, dict) \
            else f"[{len(specs)}]"
        if not isinstance(shape, (tuple, list)) or not all(is_int(n) for n in shape):
            raise TypeError(f"input_shape{where} must be one sample's shape as a tuple of ints, "
                            f"e.g. (3, 224, 224) (a list of them for several inputs), got "
                            f"{shape!r}.")
        if not shape or min(shape) < 1:
            raise ValueError(f"input_shape{where} must be one sample's shape of positive sizes, "
                             f"e.g. (3, 224, 224), got {shape!r}.")
        specs.append({"name": name, "shape": [int(n) for n in shape]})
    return specs


#: What the outputs hold, as ``model.json`` says it (``values``).
_VALUES = {"classifier": "logits: the probabilities are their softmax",
           "detector": "ids (the class index, -1 for no box), scores (probabilities) and "
                       "bboxes ([xmin, ymin, xmax, ymax] in the input's pixels)"}


def _outputs(outputs, count, kind):
    """The ``outputs`` metadata: a list of ``{'name', 'classes'}``, one per network output."""
    if kind == "detector" and (outputs is None or isinstance(outputs, (list, tuple))):
        outputs = dict(zip(_DETECTOR_OUTPUTS, (outputs, None, None)))   # the class names
    if outputs is None:
        return [{"name": f"output{i}", "classes": None} for i in range(count)]
    nested = [isinstance(o, (list, tuple)) or o is None for o in outputs]
    if isinstance(outputs, (list, tuple)) and outputs and all(nested):   # one list per output
        outputs = {f"output{i}": classes for i, classes in enumerate(outputs)}
    elif isinstance(outputs, (list, tuple)) and any(nested):
        raise TypeError(f"outputs mixes class names and lists: {list(outputs)!r}; pass the class "
                        "names of a single output, one list (or None) per output, or a dict "
                        "output name -> class names.")
    if isinstance(outputs, dict):
        outputs = [{"name": str(name), "classes": None if classes is None else
                    [str(c) for c in classes]} for name, classes in outputs.items()]
    else:   # the class names of the single output
        outputs = [{"name": "class", "classes": [str(c) for c in outputs]}]
    if len(outputs) != count:
        raise ValueError(f"outputs names {len(outputs)} output(s) but the network has {count}; "
                         "pass one entry per output (a dict name -> class names).")
    return outputs


def _check_other_size(net, shape, ctx):
    """``ValueError`` unless ``net`` runs on one sample of ``shape`` (C, H, W) made larger by
    half (and odd): what ``dynamic_size=True`` promises."""
    if len(shape) != 3:
        raise ValueError(f"dynamic_size=True needs an image input (C, H, W), got input_shape "
                         f"{shape}.")
    other = (shape[0], shape[1] + shape[1] // 2 + 1, shape[2] + shape[2] // 2 + 1)
    try:
        flatten(net(mx.nd.zeros((1,) + other, ctx=ctx)))[0].wait_to_read()
    except mx.base.MXNetError:
        raise ValueError(f"dynamic_size=True: the network runs on input_shape {shape} but not on "
                         f"{other}, so its height and width are not free (a Dense layer, a "
                         "fixed reshape); export it with dynamic_size=False.") from None


def _detector_shapes(probe):
    """Whether ``probe`` (the outputs for one sample) are a detector's ids, scores and boxes."""
    if len(probe) != 3:
        return False
    (_, count, one), (_, count2, one2), (_, count3, four) = [
        o.shape if len(o.shape) == 3 else (0, 0, 0) for o in probe]
    return count == count2 == count3 and one == one2 == 1 and four == 4


def _check_running_variances(symbol, arrays):
    """Refuse a graph whose BatchNorm normalizes with a running variance that is non-finite or
    not above ``-eps`` (its node's epsilon): every runtime divides by sqrt(variance + eps), so
    MXNet's output is then wrong (or finite by chance) and onnxruntime's is NaN. A variance a
    rounding below 0 (a channel that never varied, as -1e-12) normalizes as 0 does."""
    nodes = json.loads(symbol.tojson())["nodes"]
    for node in nodes:
        if node["op"] not in _BATCHNORMS:
            continue
        name = nodes[node["inputs"][4][0]]["name"]
        variance = arrays.get("aux:" + name)
        if variance is None:
            continue
        variance = variance.asnumpy().astype(np.float64)
        eps = float(node.get("attrs", {}).get("eps", _MXNET_BATCHNORM_EPS))
        bad = ~(variance + eps > 0) | ~(variance < float("inf"))      # NaN fails both
        if bad.any():
            raise ExportError(f"BatchNorm running variance {name!r} holds {int(bad.sum())} value(s) "
                              f"at or below -eps ({-eps:g}) or non-finite (e.g. {variance[bad][0]}); no runtime "
                              "computes this layer right. Initialize BatchNorm running variances "
                              "to ones (gluonkit.nn.declare_norm_init for layers built as "
                              "symbols) and retrain, or check the training for NaN.")


def export_model(net, prefix, input_shape, outputs=None, preprocessing=None, epoch=0,
                 kind="classifier", onnx=None, dynamic_size=False, pixels=None, **extra):
    """Write ``net`` as a symbol, its parameters and a metadata file, for inference.

    Parameters
    ----------
    net : HybridBlock
        The trained network, initialized (hybridized or not; a ``ShapeCache`` too). Where a
        parameter has copies on several devices, the file holds their mean (BatchNorm running
        statistics differ per device; the weights are equal), as ``save_parameters`` does.
    prefix : str or path-like
        Path prefix of the files, e.g. ``'runs/classify/model'``.
    input_shape : tuple of int, list of them, or dict
        One sample's shape, e.g. ``(3, 224, 224)``: the network is run on a batch of one of
        it (a check that the export works) and it is stored for ``mx.mod.Module.bind``; the
        input is named ``data``. For a network of several inputs, one shape per input in the
        order its forward takes them: a list (``[(10,), (10,)]``, inputs ``data0``,
        ``data1``, ...) or a dict input name -> shape (``{'anchor': (10,), ...}``), stored
        as the metadata's ``inputs``.
    outputs : list or dict, optional
        The class names of a single-output classifier or of a detector (a list), one list
        of class names (or None) per output (outputs named ``output0``, ``output1``, ...), or
        a dict output name -> class names (None for an output that is not a classification)
        in output order; nested outputs (nested ``Branches``) count in their flattened order.
    preprocessing : dict, optional
        How an image file becomes the input (see :func:`check_preprocessing`). Without it
        ``gluonkit.predict`` takes arrays of ``input_shape`` only, as the network's input
        (a tuple of arrays per sample for several inputs, which take no preprocessing).
    epoch : int
        The number in the parameter file's name.
    kind : {'classifier', 'detector'}
        'detector': the network returns GluonCV's ``(ids, scores, boxes)``, shaped (1, N, 1),
        (1, N, 1), (1, N, 4) for one sample (a GluonCV detector in inference mode); the
        class names are the ids'.
    onnx : bool or None
        Also write ``PREFIX.onnx`` (see :mod:`gluonkit.onnx_export`), which onnxruntime runs
        without MXNet: True requires it (``ImportError`` without the onnx package,
        ``ValueError`` for a network the converter cannot translate), None (default) writes
        it where it can and otherwise warns why not, False skips it. Its outputs are the
        metadata's, one per network output, by name and in order (``ExportError`` otherwise,
        whatever ``onnx`` says).
    dynamic_size : bool
        Declare ``model.onnx``'s height and width free (a fully convolutional network runs
        at any size): the network is first run at another size, ``ValueError`` if it cannot;
        recorded as ``input.dynamic_size`` in the metadata. Without it the ONNX input is of
        ``input_shape`` (but where the preprocessing leaves images their own sizes). For one
        image input only, as ``pixels`` and ``preprocessing``: refused for several inputs.
    pixels : {None, 'NCHW', 'NHWC'}
        ``model.onnx`` takes uint8 RGB (or gray) pixels in this layout, resized as the
        preprocessing says, and does the scaling, mean and std (and the layout) in its graph:
        a service only decodes and resizes. Recorded as ``input.pixels``; needs
        ``preprocessing`` and the ONNX file (not ``onnx=False``). The MXNet files take the
        float32 tensor as ever.
    **extra
        More JSON-serializable entries for the metadata file (e.g. ``task='detect'``).

    Returns
    -------
    dict
        The metadata written to ``PREFIX.json``, with the three file paths under 'files'.

    Raises
    ------
    ExportError
        If a BatchNorm layer's running variance is at most ``-eps`` or not finite (named),
        or the ONNX file's outputs would not be the metadata's; nothing is written.

    Example::

        >>> export_model(net, "out/model", (1, 8, 8), outputs=list("0123456789"))
    """
    if not isinstance(net, mx.gluon.HybridBlock):
        raise TypeError(f"export_model needs a HybridBlock (a graph can be traced from it), "
                        f"got {type(net).__name__}.")
    epoch = non_negative_int(epoch, "epoch")
    kind = choice(kind, KINDS, "kind")
    check_preprocessing(preprocessing)
    reserved = sorted(set(extra) & {"format", "kind", "input", "outputs", "preprocessing", "files",
                                    "sha256", "values"})
    if reserved:
        raise TypeError(f"export_model got {reserved} as extra metadata; these entries are its "
                        "own, written from its arguments: pass those, or name yours otherwise.")
    prefix = os.fspath(prefix)
    if not os.path.basename(prefix):
        raise ValueError(f"prefix {prefix!r} names a directory; pass a path prefix for the files, "
                         f"e.g. {os.path.join(prefix, 'model')!r}.")
    inputs = _input_specs(input_shape)
    image_options = [f"{name}=..." for name, given in (
        ("preprocessing", preprocessing is not None), ("dynamic_size", dynamic_size),
        ("pixels", pixels is not None)) if given]
    if len(inputs) > 1 and image_options:
        raise ValueError(f"{', '.join(image_options)} are for one image input; the network "
                         f"takes {len(inputs)} inputs: export it with preprocessing=None "
                         "(and no dynamic_size or pixels) and predict from arrays, one per input.")
    params = net.collect_params()
    ctx = next(iter(params.list_ctx()), mx.cpu())       # a network may have no parameters
    shapes = [tuple(spec["shape"]) for spec in inputs]
    try:                                                # fails early on a wrong shape
        probe = flatten(net(*[mx.nd.zeros((1,) + shape, ctx=ctx) for shape in shapes]))
    except (mx.base.MXNetError, TypeError, ValueError) as err:
        reason = "" if isinstance(err, ValueError) else (      # Gluon's: a count of inputs
            f" ({str(err).strip().splitlines()[-1]})" if isinstance(err, mx.base.MXNetError)
            else f" ({err})")
        given = f"a sample of input_shape {shapes[0]}" if len(shapes) == 1 else \
            f"{len(shapes)} inputs of input_shape {shapes}"
        raise ValueError(f"the network cannot run on {given}{reason}; pass the shape of one "
                         "sample it takes, without the batch axis, and for several inputs one "
                         "shape per input: input_shape=[(10,), (10,)].") from None
    if dynamic_size:
        _check_other_size(net, shapes[0], ctx)
    if pixels is not None:
        choice(pixels, ("NCHW", "NHWC"), "pixels")
        if preprocessing is None or onnx is False or len(shapes[0]) != 3:
            raise ValueError(f"pixels={pixels!r} makes model.onnx take image pixels: it needs "
                             "preprocessing=..., an image input (C, H, W) and the ONNX file "
                             "(onnx=None or True).")
    if kind == "detector" and not _detector_shapes(probe):
        raise ValueError(f"kind='detector' needs outputs ids, scores and boxes shaped (1, N, 1), "
                         f"(1, N, 1), (1, N, 4); the network returns shapes "
                         f"{[o.shape for o in probe]} (is it a GluonCV detector in inference "
                         "mode?).")
    outputs = _outputs(outputs, len(probe), kind)
    json.dumps(extra)                                       # serializable, before any file is written

    input_names = [spec["name"] for spec in inputs]
    symbol = net(*[mx.sym.var(name) for name in input_names])
    if isinstance(symbol, (list, tuple)):
        symbol = mx.sym.Group(flatten(symbol))
    aux_names = set(symbol.list_auxiliary_states())
    arg_names = set(symbol.list_arguments())
    arrays = {}
    for param in params.values():
        if param.name not in aux_names | arg_names:
            continue                                        # a parameter this graph does not use
        copies = param.list_data()
        mean = sum(c.as_in_context(mx.cpu()) for c in copies) / len(copies)
        arrays[("aux:" if param.name in aux_names else "arg:") + param.name] = mean
    missing = sorted(arg_names - set(input_names) - {k[4:] for k in arrays})
    if missing:
        raise ValueError(f"the traced graph has inputs other than {input_names} that are not "
                         f"parameters: {missing}; export a network whose inputs are the "
                         "arguments of its forward.")
    read = [spec for spec in inputs if spec["name"] in arg_names]
    if not read:
        raise ValueError(f"the network's graph reads none of its inputs {input_names}: its "
                         "outputs do not depend on them; export a network that computes from "
                         "its input.")
    if len(read) < len(inputs):         # a route through a head that reads only the anchor
        warnings.warn(f"the network's graph does not read its input(s) "
                      f"{[name for name in input_names if name not in arg_names]}: the export "
                      f"takes only {[spec['name'] for spec in read]}, as its graph does.",
                      stacklevel=2)
    metadata = {"format": FORMAT, "kind": kind,
                **({"input": dict(read[0])} if len(read) == 1 else {"inputs": read}),
                "outputs": outputs, "preprocessing": preprocessing, "values": _VALUES[kind],
                **extra}
    if dynamic_size:
        metadata["input"]["dynamic_size"] = True
    if pixels is not None:
        metadata["input"]["pixels"] = pixels
    if preprocessing is not None:
        metadata["input"]["color"] = "RGB" if preprocessing["channels"] == 3 else "gray"

    _check_running_variances(symbol, arrays)
    onnx_text = _onnx_text(symbol, arrays, metadata, onnx)     # before anything is written
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    files = {"symbol": f"{prefix}-symbol.json", "params": f"{prefix}-{epoch:04d}.params",
             "metadata": f"{prefix}.json"}
    names = metadata["files"] = {k: os.path.basename(v) for k, v in files.items()}
    symbol_text = symbol.tojson().encode()
    digests = {"symbol": hashlib.sha256(symbol_text).hexdigest()}
    metadata["sha256"] = digests                # 'params' is added when that file is written

    def write_metadata(f):
        f.write((json.dumps(metadata, indent=1) + "\n").encode())

    # all written (the metadata last: it takes the others' digests) before any replaces its
    # predecessor: never a mix of two exports
    writers = {names["params"]: _saved(arrays, files["params"], digests),
               names["symbol"]: lambda f: f.write(symbol_text)}
    if onnx_text is not None:
        files["onnx"] = f"{prefix}.onnx"
        names["onnx"] = os.path.basename(files["onnx"])
        digests["onnx"] = hashlib.sha256(onnx_text).hexdigest()
        writers[names["onnx"]] = lambda f: f.write(onnx_text)
    writers[names["metadata"]] = write_metadata
    atomic_replace(os.path.dirname(os.path.abspath(prefix)), writers)
    return dict(metadata, files=files)


def _onnx_text(symbol, arrays, metadata, required):
    """The ONNX file of the export (bytes), or None where ``required`` is False, or None and
    it cannot be written (a warning says why). An ONNX file whose outputs would not be the
    metadata's is an ``ExportError`` whatever ``required`` is."""
    if required is False:
        return None
    try:
        return onnx_model(symbol, arrays, metadata).SerializeToString()
    except ExportError:
        raise
    except (ImportError, ValueError) as err:
        if required:
            raise
        warnings.warn(f"model.onnx was not written: {err}", stacklevel=3)
        return None


