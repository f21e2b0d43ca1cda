"""Callbacks for ``gluonkit.fit``: ``from gluonkit.callbacks import ModelCheckpoint, ...``.

The classes live in ``gluonkit.train.callbacks``; this module is their public address.
"""
from .train.callbacks import (Callback, EarlyStopping, HistoryLogger, LRSchedule, ModelCheckpoint,
                              PlotCurves)

__all__ = ["Callback", "ModelCheckpoint", "EarlyStopping", "LRSchedule", "HistoryLogger",
           "PlotCurves"]
