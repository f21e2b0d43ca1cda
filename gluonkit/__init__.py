"""gluonkit: a Gluon-first training toolkit for Apache MXNet 1.9.1.

Exact gradient accumulation over micro-batches and devices, multi-branch networks that are
safe with deferred initialization, per-block parameter helpers, recipes and benchmarks.

Where things live: :mod:`gluonkit.trainer` (the Trainer: one update from a window of
gradients), :mod:`gluonkit.train` (the fit wing: ``fit``, ``evaluate``, checkpoints, resume,
callbacks, metrics), :mod:`gluonkit.data`, :mod:`gluonkit.nn`, :mod:`gluonkit.autograd`,
:mod:`gluonkit.launch` (distributed jobs), :mod:`gluonkit.recipes` (the commands), and the
single modules ``split``, ``params``, ``names``, ``ops``, ``export``, ``inference``,
``validate`` (argument checks) and ``atomic`` (atomic file writes).
"""
__version__ = "0.1.0"

from ._check import check_at_import as _check_at_import

_check_at_import()

from . import autograd, data, names, nn, ops, params  # noqa: E402
from . import callbacks  # noqa: E402
from .data.images import ImageError  # noqa: E402
from .export import ExportError, export_model  # noqa: E402
from .inference import iter_predict, load_model, predict  # noqa: E402
from .split import split_and_load  # noqa: E402
from .train.checkpoint import Checkpoint, CheckpointError  # noqa: E402
from .train.loop import evaluate, fit  # noqa: E402
from .train.resume import Epochs  # noqa: E402
from .trainer import Trainer  # noqa: E402

__all__ = ["__version__", "Trainer", "split_and_load", "fit", "evaluate", "Checkpoint", "Epochs",
           "CheckpointError", "export_model", "load_model", "predict", "iter_predict",
           "ExportError", "ImageError",
           "autograd", "callbacks", "data", "names", "nn", "ops", "params"]
