"""Export a trained network for inference in a process that never imports gluonkit.

:func:`export_model` writes three files beside each other::

    PREFIX-symbol.json     the graph (MXNet's symbol format)
    PREFIX-0000.params     its parameters ('arg:NAME' / 'aux:NAME', as HybridBlock.export)
    PREFIX.json            what the graph needs around it: the kind of model (classifier or
                           detector), input name and shape, the preprocessing of an image
                           file, each output's class names, and the SHA-256 digests of the
                           other two files

The first two load with ``gluon.SymbolBlock.imports(PREFIX + '-symbol.json', ['data'],
PREFIX + '-0000.params')`` or ``mx.mod.Module`` (no labels); ``gluonkit.predict`` reads all three,
and refuses files that are damaged or that come from different exports (:class:`ExportError`).
"""
import hashlib
import json
import math
import numbers
import os
import re

import mxnet as mx

from .atomic import atomic_replace
from .validate import choice, is_int, non_negative_int
from .nn.views import flatten

__all__ = ["export_model", "read_metadata", "model_files", "check_preprocessing", "ExportError",
           "FORMAT", "KINDS"]

#: Version of the metadata file's layout (2: with 'kind' and 'sha256').
FORMAT = 2
#: What an exported network does: class scores per output, or GluonCV-style detections
#: (outputs ids, scores and boxes, each (1, N, 1), (1, N, 1), (1, N, 4) for one image).
KINDS = ("classifier", "detector")
_DATA = "data"
_DETECTOR_OUTPUTS = ("ids", "scores", "bboxes")
_REDO = "export the model again (gluonkit.export_model, or the recipe's --export)"


class ExportError(ValueError):
    """An exported model's files cannot be used together: damaged, incomplete, or from
    different exports. The message names the file."""


_PREPROCESSING_KEYS = ("channels", "mean", "std", "resize", "resize_short", "crop", "max_size",
                       "resize_short_within", "pad_to", "interp", "scale", "layout")
_INTERPOLATIONS = (0, 1, 2, 3, 4, 9)      # OpenCV's, and 9: area to shrink, bicubic to enlarge
_METADATA_BYTES = 16 << 20      # class names of a large classifier take well under 1 MB


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
        digests["params"] = _sha256(f.name)
    return write


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_size(value, count):
    """Whether ``value`` is a positive int (``count`` 1) or a list of two (``count`` 2)."""
    if count == 1:
        return is_int(value) and value >= 1
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_size(v, 1) for v in value)


def _preprocessing_problem(preprocessing):
    """What is wrong with a ``preprocessing`` dict (a phrase), or None."""
    p = preprocessing
    if p is None:
        return None
    if not isinstance(p, dict):
        return f"must be a dict or None, got {type(p).__name__}"
    unknown = sorted(set(p) - set(_PREPROCESSING_KEYS))
    if unknown:
        return f"has unknown keys {unknown} (known: {', '.join(_PREPROCESSING_KEYS)})"
    channels = p.get("channels")
    if not (is_int(channels) and channels in (1, 3)):
        return f"['channels'] must be 1 or 3, got {channels!r}"
    for key in ("mean", "std"):
        values = p.get(key, [0.0] * channels)
        if not (isinstance(values, (list, tuple)) and len(values) == channels
                and all(_is_real(v) for v in values)):
            return f"[{key!r}] must be a list of {channels} numbers, got {values!r}"
    if min(p.get("std", [1.0])) <= 0:
        return f"['std'] must be positive, got {p['std']!r}"
    for key, count in (("resize", 2), ("crop", 2), ("resize_short", 1), ("max_size", 1)):
        if p.get(key) is not None and not _is_size(p[key], count):
            return (f"[{key!r}] must be None or " + ("a positive int" if count == 1 else
                                                     "[height, width] of positive ints")
                    + f", got {p[key]!r}")
    if p.get("resize_short_within") is not None and not _is_size(p["resize_short_within"], 2):
        return ("['resize_short_within'] must be None or [shorter side, longest side] of positive "
                f"ints, got {p['resize_short_within']!r}")
    buckets = p.get("pad_to")
    if buckets is not None and not (isinstance(buckets, list) and buckets
                                    and all(_is_size(b, 2) for b in buckets)):
        return f"['pad_to'] must be None or a list of [height, width] of positive ints, got {buckets!r}"
    if "interp" in p and not (is_int(p["interp"]) and p["interp"] in _INTERPOLATIONS):
        return f"['interp'] must be one of {_INTERPOLATIONS}, got {p['interp']!r}"
    if "scale" in p and not (_is_real(p["scale"]) and abs(p["scale"] - 1 / 255) < 1e-9):
        return f"['scale'] must be 1/255 (pixels to [0, 1]), got {p['scale']!r}"
    if p.get("layout", "NCHW") != "NCHW":
        return f"['layout'] must be 'NCHW', got {p['layout']!r}"
    return None


