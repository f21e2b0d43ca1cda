"""What an exported model says about itself, checked: the metadata that ``export_model``
writes to ``PREFIX.json`` (and into ``model.onnx``), and the files it names.

This module imports neither mxnet nor onnx: the ONNX runtime (:mod:`gluonkit.serve`) reads
the same metadata in an environment without MXNet.
"""
import hashlib
import json
import math
import numbers
import os
import re

from ..validate import is_int

__all__ = ["FORMAT", "READABLE", "KINDS", "ExportError", "ExportedModel", "check_preprocessing",
           "description_problem", "input_specs", "read_metadata", "model_files", "file_sha256",
           "REDO"]

#: Version of the metadata file's layout (2: with 'kind' and 'sha256'; 3: ``interp`` applies
#: to every resize, where format 2 resized ``resize_short``/``crop`` bicubic and ``max_size``
#: bilinear whatever it said).
FORMAT = 3
#: The formats this gluonkit reads (format 2 exports are served as they always were).
READABLE = (2, 3)
#: What an exported network does: class scores per output, or GluonCV-style detections
#: (outputs ids, scores and boxes, each (1, N, 1), (1, N, 1), (1, N, 4) for one image).
KINDS = ("classifier", "detector")
#: How to mend an export that cannot be used.
REDO = "export the model again (gluonkit.export_model, or the recipe's --export)"


class ExportError(ValueError):
    """An exported model's files cannot be used together: damaged, incomplete, or from
    different exports (the message names the file); or a network cannot be exported, as its
    BatchNorm running variance is at most -eps or not finite (the message names the parameter),
    or as its ONNX graph's outputs would not be the ones the metadata declares (named)."""


def input_specs(metadata):
    """``[{'name', 'shape'}, ...]`` of the metadata (checked), one per network input, in the
    order the network takes them: its ``inputs``, or its one ``input``."""
    return metadata.get("inputs") or [metadata["input"]]


class ExportedModel:
    """What a loaded export tells from its ``metadata`` (the ``model.json`` dict), shared by
    the MXNet and the onnxruntime side."""

    @property
    def kind(self):
        """``'classifier'`` or ``'detector'``."""
        return self.metadata["kind"]

    @property
    def score_threshold(self):
        """A detector's default lowest score reported: the one its run recorded (the best F1
        on its validation set), else 0.5."""
        return self.metadata.get("score_threshold", 0.5)

    @property
    def inputs(self):
        """``[{'name', 'shape'}, ...]``, one per network input, in the order the network takes
        them (one sample's shape, without the batch axis)."""
        return input_specs(self.metadata)

    @property
    def outputs(self):
        """``[{'name', 'classes'}, ...]``, one per network output."""
        return self.metadata["outputs"]


_PREPROCESSING_KEYS = ("channels", "mean", "std", "resize", "resize_short", "crop", "max_size",
                       "resize_short_within", "pad_to", "min_cells", "interp", "scale", "layout",
                       "exif_orientation")
_INTERPOLATIONS = (0, 1, 2, 3, 4, 9)      # OpenCV's, and 9: area to shrink, bicubic to enlarge
_METADATA_BYTES = 16 << 20      # class names of a large classifier take well under 1 MB


