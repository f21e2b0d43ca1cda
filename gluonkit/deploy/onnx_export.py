"""Exported networks as ONNX files, which onnxruntime runs without MXNet.

MXNet's converter (``mxnet.onnx.export_model``) does the translation; this module makes its
file right for onnxruntime and self-describing:

- the opset import says 13, the newest opset the converter writes operators for (it stamps
  the installed onnx's default, 20 for onnx 1.15, and onnxruntime then reads opset-13
  operators such as ``Split`` under the newer rules and refuses them);
- the parameters are initializers only, not also graph inputs (onnxruntime would otherwise
  treat them as inputs a caller may override, and fold no constants);
- the inputs are named as in the metadata (``data``; ``data0``, ``data1``, ... or the names
  given, for several) with a free batch axis (and free height and width where the
  preprocessing gives images their own sizes); the outputs carry the metadata's names
  (``class``, each head of a multi-task network, ``ids``/``scores``/``bboxes``), one per
  network output even where MXNet names several alike, checked (``ExportError``);
- detectors' ``box_nms`` is translated as MXNet computes it (:mod:`gluonkit.onnx_detection`),
  not as the converter does;
- the metadata (kind, input, outputs with class names, preprocessing) travels inside the file,
  as the JSON string ``gluonkit`` of its metadata properties: ``model.onnx`` alone is enough
  to predict (:mod:`gluonkit.serve`).
"""
import json
import logging
import os
import tempfile
import warnings

import mxnet as mx
import numpy as np

import gluonkit
from ..atomic import atomic_replace
from .inference import model_prefix
from .metadata import ExportError, file_sha256, input_specs, model_files, read_metadata
from .onnx_detection import box_nms_translation

__all__ = ["onnx_model", "export_onnx", "OPSET", "METADATA_KEY"]

#: The opset the converter's operators follow (its newest translations are for opset 13).
OPSET = 13
#: The metadata property of the ONNX file that holds gluonkit's metadata (JSON).
METADATA_KEY = "gluonkit"
_INSTALL = ('pip install "onnx>=1.10,<1.16" (or pip install "gluonkit[onnx]"): MXNet 1.9.1\'s '
            "converter imports onnx.mapping, which onnx 1.16 removed")


def _import_onnx():
    try:
        import onnx
        from onnx import mapping  # noqa: F401  (what MXNet's converter needs)
    except ImportError as err:
        raise ImportError(f"writing model.onnx needs the onnx package ({err}); {_INSTALL}.") \
            from None
    return onnx


def _input_shapes(symbol, metadata):
    """``(samples, shapes)`` of the inputs in the converter's order (the graph's): a batch of
    one of each, and each shape with None for the axes that vary: the batch, and height and
    width where the preprocessing leaves images their own sizes or the export declares them
    free (``dynamic_size``)."""
    specs = {spec["name"]: spec for spec in input_specs(metadata)}
    p = metadata["preprocessing"]
    own_sizes = p is not None and not (p.get("resize") or p.get("crop"))
    samples, shapes = [], []
    for name in (name for name in symbol.list_inputs() if name in specs):
        shape = [None] + list(specs[name]["shape"])
        if (own_sizes or specs[name].get("dynamic_size")) and len(shape) == 4:
            shape[2:] = [None, None]
        samples.append((1,) + tuple(specs[name]["shape"]))
        shapes.append(tuple(shape))
    return samples, shapes


def _rename(graph, old, new):
    """Rename the tensor ``old`` to ``new`` wherever the graph names it."""
    for node in graph.node:
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                if name == old:
                    names[i] = new
    for value in graph.output:
        if value.name == old:
            value.name = new


def _named_outputs(symbol, metadata):
    """``symbol`` with each output computed by an identity node of the metadata's name for it.

    The converter names each ONNX output after the node that computes it and keeps one output
    per name: a network returning one tensor twice, or one layer applied to several inputs
    (each call a node of the layer's name), would lose outputs or give another call's. Nodes
    of the network that bear an output's name are renamed; an input or parameter that does is
    a ``ValueError``.
    """
    names = [spec["name"] for spec in metadata["outputs"]]
    graph = json.loads(symbol.tojson())
    taken = {node["name"] for node in graph["nodes"]} | set(names)
    for node in graph["nodes"]:
        if node["name"] not in names:
            continue
        if node["op"] == "null":
            raise ValueError(f"the output name {node['name']!r} is also the name of an input or "
                             "parameter of the graph; name the outputs otherwise (outputs={...}).")
        number = 1
        while f"{node['name']}_{number}" in taken:
            number += 1
        node["name"] = f"{node['name']}_{number}"
        taken.add(node["name"])
    network = mx.sym.load_json(json.dumps(graph))
    with mx.name.NameManager():         # the names as given, whatever scope the caller is in
        return mx.sym.Group([mx.sym.identity(network[i], name=name)
                             for i, name in enumerate(names)])


