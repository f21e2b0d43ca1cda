"""gluonkit: a Gluon-first training toolkit for Apache MXNet 1.9.1.

Exact gradient accumulation over micro-batches and devices, multi-branch networks that are
safe with deferred initialization, per-block parameter helpers, recipes and benchmarks.

Where things live: :mod:`gluonkit.trainer` (the Trainer: one update from a window of
gradients), :mod:`gluonkit.train` (the fit wing: ``fit``, ``evaluate``, checkpoints, resume,
callbacks, metrics), :mod:`gluonkit.data`, :mod:`gluonkit.nn`, :mod:`gluonkit.autograd`,
:mod:`gluonkit.launch` (distributed jobs), :mod:`gluonkit.recipes` (the commands), and the
single modules ``split``, ``params``, ``names``, ``ops``, ``export``, ``onnx_export``,
``inference``, ``validate`` (argument checks), ``versions`` (the mxnet and numpy check),
``commands`` (what a command sets before MXNet loads) and ``atomic`` (atomic file writes).
:mod:`gluonkit.serve` predicts with ``model.onnx`` where MXNet is not installed.

The public names load on first use (``gluonkit.Trainer``, ``from gluonkit import fit``), and
the first use checks that mxnet and numpy are versions gluonkit works with: importing
``gluonkit.serve`` never imports mxnet.
"""
import importlib
import importlib.util

__version__ = "0.1.0"

#: Public name -> the module that defines it (a submodule's own name for the subpackages).
_PUBLIC = {
    "Trainer": ".trainer", "split_and_load": ".split", "fit": ".train.loop",
    "evaluate": ".train.evaluate", "Checkpoint": ".train.checkpoint", "Epochs": ".train.resume",
    "seed_all": ".train.resume",
    "CheckpointError": ".train.checkpoint", "export_model": ".export",
    "export_onnx": ".onnx_export", "load_model": ".inference", "predict": ".inference",
    "iter_predict": ".inference", "ExportError": ".metadata", "ImageError": ".data.images",
    "autograd": None, "callbacks": None, "data": None, "names": None, "nn": None, "ops": None,
    "params": None}

__all__ = ["__version__", *_PUBLIC]


#: The modules that import no MXNet (what gluonkit.serve needs): no version check for them.
_WITHOUT_MXNET = {"serve", "metadata", "imagefiles", "preprocessing", "results", "validate",
                  "atomic", "errors", "versions", "commands"}


def __getattr__(name):
    """Import a public name or a submodule (``gluonkit.export``) on first use, after the
    version check for those that need MXNet (PEP 562)."""
    if name not in _PUBLIC and importlib.util.find_spec(f"{__name__}.{name}") is None:
        raise AttributeError(f"module 'gluonkit' has no attribute {name!r}")
    if name not in _WITHOUT_MXNET:
        from .versions import check_at_import

        check_at_import()
    module = importlib.import_module(_PUBLIC.get(name) or f".{name}", __name__)
    value = getattr(module, name) if _PUBLIC.get(name) else module
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
