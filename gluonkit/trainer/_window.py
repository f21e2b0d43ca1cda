"""The accumulation window: the micro-batches a Trainer has collected since its last update."""
import math

import mxnet as mx

from ._gradients import read
from ._statistics import RunningStatistics

__all__ = ["Window", "whole"]


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
        self.statistics = None

    def add(self, count):
        """Count one micro-batch: ``count`` a number or a one-element float64 NDArray."""
        if isinstance(count, mx.nd.NDArray):
            self.arrays.append(count)
        else:
            self.count += count
        self.steps += 1

    def take(self):
        """``(count, arrays)`` of the window, which is empty afterwards."""
        taken = self.count, self.arrays
        self.steps, self.count, self.arrays = 0, 0, []
        return taken

    def total(self):
        """``(steps, count)``, the NDArray counts read and added (a wait)."""
        count = self.count
        if self.arrays:
            count += whole(read(mx.nd.add_n(*(a.as_in_context(mx.cpu()) for a in self.arrays)))[0])
        return self.steps, count

    def replace(self, steps, count):
        """Take ``steps`` micro-batches that counted ``count`` (a number) as the window."""
        self.steps, self.count, self.arrays = steps, count, []

    def snapshot(self, params, droppable):
        """Copy the running statistics of ``params`` to return to if the window is dropped;
        nothing when no window can be dropped."""
        self.statistics = RunningStatistics(params) if droppable else None

    def restore_statistics(self):
        """Set the running statistics back to the window's start (a dropped window)."""
        if self.statistics is not None:
            self.statistics.restore()
