"""What the workers of a distributed job agree on at every update, in one small message.

Before the gradients move, every worker sends one float64 vector and gets back its sum over
the workers: the window's count, its micro-batches, whether the worker still has data
(``step``) or is out of it (``flush``), whether it was asked to stop, and which parameters
got a gradient. From the sums, every worker takes the same decisions: the update's count,
which parameters every worker pushes (those with a gradient on any worker: a worker
without one pushes zeros, so that no worker waits for a key another never sends), whether
any worker still has data (a worker out of data takes part in the others' updates with a
count of 0) and whether the job stops after this update.
"""
import mxnet as mx
import numpy as np

from ._window import whole

__all__ = ["Agreement", "Rounds"]

_FIELDS = 4   # count, micro-batches, workers with data, stop requests; then one flag per parameter


class Agreement:
    """The sums of one round: ``count`` (a number), ``steps``, ``active`` (workers that sent a
    window from ``step``, i.e. that still have data), ``stop`` (bool) and ``fresh`` (a bool per
    parameter: it got a gradient on some worker)."""

    def __init__(self, sums):
        self.count = whole(float(sums[0]))
        self.steps, self.active = int(sums[1]), int(sums[2])
        self.stop = bool(sums[3] > 0)
        self.fresh = [bool(f > 0) for f in sums[_FIELDS:]]


class Rounds:
    """One worker's side of the rounds: its stop request and what the last round agreed.

    Parameters
    ----------
    key : int
        The kvstore key of the round's vector (one past the parameters' keys).
    size : int
        Number of parameters.
    """

    def __init__(self, key, size):
        self.key, self.size = key, size
        self.ready = False
        self.stop_requested = False   # this worker asks the job to stop
        self.stopping = False         # a round carried a stop request: every worker stops after it
        self.others_active = False    # in the last round, another worker still had data
        self._sum_keys = {}           # length -> kvstore key of sum_over_workers' vectors

    def exchange(self, kvstore, count, arrays, steps, active, fresh):
        """Send this worker's window to ``kvstore`` and read the sums (one wait, a small message).

        ``count`` is the window's count given as numbers, ``arrays`` the NDArray counts,
        ``steps`` its micro-batches, ``active`` whether it came from ``step`` (the worker
        still has data), ``fresh`` a bool per parameter. Returns an :class:`Agreement`.
        """
        values = np.zeros(_FIELDS + self.size, dtype="float64")
        values[:_FIELDS] = count, steps, float(active), float(self.stop_requested)
        values[_FIELDS:] = fresh
        vector = mx.nd.array(values, ctx=mx.cpu(), dtype="float64")
        if arrays:
            vector[0:1] += mx.nd.add_n(*(a.reshape((1,)).as_in_context(mx.cpu()).astype("float64", copy=False)
                                         for a in arrays))
        if not self.ready:
            kvstore.init(self.key, mx.nd.zeros(values.shape, dtype="float64"))
            self.ready = True
        kvstore.pushpull(self.key, vector, out=vector)
        agreed = Agreement(vector.asnumpy())
        self.stopping = self.stopping or agreed.stop
        self.others_active = agreed.active > int(active)
        return agreed

    def sum_over_workers(self, kvstore, values):
        """``values`` (a 1-d float64 NumPy array) summed over the workers; every worker must call
        it, in the same order, with the same length."""
        key = self._sum_keys.get(values.size)
        if key is None:
            key = self._sum_keys[values.size] = self.key + 1 + len(self._sum_keys)
            kvstore.init(key, mx.nd.zeros(values.size, dtype="float64"))
        vector = mx.nd.array(values, ctx=mx.cpu(), dtype="float64")
        kvstore.pushpull(key, vector, out=vector)
        return vector.asnumpy()
