"""The running statistics a dropped update window returns to (BatchNorm's running mean and variance)."""
import math
from collections import defaultdict

import mxnet as mx

__all__ = ["RunningStatistics"]


class RunningStatistics:
    """A copy of the arrays a forward pass updates, taken at a window's start; ``restore`` puts it back.

    Those are the non-differentiable parameters (frozen weights never change: not copied).
    The arrays of one device and dtype are copied by one operator, into one flat array. Those
    still waiting for deferred initialization are noted instead: a dropped window that
    initialized them sets them back to their initializer's values. (``Parameter._data`` and
    ``_differentiable`` are MXNet's only record of both.)
    """

    def __init__(self, params):
        groups = defaultdict(list)   # (context, dtype) -> [(param, device index, array)]
        statistics = [param for param in params if not param._differentiable]
        for param in statistics:
            if param._data is not None:
                for i, array in enumerate(param.list_data()):
                    if array.size:
                        groups[(array.context, array.dtype)].append((param, i, array))
        self._copies = [([(param, i, array.shape) for param, i, array in members],
                         mx.nd.concat(*(array.reshape((-1,)) for _, _, array in members), dim=0))
                        for members in groups.values()]
        self._uninitialized = [param for param in statistics if param._data is None]

    def restore(self):
        """Set the statistics back to the copy (those initialized since, to their initial values)."""
        for members, flat in self._copies:
            begin = 0
            for param, i, shape in members:
                end = begin + math.prod(shape)
                if param._data is not None:
                    flat[begin:end].reshape(shape).copyto(param.list_data()[i])
                begin = end
        for param in self._uninitialized:
            # BatchNorm names its statistics' initializers ('zeros', 'ones'); as Parameter does
            if param._data is not None and param.init is not None:
                for array in param.list_data():
                    mx.init.create(param.init)(mx.init.InitDesc(param.name, {"__init__": param.init}), array)
