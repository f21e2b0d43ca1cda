"""An exported ``model.onnx`` loaded in onnxruntime, with the metadata it carries."""
import json
import os

from ..metadata import ExportError, ExportedModel, description_problem

__all__ = ["OnnxModel", "load"]

_KEY = "gluonkit"       # the metadata property export_model writes (gluonkit.onnx_export)
_INSTALL = 'pip install onnxruntime "numpy>=1.24" pillow'
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
        return all(isinstance(n, int) for n in self.runtime.get_inputs()[0].shape[2:])

    def run(self, batch):
        """The network's outputs (NumPy arrays, in the metadata's order) for ``batch``
        (N, C, H, W float32)."""
        return self.runtime.run([o["name"] for o in self.outputs],
                                {self.metadata["input"]["name"]: batch})


def load(path, threads=None):
    """Load ``path`` (a ``model.onnx`` written by ``gluonkit.export_model``) as an
    :class:`OnnxModel`; ``threads`` caps onnxruntime's threads within an operator.

    Raises
    ------
    ImportError
        Without onnxruntime, with the pip command that installs it.
    FileNotFoundError
        If there is no such file.
    gluonkit.metadata.ExportError
        (a ``ValueError``) For a file that is not an ONNX model, or not one that gluonkit
        wrote (no metadata), naming the file.
    """
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError(f"gluonkit.serve needs onnxruntime ({err}); {_INSTALL}.") from None
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist; pass the model.onnx that the export "
                                "wrote beside model.json (e.g. runs/classify/model.onnx).")
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
    if missing or [i.name for i in runtime.get_inputs()] != [metadata["input"]["name"]]:
        raise ExportError(f"{path} has inputs {[i.name for i in runtime.get_inputs()]} and "
                          f"outputs {sorted(names)}, not those its metadata names; {_REDO}.")
    return OnnxModel(runtime, metadata, path)