def _check_outputs(graph, metadata):
    """Put the graph's outputs in the metadata's order; ``ExportError`` unless they are the
    metadata's outputs, by name and count."""
    declared = [spec["name"] for spec in metadata["outputs"]]
    values = {value.name: value for value in graph.output}
    if sorted(value.name for value in graph.output) != sorted(declared):
        raise ExportError(f"model.onnx would have the outputs "
                          f"{[value.name for value in graph.output]}, not the {len(declared)} "
                          f"model.json declares ({declared}), so onnxruntime would not give the "
                          "network's outputs; nothing was written. Export with onnx=False (the "
                          "MXNet files are right), or rename the outputs (outputs={...}).")
    kept = [values[name] for name in declared]
    del graph.output[:]
    graph.output.extend(kept)


def _converted(symbol, arrays, metadata):
    """MXNet's converter's ONNX model of ``symbol`` with ``arrays`` ('arg:NAME' / 'aux:NAME')."""
    onnx = _import_onnx()
    from mxnet.onnx import export_model as mx_to_onnx

    params = {name.split(":", 1)[1]: value for name, value in arrays.items()}
    samples, shapes = _input_shapes(symbol, metadata)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings(), \
            box_nms_translation():
        warnings.simplefilter("ignore")          # the converter's notes on operators it adapts
        path = os.path.join(folder, "model.onnx")
        logger = logging.getLogger()
        level = logger.level
        logger.setLevel(max(level, logging.WARNING))     # it logs each node at INFO
        try:
            mx_to_onnx(symbol, params, samples, np.float32, path, dynamic=True,
                       dynamic_input_shapes=shapes)
        except Exception as err:   # the converter raises what its translations happen to raise
            raise ValueError(f"MXNet's ONNX converter cannot translate the network "
                             f"({type(err).__name__}: {str(err).strip().splitlines()[0]}); "
                             "export it with onnx=False, or replace the operator it names."
                             ) from None
        finally:
            logger.setLevel(level)
        return onnx.load(path)


def onnx_model(symbol, arrays, metadata):
    """The ONNX model (an ``onnx.ModelProto``) of an exported network.

    Parameters
    ----------
    symbol : Symbol
        The network's graph, with the inputs the metadata names (``input``, or ``inputs``).
    arrays : dict
        Its parameters, ``'arg:NAME'`` / ``'aux:NAME'`` -> NDArray (as a ``.params`` file).
    metadata : dict
        What ``export_model`` writes to ``PREFIX.json``: its outputs' names become the ONNX
        outputs' names, and all of it but the file names and digests travels in the file.

    Raises
    ------
    ValueError
        If the converter cannot translate the network, or an output is named as an input or
        parameter of the graph.
    ExportError
        If the ONNX graph's outputs would not be the metadata's, by name and count.
    """
    onnx = _import_onnx()
    model = _converted(_named_outputs(symbol, metadata), arrays, metadata)
    graph = model.graph
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = OPSET
    constants = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in constants]
    del graph.input[:]
    graph.input.extend(inputs)
    _drop_unused_initializers(graph)
    _declare_shapes(graph, metadata)
    if metadata.get("input", {}).get("pixels"):
        _take_pixels(graph, metadata)
    description = {k: v for k, v in metadata.items() if k not in ("files", "sha256")}
    onnx.helper.set_model_props(model, {METADATA_KEY: json.dumps(description)})
    model.producer_name, model.producer_version = "gluonkit", gluonkit.__version__
    model.doc_string = graph.doc_string = _doc_string(metadata)
    _check_outputs(graph, metadata)
    onnx.checker.check_model(model, full_check=True)
    return model


def _drop_unused_initializers(graph):
    """Remove the initializers no node reads (onnxruntime warns of each on every load)."""
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _declare_shapes(graph, metadata):
    """Name the inputs' free axes (``batch``, ``height``, ``width``) and fix what the export
    knows: a batch of ``images_per_call`` where it is 1 (Faster R-CNN), and each classifier
    output's number of classes; the outputs' free first axis is the batch too."""
    batch = metadata.get("images_per_call") if metadata.get("images_per_call") == 1 else None
    names = ["batch", None, "height", "width"]
    for value in graph.input:
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                _set(dim, batch if i == 0 else None,
                     names[i] if i < len(names) else f"axis{i}")
    classes = {o["name"]: o["classes"] for o in metadata["outputs"]}
    for value in graph.output:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            _set(dims[0], batch, "batch")
        known = classes.get(value.name) if metadata["kind"] == "classifier" else None
        if known and len(dims) == 2 and not dims[1].HasField("dim_value"):
            _set(dims[1], len(known), None)


