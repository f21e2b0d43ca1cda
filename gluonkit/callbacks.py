"""Callbacks for ``gluonkit.fit``: ``from gluonkit.callbacks import ModelCheckpoint, ...``.

The classes live in ``gluonkit.train.callbacks`` (``MergeRunningStatistics`` in
``gluonkit.train.worker_statistics``); this module is their public address.
"""
from .train.callbacks import (Callback, EarlyStopping, HistoryLogger, LRSchedule, ModelCheckpoint,
                              PlotCurves)
from .train.worker_statistics import MergeRunningStatistics

__all__ = ["Callback", "ModelCheckpoint", "EarlyStopping", "LRSchedule", "HistoryLogger",
           "PlotCurves", "MergeRunningStatistics"]