def file_sha256(path):
    """The SHA-256 digest of the file ``path``, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_size(value, count):
    """Whether ``value`` is a positive int (``count`` 1) or a list of two (``count`` 2)."""
    if count == 1:
        return is_int(value) and value >= 1
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_size(v, 1) for v in value)


def _is_input(spec):
    """Whether ``spec`` is an input's ``{'name': str, 'shape': [positive ints]}``."""
    return (isinstance(spec, dict) and isinstance(spec.get("name"), str) and spec["name"]
            and isinstance(spec.get("shape"), list) and spec["shape"]
            and all(_is_size(n, 1) for n in spec["shape"]))


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
    if p.get("min_cells") is not None and not _is_size(p["min_cells"], 2):
        return ("['min_cells'] must be None or [stride, cells] of positive ints, got "
                f"{p['min_cells']!r}")
    buckets = p.get("pad_to")
    if buckets is not None and not (isinstance(buckets, list) and buckets
                                    and all(_is_size(b, 2) for b in buckets)):
        return f"['pad_to'] must be None or a list of [height, width] of positive ints, got {buckets!r}"
    if "interp" in p and not (is_int(p["interp"]) and p["interp"] in _INTERPOLATIONS):
        return f"['interp'] must be one of {_INTERPOLATIONS}, got {p['interp']!r}"
    if "scale" in p and not (_is_real(p["scale"]) and abs(p["scale"] - 1 / 255) < 1e-9):
        return f"['scale'] must be 1/255 (pixels to [0, 1]), got {p['scale']!r}"
    if p.get("exif_orientation", "apply") not in ("apply", "ignore"):
        return f"['exif_orientation'] must be 'apply' or 'ignore', got {p['exif_orientation']!r}"
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
    ``min_cells`` ([stride, cells]: padded until its feature map has that many cells),
    ``interp`` (the resizes' interpolation, default 1: bilinear), ``scale`` (1/255),
    ``layout`` ('NCHW') and ``exif_orientation`` ('apply', the default: image files are read
    turned by it; 'ignore': as stored)."""
    problem = _preprocessing_problem(preprocessing)
    if problem:
        raise ValueError(f"preprocessing{problem if problem.startswith('[') else ' ' + problem}.")
    return preprocessing


def description_problem(m, files=True):
    """What is wrong with the metadata ``m`` (a phrase), or None: ``PREFIX.json``'s contents,
    or with ``files=False`` the description that ``model.onnx`` carries (no file names and
    digests: the ONNX file is the whole model)."""
    if not isinstance(m, dict):
        return f"holds a JSON {type(m).__name__}, not the object export_model writes"
    if m.get("format") not in READABLE:
        return (f"has format {m.get('format')!r}; this gluonkit reads formats "
                f"{', '.join(map(str, READABLE))}")
    missing = [k for k in ("kind", "input" if "inputs" not in m else "inputs", "outputs",
                           "preprocessing") + (("files", "sha256") if files else ()) if k not in m]
    if missing:
        return f"misses {', '.join(map(repr, missing))}"
    if m["kind"] not in KINDS:
        return f"'kind' must be one of {', '.join(map(repr, KINDS))}, got {m['kind']!r}"
    if "input" in m and "inputs" in m:
        return "has both 'input' (one input) and 'inputs' (several)"
    if "inputs" in m:
        given = m["inputs"]
        if not (isinstance(given, list) and len(given) > 1 and all(map(_is_input, given))
                and len({spec["name"] for spec in given}) == len(given)):
            return ("'inputs' must be a list of two or more {'name': str, 'shape': [positive "
                    f"ints]}} of different names, got {given!r}")
        if m["preprocessing"] is not None:
            return ("has a 'preprocessing' of image files, which a network of several inputs "
                    "cannot use")
    elif not _is_input(m["input"]):
        return f"'input' must be {{'name': str, 'shape': [positive ints]}}, got {m['input']!r}"
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
    if not files:
        return None
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
                          f"export_model writes; {REDO}.")
    try:
        metadata = json.loads(text)
    except (ValueError, RecursionError) as err:   # not UTF-8, not JSON, or absurdly nested
        raise ExportError(f"{path} is not valid JSON ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else 'too deeply nested'}); "
                          f"{REDO}.") from None
    problem = description_problem(metadata)
    if problem:
        raise ExportError(f"{path} {problem}; {REDO}.")
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
        if file_sha256(path) != metadata["sha256"][key]:
            raise ExportError(f"{path} is not the file {prefix}.json was exported with (its "
                              "SHA-256 differs): it is damaged, cut short, or from another "
                              f"export; copy the three files of one export together, or {REDO}.")
    return files
