"""gluonkit: a Gluon-first training toolkit for Apache MXNet 1.9.1.

Exact gradient accumulation over micro-batches and devices, multi-branch networks that are
safe with deferred initialization, per-block parameter helpers, recipes and benchmarks.

Where things live: :mod:`gluonkit.trainer` (the Trainer: one update from a window of
gradients), :mod:`gluonkit.train` (the fit wing: ``fit``, ``evaluate``, checkpoints, resume,
callbacks, metrics), :mod:`gluonkit.data`, :mod:`gluonkit.nn`, :mod:`gluonkit.autograd`,
:mod:`gluonkit.launch` (distributed jobs), :mod:`gluonkit.recipes` (the commands), and the
single modules ``split``, ``params``, ``names``, ``ops``, ``validate`` (argument checks),
``versions`` (the mxnet and numpy check), ``commands`` (what a command sets before MXNet
loads) and ``atomic`` (atomic file writes).
:mod:`gluonkit.deploy` holds exported models: its MXNet side (``export``, ``onnx_export``,
``onnx_detection``, ``inference``) and the side that never imports mxnet (``metadata``,
``imagefiles``, ``preprocessing``, ``results``, ``serve``: ``model.onnx`` where MXNet is not
installed). Their modules keep their public addresses: ``gluonkit.serve``,
``gluonkit.inference``, ... are the modules of ``gluonkit.deploy``.

The public names load on first use (``gluonkit.Trainer``, ``from gluonkit import fit``), and
the first use checks that mxnet and numpy are versions gluonkit works with: importing
``gluonkit.serve`` never imports mxnet.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

__version__ = "0.1.0"

#: Public name -> the module that defines it (a submodule's own name for the subpackages).
_PUBLIC = {
    "Trainer": ".trainer", "check_accumulation": ".trainer.self_check", "split_and_load": ".split", "fit": ".train.loop",
    "evaluate": ".train.evaluate", "Checkpoint": ".train.checkpoint", "Epochs": ".train.resume",
    "seed_all": ".train.resume",
    "CheckpointError": ".train.checkpoint", "export_model": ".deploy.export",
    "export_onnx": ".deploy.onnx_export", "load_model": ".deploy.inference",
    "predict": ".deploy.inference", "iter_predict": ".deploy.inference",
    "ExportError": ".deploy.metadata", "ImageError": ".data.images",
    "autograd": None, "callbacks": None, "data": None, "names": None, "nn": None, "ops": None,
    "params": None}

__all__ = ["__version__", *_PUBLIC]


#: The modules that import no MXNet (what gluonkit.serve needs): no version check for them.
_WITHOUT_MXNET = {"serve", "metadata", "imagefiles", "preprocessing", "results", "validate",
                  "atomic", "errors", "versions", "commands", "deploy"}
#: The modules of :mod:`gluonkit.deploy`, also found at their first addresses (gluonkit.serve).
_DEPLOYED = ("export", "onnx_export", "onnx_detection", "inference", "metadata",
             "preprocessing", "results", "imagefiles", "serve")


class _DeployedAddress(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``gluonkit.serve`` (and ``gluonkit.serve.images``, ``gluonkit.inference``, ...)
    as the very module of ``gluonkit.deploy`` (one module object under two names), and runs
    ``python -m gluonkit.serve``."""

    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != __name__ or parts[1] not in _DEPLOYED:
            return None
        real = ".".join([__name__, "deploy"] + parts[1:])
        found = importlib.util.find_spec(real)
        if found is None:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=found.origin,
                                              is_package=found.submodule_search_locations
                                              is not None)
        spec.loader_state = real
        return spec

    def create_module(self, spec):
        return importlib.import_module(spec.loader_state)

    def exec_module(self, module):
        """Nothing: the module ran under its ``gluonkit.deploy`` name."""

    def get_code(self, fullname):
        """The code of the module (for ``python -m``), read where it lives."""
        real = ".".join([__name__, "deploy"] + fullname.split(".")[1:])
        return importlib.util.find_spec(real).loader.get_code(real)


sys.meta_path.insert(0, _DeployedAddress())   # before an editable install's own finder


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