def check_preprocessing(preprocessing):
    """``ValueError`` unless ``preprocessing`` is None or a dict that ``gluonkit.predict`` can
    follow: ``channels`` (1 or 3), optional ``mean`` and ``std`` (one number per channel, by
    default 0 and 1), optional sizes
    ``resize`` / ``crop`` ([height, width]) and ``resize_short`` / ``max_size`` (ints),
    ``resize_short_within`` ([shorter side, longest side], GluonCV's rule), ``pad_to`` (a list
    of [height, width]: padded at the bottom and right to the smallest that holds the image),
    ``interp`` (the resizes' interpolation, default 1: bilinear), ``scale`` (1/255) and
    ``layout`` ('NCHW')."""
    problem = _preprocessing_problem(preprocessing)
    if problem:
        raise ValueError(f"preprocessing{problem if problem.startswith('[') else ' ' + problem}.")
    return preprocessing


def _detector_shapes(probe):
    """Whether ``probe`` (the outputs for one sample) are a detector's ids, scores and boxes."""
    if len(probe) != 3:
        return False
    (_, count, one), (_, count2, one2), (_, count3, four) = [
        o.shape if len(o.shape) == 3 else (0, 0, 0) for o in probe]
    return count == count2 == count3 and one == one2 == 1 and four == 4