def _take_pixels(graph, metadata):
    """Make the graph take uint8 pixels (``metadata['input']['pixels']``: 'NCHW' or 'NHWC')
    and compute the tensor itself as the preprocessing does, in float32:
    ``(float(pixel) / 255 - mean) / std``, channels first."""
    onnx = _import_onnx()
    helper, p = onnx.helper, metadata["preprocessing"]
    channels, name = p["channels"], graph.input[0].name
    inner = name + "_normalized"
    _rename(graph, name, inner)
    dims = list(graph.input[0].type.tensor_type.shape.dim)
    if metadata["input"]["pixels"] == "NHWC":
        dims = [dims[0], dims[2], dims[3], dims[1]]
    shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
    del graph.input[:]
    graph.input.append(helper.make_tensor_value_info(name, onnx.TensorProto.UINT8, shape))
    per_channel = [1, channels, 1, 1]
    graph.initializer.extend([
        helper.make_tensor(name + "_255", onnx.TensorProto.FLOAT, [], [255.0]),
        helper.make_tensor(name + "_mean", onnx.TensorProto.FLOAT, per_channel,
                           np.float32(p.get("mean", [0.0] * channels)).tolist()),
        helper.make_tensor(name + "_std", onnx.TensorProto.FLOAT, per_channel,
                           np.float32(p.get("std", [1.0] * channels)).tolist())])
    nodes = [helper.make_node("Cast", [name], [name + "_float"], to=onnx.TensorProto.FLOAT)]
    first = name + "_float"
    if metadata["input"]["pixels"] == "NHWC":
        nodes.append(helper.make_node("Transpose", [first], [name + "_nchw"], perm=[0, 3, 1, 2]))
        first = name + "_nchw"
    nodes += [helper.make_node("Div", [first, name + "_255"], [name + "_scaled"]),
              helper.make_node("Sub", [name + "_scaled", name + "_mean"], [name + "_centred"]),
              helper.make_node("Div", [name + "_centred", name + "_std"], [inner])]
    for node in reversed(nodes):
        graph.node.insert(0, node)


def _set(dim, value, name):
    """Make ``dim`` ``value`` where given, else the named free axis ``name``."""
    if value is not None:
        dim.dim_value = value
    elif name is not None:
        dim.dim_param = name


def _doc_string(metadata):
    """The graph's description: what goes in and what comes out."""
    outputs = (f"outputs {', '.join(repr(o['name']) for o in metadata['outputs'])}"
               + (f": {metadata['values']}." if metadata.get("values") else "."))
    head = f"A {metadata['kind']} exported by gluonkit {gluonkit.__version__}: "
    if "inputs" in metadata:
        return (head + "float32 inputs " + ", ".join(
            f"{spec['name']!r} ({'x'.join(map(str, spec['shape']))} per sample)"
            for spec in metadata["inputs"]) + "; " + outputs)
    shape = "x".join(map(str, metadata["input"]["shape"]))
    return (head + f"input {metadata['input']['name']!r}, "
            + (f"uint8 {metadata['input']['pixels']} pixels, normalized in the graph"
               if metadata["input"].get("pixels") else "float32 NCHW")
            + f" ({shape} at export), "
            f"{metadata['input'].get('color', 'as given')} images preprocessed as the "
            f"'gluonkit' metadata property says (docs/preprocessing.md); " + outputs)


def export_onnx(prefix, onnx_file=None):
    """Write ``PREFIX.onnx`` (or ``onnx_file``) from an export's ``PREFIX-symbol.json``,
    ``-NNNN.params`` and ``.json``, and record it in ``PREFIX.json``. ``prefix`` may also be
    the run folder that holds the export, or one of its files (as ``gluonkit.predict`` takes).

    ``gluonkit.export_model`` writes ``model.onnx`` itself when the onnx package is installed;
    this converts exports made without it.

    Returns
    -------
    str
        The path of the ONNX file.

    Raises
    ------
    ImportError
        Without the onnx package (``pip install "onnx<1.16"``).
    FileNotFoundError, gluonkit.export.ExportError
        For a missing or damaged export, naming the file.

    Example::

        >>> gluonkit.export_onnx("runs/classify/model")
        'runs/classify/model.onnx'
    """
    prefix = model_prefix(prefix)
    metadata = read_metadata(prefix)
    files = model_files(prefix, metadata)
    symbol = mx.sym.load(files["symbol"])
    arrays = mx.nd.load(files["params"])
    model = onnx_model(symbol, arrays, metadata)
    path = os.fspath(onnx_file) if onnx_file is not None else f"{prefix}.onnx"
    folder = os.path.dirname(os.path.abspath(path))
    atomic_replace(folder, {os.path.basename(path): lambda f: f.write(model.SerializeToString())})
    if folder == os.path.dirname(os.path.abspath(prefix)):
        metadata["files"]["onnx"] = os.path.basename(path)
        metadata["sha256"]["onnx"] = file_sha256(path)
        atomic_replace(folder, {os.path.basename(f"{prefix}.json"): lambda f: f.write(
            (json.dumps(metadata, indent=1) + "\n").encode())})
    return path
