"""The accumulation window: the micro-batches a Trainer has collected since its last update."""
import atexit
import math
import warnings
import weakref

import mxnet as mx

from ._gradients import read
from ._statistics import RunningStatistics

__all__ = ["Window", "whole"]

_OPEN = weakref.WeakSet()   # the windows of the trainers alive, checked at exit


def whole(count):
    """A count read from an NDArray: an int when it is whole (as the integers it sums)."""
    return int(count) if math.isfinite(count) and float(count).is_integer() else count


class Window:
    """How many micro-batches were stepped since the last update, what they counted, and the
    running statistics a dropped window returns to.

    Counts given as numbers are summed on the host; those given as NDArrays stay on their
    devices, unread, until the update adds them up. The gradients themselves live in the
    parameters (``grad_req='add'``).
    """

    def __init__(self):
        self.steps = 0
        self.count = 0       # the numbers' sum
        self.arrays = []     # the NDArray counts, not read
        self.unbacked = []   # the NDArray counts stepped without a backward: 0, or an error at the update
        self.statistics = None
        self.saved = False   # the pending steps are in a state_dict (a checkpoint keeps them)
        if not _OPEN:
            atexit.unregister(_warn_at_exit)   # registered once
            atexit.register(_warn_at_exit)
        _OPEN.add(self)

    def add(self, count, without_backward=False):
        """Count one micro-batch: ``count`` a number or a one-element float64 NDArray (one
        stepped ``without_backward`` must read 0, checked by ``without_backward()``)."""
        if without_backward:
            self.unbacked.append(count)
        elif isinstance(count, mx.nd.NDArray):
            self.arrays.append(count)
        else:
            self.count += count
        self.steps += 1
        self.saved = False

    def take(self):
        """``(count, arrays)`` of the window, which is empty afterwards."""
        taken = self.count, self.arrays
        self.steps, self.count, self.arrays, self.unbacked = 0, 0, [], []
        return taken

    def total(self):
        """``(steps, count)``, the NDArray counts read and added (a wait)."""
        return self.steps, self.count + _read_sum(self.arrays + self.unbacked)

    def without_backward(self):
        """The sum of the NDArray counts stepped without a backward (read: a wait, only where
        there are some); 0 unless a step counted samples it never ran a backward for."""
        return _read_sum(self.unbacked)

    def replace(self, steps, count):
        """Take ``steps`` micro-batches that counted ``count`` (a number) as the window (one
        loaded from a saved state, which keeps it)."""
        self.steps, self.count, self.arrays, self.unbacked = steps, count, [], []
        self.saved = True

    def mark_saved(self):
        """Note that a state_dict holds the pending steps: they are not lost if never applied."""
        self.saved = True

    def snapshot(self, params, droppable):
        """Copy the running statistics of ``params`` to return to if the window is dropped;
        nothing when no window can be dropped."""
        self.statistics = RunningStatistics(params) if droppable else None

    def restore_statistics(self):
        """Set the running statistics back to the window's start (a dropped window)."""
        if self.statistics is not None:
            self.statistics.restore()


def _read_sum(arrays):
    """The sum of one-element NDArrays, read (0 for none, without a wait)."""
    if not arrays:
        return 0
    return whole(read(mx.nd.add_n(*(a.as_in_context(mx.cpu()) for a in arrays)))[0])


def _warn_at_exit():
    """Warn of each live trainer's micro-batches never applied nor saved (a loop of one's own
    that forgot ``flush``)."""
    for window in list(_OPEN):
        if window.steps and not window.saved:
            warnings.warn(f"a gluonkit.Trainer ended with {window.steps} micro-batch(es) stepped since its "
                          "last update, never applied: call trainer.flush() at the end of each epoch (fit "
                          "does), or save them with a Checkpoint.", UserWarning, stacklevel=1)