def export_model(net, prefix, input_shape, outputs=None, preprocessing=None, epoch=0,
                 kind="classifier", **extra):
    """Write ``net`` as a symbol, its parameters and a metadata file, for inference.

    Parameters
    ----------
    net : HybridBlock
        The trained network, initialized (hybridized or not; a ``ShapeCache`` too). Where a
        parameter has copies on several devices, the file holds their mean (BatchNorm running
        statistics differ per device; the weights are equal), as ``save_parameters`` does.
    prefix : str or path-like
        Path prefix of the files, e.g. ``'runs/classify/model'``.
    input_shape : tuple of int
        One sample's shape, e.g. ``(3, 224, 224)``: the network is run on a batch of one of
        it (a check that the export works) and it is stored for ``mx.mod.Module.bind``.
    outputs : list or dict, optional
        The class names of a single-output classifier or of a detector (a list), one list
        of class names (or None) per output (outputs named ``output0``, ``output1``, ...), or
        a dict output name -> class names (None for an output that is not a classification)
        in output order; nested outputs (nested ``Branches``) count in their flattened order.
    preprocessing : dict, optional
        How an image file becomes the input (see :func:`check_preprocessing`). Without it
        ``gluonkit.predict`` takes arrays of ``input_shape`` only, as the network's input.
    epoch : int
        The number in the parameter file's name.
    kind : {'classifier', 'detector'}
        'detector': the network returns GluonCV's ``(ids, scores, boxes)``, shaped (1, N, 1),
        (1, N, 1), (1, N, 4) for one sample (a GluonCV detector in inference mode); the
        class names are the ids'.
    **extra
        More JSON-serializable entries for the metadata file (e.g. ``task='detect'``).

    Returns
    -------
    dict
        The metadata written to ``PREFIX.json``, with the three file paths under 'files'.

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
                                    "sha256"})
    if reserved:
        raise TypeError(f"export_model got {reserved} as extra metadata; these entries are its "
                        "own: pass them as its arguments.")
    prefix = os.fspath(prefix)
    if not os.path.basename(prefix):
        raise ValueError(f"prefix {prefix!r} names a directory; pass a path prefix for the files, "
                         f"e.g. {os.path.join(prefix, 'model')!r}.")
    if not isinstance(input_shape, (tuple, list)) or not all(is_int(n) for n in input_shape):
        raise TypeError(f"input_shape must be one sample's shape as a tuple of ints, e.g. "
                        f"(3, 224, 224), got {input_shape!r}.")
    shape = tuple(int(n) for n in input_shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"input_shape must be one sample's shape of positive sizes, e.g. "
                         f"(3, 224, 224), got {input_shape!r}.")
    params = net.collect_params()
    ctx = next(iter(params.list_ctx()), mx.cpu())       # a network may have no parameters
    try:
        probe = flatten(net(mx.nd.zeros((1,) + shape, ctx=ctx)))   # fails early on a wrong shape
    except mx.base.MXNetError as err:
        raise ValueError(f"the network cannot run on a sample of input_shape {shape} "
                         f"({str(err).strip().splitlines()[-1]}); pass the shape of one sample "
                         "it takes, without the batch axis.") from None
    if kind == "detector" and not _detector_shapes(probe):
        raise ValueError(f"kind='detector' needs outputs ids, scores and boxes shaped (1, N, 1), "
                         f"(1, N, 1), (1, N, 4); the network returns shapes "
                         f"{[o.shape for o in probe]} (is it a GluonCV detector in inference "
                         "mode?).")
    metadata = {"format": FORMAT, "kind": kind, "input": {"name": _DATA, "shape": list(shape)},
                "outputs": _outputs(outputs, len(probe), kind), "preprocessing": preprocessing,
                **extra}
    json.dumps(metadata)                                    # serializable, before any file is written

    symbol = net(mx.sym.var(_DATA))
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
    missing = sorted(arg_names - {_DATA} - {k[4:] for k in arrays})
    if missing:
        raise ValueError(f"the traced graph has inputs other than {_DATA!r} that are not "
                         f"parameters: {missing}; export a network that takes one input.")

    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    files = {"symbol": f"{prefix}-symbol.json", "params": f"{prefix}-{epoch:04d}.params",
             "metadata": f"{prefix}.json"}
    names = metadata["files"] = {k: os.path.basename(v) for k, v in files.items()}
    symbol_text = symbol.tojson().encode()
    digests = {"symbol": hashlib.sha256(symbol_text).hexdigest()}
    metadata["sha256"] = digests                # 'params' is added when that file is written

    def write_metadata(f):
        f.write((json.dumps(metadata, indent=1) + "\n").encode())

    # all three written (in this order: the metadata takes the parameters' digest) before any
    # replaces its predecessor: never a mix of two exports
    atomic_replace(os.path.dirname(os.path.abspath(prefix)), {
        names["params"]: _saved(arrays, files["params"], digests),
        names["symbol"]: lambda f: f.write(symbol_text),
        names["metadata"]: write_metadata})
    return dict(metadata, files=files)


def _metadata_problem(m):
    """What is wrong with the contents of a metadata file (a phrase), or None."""
    if not isinstance(m, dict):
        return f"holds a JSON {type(m).__name__}, not the object export_model writes"
    if m.get("format") != FORMAT:
        return f"has format {m.get('format')!r}; this gluonkit reads format {FORMAT}"
    missing = [k for k in ("kind", "input", "outputs", "preprocessing", "files", "sha256")
               if k not in m]
    if missing:
        return f"misses {', '.join(map(repr, missing))}"
    if m["kind"] not in KINDS:
        return f"'kind' must be one of {', '.join(map(repr, KINDS))}, got {m['kind']!r}"
    given = m["input"]
    if not (isinstance(given, dict) and isinstance(given.get("name"), str)
            and isinstance(given.get("shape"), list) and given["shape"]
            and all(_is_size(n, 1) for n in given["shape"])):
        return f"'input' must be {{'name': str, 'shape': [positive ints]}}, got {given!r}"
    outputs = m["outputs"]
    if not (isinstance(outputs, list) and outputs and all(
            isinstance(o, dict) and isinstance(o.get("name"), str) and (o.get("classes") is None or (
                isinstance(o["classes"], list) and all(isinstance(c, str) for c in o["classes"])))
            for o in outputs)):
        return "'outputs' must be a list of {'name': str, 'classes': [str] or null}"
    if m["kind"] == "detector" and len(outputs) != 3:
        return f"a detector has 3 outputs (ids, scores, boxes), this names {len(outputs)}"
    if m.get("images_per_call") is not None and not _is_size(m["images_per_call"], 1):
        return f"'images_per_call' must be a positive int, got {m['images_per_call']!r}"
    threshold = m.get("score_threshold")
    if threshold is not None and not (_is_real(threshold) and 0 <= threshold <= 1):
        return f"'score_threshold' must be a number from 0 to 1, got {threshold!r}"
    problem = _preprocessing_problem(m["preprocessing"])
    if problem:
        return "'preprocessing'" + (problem if problem.startswith("[") else " " + problem)
    for key, pattern in (("files", r".+"), ("sha256", r"[0-9a-f]{64}")):
        entries = m[key]
        if not (isinstance(entries, dict) and all(
                isinstance(entries.get(k), str) and re.fullmatch(pattern, entries[k])
                for k in ("symbol", "params"))):
            return f"{key!r} must hold 'symbol' and 'params' entries, got {entries!r}"
    return None


def read_metadata(prefix):
    """The metadata that :func:`export_model` wrote to ``PREFIX.json`` (a dict), checked.

    Raises
    ------
    FileNotFoundError
        If there is no ``PREFIX.json``.
    ExportError
        If it is not the JSON object export_model writes, naming the file and what is wrong.
    """
    path = f"{prefix}.json"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist; pass the prefix given to export_model "
                                "(the path without -symbol.json), e.g. runs/classify/model.")
    with open(path, "rb") as f:
        text = f.read(_METADATA_BYTES + 1)
    if len(text) > _METADATA_BYTES:
        raise ExportError(f"{path} is larger than {_METADATA_BYTES:,} bytes, far more than "
                          f"export_model writes; {_REDO}.")
    try:
        metadata = json.loads(text)
    except (ValueError, RecursionError) as err:   # not UTF-8, not JSON, or absurdly nested
        raise ExportError(f"{path} is not valid JSON ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else 'too deeply nested'}); "
                          f"{_REDO}.") from None
    problem = _metadata_problem(metadata)
    if problem:
        raise ExportError(f"{path} {problem}; {_REDO}.")
    return metadata


def model_files(prefix, metadata):
    """The graph and parameter files of the export ``prefix``, ``{'symbol', 'params'}`` ->
    path, checked against the SHA-256 digests in ``metadata`` (from :func:`read_metadata`).

    The files are found by ``prefix``, as MXNet's checkpoints are, so an export copied under
    another prefix is found (``PREFIX-NNNN.params`` takes the number it was exported with).

    Raises
    ------
    FileNotFoundError
        If a file is missing.
    ExportError
        If a file is not the one the metadata was written with (damaged, cut short, or from
        another export).
    """
    number = re.search(r"-(\d+)\.params$", metadata["files"]["params"])
    files = {"symbol": f"{prefix}-symbol.json",
             "params": f"{prefix}-{number.group(1) if number else '0000'}.params"}
    for path in files.values():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist; an exported model is three files: "
                                    f"{prefix}-symbol.json, {prefix}-NNNN.params and {prefix}.json.")
    for key, path in files.items():
        if _sha256(path) != metadata["sha256"][key]:
            raise ExportError(f"{path} is not the file {prefix}.json was exported with (its "
                              "SHA-256 differs): it is damaged, cut short, or from another "
                              f"export; copy the three files of one export together, or {_REDO}.")
    return files
