"""What the workers of a distributed job agree on at every update, in one small message.

Before the gradients move, every worker sends one float64 vector and gets back its sum over
the workers: the window's count, its micro-batches, whether the worker still has data
(``step``) or is out of it (``flush``), whether it was asked to stop, and which parameters
got a gradient. From the sums every worker takes the same decisions: the update's count,
which parameters every worker pushes (those with a gradient on any worker: a worker without
one pushes zeros, so that no worker waits for a key another never sends), whether any worker
still has data (a worker out of data takes part in the others' updates with a count of 0)
and whether the job stops after this update.

The sums go through ``_reduce_over_workers(values, name)``, the one method an engine
provides: here the kvstore's ``pushpull`` on keys after the parameters' (another engine, such
as an all-reduce, overrides it).
"""
import mxnet as mx
import numpy as np

from ._gradients import replicas
from ._window import whole

__all__ = ["Agreement", "Workers"]

_FIELDS = 4   # count, micro-batches, workers with data, stop requests; then one flag per parameter


class Agreement:
    """The sums of one round: ``count`` (a number), ``steps``, ``active`` (workers that still
    have data), ``stop`` (bool) and ``fresh`` (a bool per parameter: a gradient on some worker)."""

    def __init__(self, sums):
        self.count = whole(float(sums[0]))
        self.steps, self.active = int(sums[1]), int(sums[2])
        self.stop = bool(sums[3] > 0)
        self.fresh = [bool(f > 0) for f in sums[_FIELDS:]]


class Workers:
    """The workers' side of ``gluonkit.Trainer`` (a mixin): rounds, stop requests, sums.

    Without a distributed kvstore (``_distributed`` False) there is one worker: a stop request
    is agreed at once and sums are the values themselves.
    """

    def _init_workers(self):
        self._stop_requested = False   # this worker asks the job to stop
        self._stop_agreed = False      # a round carried a stop request: every worker stops after it
        self._others_active = False    # in the last round, another worker still had data
        self._reduce_keys = {}         # name -> kvstore key of the vectors summed under that name

    def request_stop(self):
        """Ask the job to stop: ``stopping`` becomes True on every worker after the next update.

        Without a distributed kvstore it becomes True at once. ``fit`` calls it on SIGINT or
        SIGTERM, so that every worker stops after the same update.
        """
        self._stop_requested = True
        self._stop_agreed = self._stop_agreed or not self._distributed

    @property
    def stopping(self):
        """bool: Whether a worker asked to stop (``request_stop``) and every worker agreed, at the
        last update, to stop after it."""
        return self._stop_agreed

    @property
    def workers_busy(self):
        """bool: Whether, at the last update, another worker still had data (a flushing worker
        then takes part in the next update too), and the job is not stopping."""
        return self._others_active and not self._stop_agreed

    def sum_over_workers(self, values):
        """``values`` (numbers) summed over the workers, as a float64 NumPy array; ``values``
        themselves without a distributed kvstore.

        A collective: every worker calls it at the same point, with as many values (e.g. to
        add up what each worker saw in an epoch).

        Example::

            total_samples, correct = trainer.sum_over_workers([samples, correct])
        """
        values = np.asarray(values, dtype="float64").reshape(-1)
        return self._reduce_over_workers(values, f"sum{values.size}") if self._distributed else values

    def _agree(self, count, steps, active):
        """Send this worker's window (``count`` a number, ``steps`` micro-batches, ``active``:
        it still has data) with its fresh-gradient flags; return the sums, an :class:`Agreement`."""
        fresh = [p.grad_req != "null" and p._data is not None and any(a._fresh_grad for a in replicas(p))
                 for p in self._params]
        values = np.concatenate([[count, steps, float(active), float(self._stop_requested)],
                                 np.asarray(fresh, dtype="float64")])
        agreed = Agreement(self._reduce_over_workers(values, "round"))
        self._stop_agreed = self._stop_agreed or agreed.stop
        self._others_active = agreed.active > int(active)
        return agreed

    def _reduce_over_workers(self, values, name):
        """``values`` (float64, 1-d) summed over the workers by the kvstore, on a key of ``name``'s own."""
        key = self._reduce_keys.get(name)
        if key is None:   # after the parameters' keys; every worker creates them in the same order
            key = self._reduce_keys[name] = len(self._params) + len(self._reduce_keys)
            self._kvstore.init(key, mx.nd.zeros(values.size, dtype="float64"))
        vector = mx.nd.array(values, ctx=mx.cpu(), dtype="float64")
        self._kvstore.pushpull(key, vector, out=vector)
        return vector.asnumpy()
