"""An exported ``model.onnx`` loaded in onnxruntime, with the metadata it carries."""
import json
import os

from ..metadata import (ExportError, ExportedModel, description_problem, file_sha256, input_specs,
                        read_metadata)
from ...validate import positive_int, process_cpus

__all__ = ["OnnxModel", "load", "check_threads"]

_KEY = "gluonkit"       # the metadata property export_model writes (gluonkit.onnx_export)
_INSTALL = 'pip install onnxruntime "numpy>=1.24" pillow opencv-python-headless'
_REDO = "export the model again with gluonkit (gluonkit.export_onnx(prefix))"


class OnnxModel(ExportedModel):
    """A ``model.onnx`` written by gluonkit, ready to run: ``runtime`` (an onnxruntime
    ``InferenceSession``), ``metadata`` (kind, input, outputs with class names,
    preprocessing, as ``model.json``) and ``path``."""

    def __init__(self, runtime, metadata, path):
        self.runtime, self.metadata, self.path = runtime, metadata, path

    @property
    def batches(self):
        """Whether the network runs batches: one image per call where its input's height
        and width vary (as Faster R-CNN's graph, which the converter fixed at one image)."""
        shape = self.runtime.get_inputs()[0].shape
        spatial = shape[1:3] if self.inputs[0].get("pixels") == "NHWC" else shape[2:]
        return all(isinstance(n, int) for n in spatial)

    def run(self, *arrays):
        """The network's outputs (NumPy arrays, in the metadata's order) for ``arrays``, a
        batch per input in the order of :attr:`inputs` (an image model's: N, C, H, W float32;
        or uint8 pixels where the graph normalizes them).

        Example::

            >>> model = gluonkit.serve.load("triplet.onnx")
            >>> distance, embedding = model.run(anchor, positive, negative)
        """
        if len(arrays) != len(self.inputs):
            names = ", ".join(spec["name"] for spec in self.inputs)
            raise TypeError(f"{self.path} takes {len(self.inputs)} input(s) ({names}), one "
                            f"batch each, got {len(arrays)}; call run({names}).")
        return self.runtime.run([o["name"] for o in self.outputs],
                                {spec["name"]: array for spec, array in zip(self.inputs, arrays)})


def check_threads(threads, name="threads"):
    """``threads`` as an int from 1 to the CPUs this process may use (its affinity where the
    system tells it, else all); ``TypeError`` for no integer, ``ValueError`` out of range."""
    threads, usable = positive_int(threads, name), process_cpus()
    if threads > usable:
        raise ValueError(f"{name} must be at most {usable}, the CPUs this process may use, "
                         f"got {threads}.")
    return threads


def _check_digest(path):
    """``ExportError`` if the export's ``PREFIX.json`` beside ``path`` (``PREFIX.onnx``, found by
    the prefix as the MXNet files are) records another SHA-256 for it, or none (an export without
    an ONNX file: this one is left from an earlier export); nothing to check where the file came
    alone or the JSON file beside it is not an export's metadata."""
    prefix, suffix = os.path.splitext(path)
    if suffix != ".onnx" or not os.path.isfile(prefix + ".json"):
        return
    try:
        metadata = read_metadata(prefix)
    except ExportError:             # another JSON file: model.onnx carries its own metadata
        return
    if "onnx" not in metadata["sha256"]:
        raise ExportError(f"{path} is not from the export {prefix}.json describes: that export "
                          "wrote no ONNX file (it was exported with onnx=False, or its ONNX "
                          "conversion was refused), so this one is left from an earlier export; "
                          f"delete it, or {_REDO}.")
    if file_sha256(path) != metadata["sha256"]["onnx"]:
        raise ExportError(f"{path} is not the file {prefix}.json was exported with (its SHA-256 "
                          "differs): it is damaged, cut short, or from another export; copy "
                          f"the files of one export together, or {_REDO}.")


def _check_classes(path, runtime, metadata):
    """``ExportError`` unless each classifier output has as many scores as its class names."""
    shapes = {value.name: value.shape for value in runtime.get_outputs()}
    for output in metadata["outputs"] if metadata["kind"] == "classifier" else ():
        scores = shapes[output["name"]][-1] if shapes[output["name"]] else None
        if output["classes"] is not None and isinstance(scores, int) \
                and scores != len(output["classes"]):
            raise ExportError(f"{path} names {len(output['classes'])} classes for its output "
                              f"{output['name']!r}, whose graph gives {scores} scores; {_REDO}.")


def load(path, threads=None):
    """Load ``path`` (a ``model.onnx`` written by ``gluonkit.export_model``) as an
    :class:`OnnxModel`; ``threads`` caps onnxruntime's threads within an operator (at most
    the CPUs this process may use).

    Raises
    ------
    ImportError
        Without onnxruntime, with the pip command that installs it.
    TypeError, ValueError
        For ``threads`` not an integer from 1 to the CPUs this process may use.
    FileNotFoundError
        If there is no such file.
    gluonkit.metadata.ExportError
        (a ``ValueError``) For a file that is not an ONNX model, or not one that gluonkit
        wrote (no metadata), or not the one its export's ``model.json`` beside it records
        (SHA-256), or whose class names do not fit its outputs, naming the file.
    """
    if threads is not None:
        threads = check_threads(threads)
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError(f"gluonkit.serve needs onnxruntime ({err}); {_INSTALL}.") from None
    path = os.fspath(path)
    if os.path.isdir(path):
        inside = os.path.join(path, "model.onnx")
        hint = (f"pass the model file inside it, {inside}" if os.path.isfile(inside) else
                "pass the model.onnx that the export wrote (e.g. runs/classify/model.onnx)")
        raise IsADirectoryError(f"{path} is a directory, not a model file; {hint}.")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist; pass the model.onnx that the export "
                                "wrote beside model.json (e.g. runs/classify/model.onnx).")
    _check_digest(path)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3                     # errors only: no notes on stderr
    if threads is not None:
        options.intra_op_num_threads = threads
    try:
        runtime = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception:   # onnxruntime's errors have no common public base class
        raise ExportError(f"{path} does not load as an ONNX model (it is empty, cut short, "
                          f"damaged or another kind of file); {_REDO}.") from None
    text = runtime.get_modelmeta().custom_metadata_map.get(_KEY)
    if text is None:
        raise ExportError(f"{path} carries no gluonkit metadata (class names, preprocessing): "
                          f"it was not written by gluonkit.export_model; {_REDO}.")
    try:
        metadata = json.loads(text)
    except (ValueError, RecursionError):
        metadata = None
    problem = description_problem(metadata, files=False) if metadata is not None \
        else "holds metadata that is not JSON"
    if problem:
        raise ExportError(f"{path} {problem}; {_REDO}.")
    names = {value.name for value in runtime.get_outputs()}
    missing = [o["name"] for o in metadata["outputs"] if o["name"] not in names]
    inputs = sorted(spec["name"] for spec in input_specs(metadata))
    if missing or sorted(i.name for i in runtime.get_inputs()) != inputs:
        raise ExportError(f"{path} has inputs {[i.name for i in runtime.get_inputs()]} and "
                          f"outputs {sorted(names)}, not those its metadata names; {_REDO}.")
    _check_classes(path, runtime, metadata)
    return OnnxModel(runtime, metadata, path)
