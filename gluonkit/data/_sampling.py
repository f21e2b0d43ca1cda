"""Seeded sampling shared by the bucketing and multi-scale samplers, and their loader."""
import mxnet as mx
import numpy as np
from mxnet import gluon

from ..validate import is_int, non_negative_int
from .worker_signals import own_process_group

__all__ = ["LAST_BATCH_MODES", "seed_or_draw", "Order", "SeededEpochs", "DataLoader"]

#: What a sampler does with the samples that do not fill a last batch, as gluon's BatchSampler.
LAST_BATCH_MODES = ("keep", "discard", "rollover")


def seed_or_draw(seed):
    """``seed`` checked, or one drawn from NumPy's global generator (so np.random.seed fixes it)."""
    if seed is None:
        return int(np.random.randint(2 ** 31))
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}.")
    return int(seed)


class Order(gluon.data.Sampler):
    """A sampler over a list of indices whose order is set anew for each epoch."""

    def __init__(self, indices):
        self.order = list(indices)

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


class DataLoader(gluon.data.DataLoader):
    """A ``gluon.data.DataLoader`` that shows its batch sampler as ``batch_sampler``.

    gluon keeps the sampler private; gluonkit's loaders return this class so that their
    sampler (its bucket shapes or sizes, its ``state_dict``) can be reached, and so that
    ``fit`` finds the sampler whose state a checkpoint carries.

    Its batches are on ``cpu(0)`` (``cpu_pinned`` with ``pin_memory=True``), also with
    ``num_workers > 0``, where gluon leaves them in shared memory (``cpu_shared(0)``), which a
    hybridized network on ``cpu(0)`` refuses. Its worker processes are in a process group of
    their own: a SIGTERM to the training process's group stops training (with ``fit``'s
    checkpoint), which then ends them (:mod:`gluonkit.data.worker_signals`).

    Example::

        >>> loader = DataLoader(dataset, batch_sampler=BucketSampler(shapes, 32))
        >>> loader.batch_sampler.buckets.shapes
    """

    def __init__(self, *args, **kwargs):
        with own_process_group():   # a SIGTERM to this process's group reaches it alone
            super().__init__(*args, **kwargs)

    def __iter__(self):
        batches = super().__iter__()
        if self._num_workers == 0 or self._pin_memory:
            return batches
        return (_out_of_shared_memory(batch) for batch in batches)

    @property
    def batch_sampler(self):
        """The sampler of batches of indices (gluon's ``BatchSampler`` unless one was given)."""
        return self._batch_sampler


def _out_of_shared_memory(batch):
    """``batch`` with every NDArray in shared memory (a worker's) copied to ``cpu(0)``."""
    if isinstance(batch, mx.nd.NDArray):
        return batch.as_in_context(mx.cpu(0)) if batch.context.device_type == "cpu_shared" else batch
    if type(batch) in (list, tuple):
        return type(batch)(_out_of_shared_memory(b) for b in batch)
    return batch


class SeededEpochs(gluon.data.Sampler):
    """A sampler whose every epoch is drawn from (seed, epoch) alone, so a run can resume.

    Subclasses cut each epoch into batches with the gluon ``BatchSampler``s in
    ``self._batchers``; with ``last_batch='rollover'`` the samples they carry into the next
    epoch are part of the state.
    """

    def _carried(self):
        """The samples each batcher carries into the next epoch (MXNet keeps them in ``_prev``)."""
        return [list(batcher._prev) for batcher in self._batchers]

    @property
    def epoch(self):
        """int: The epoch the next iteration yields (counted from 0)."""
        return self._epoch

    def set_epoch(self, epoch):
        """Make the next iteration yield epoch ``epoch``'s order (to resume a run)."""
        self._epoch = non_negative_int(epoch, "epoch")

    def state_dict(self):
        """dict: The seed and the epoch the next iteration yields and, with
        ``last_batch='rollover'``, the samples carried into it ('rollover', a list per
        batcher); ``fit`` checkpoints it. JSON values only."""
        state = {"seed": self._seed, "epoch": self._epoch}
        if self._last_batch == "rollover":
            state["rollover"] = self._carried()
        return state

    def load_state_dict(self, state):
        """Continue from ``state_dict()``: the next iteration yields the saved epoch's order
        (after the samples it carries over). Checked first: on ``ValueError`` or ``TypeError``
        nothing changed."""
        keys = {"seed", "epoch"} | ({"rollover"} if self._last_batch == "rollover" else set())
        if not isinstance(state, dict) or not {"seed", "epoch"} <= set(state) <= keys:
            raise ValueError(f"state must be this sampler's state_dict() ({sorted(keys)}), got {state!r}.")
        if state["seed"] is None:
            raise ValueError("state['seed'] is None; pass what state_dict() returned.")
        seed, epoch = seed_or_draw(state["seed"]), non_negative_int(state["epoch"], "state['epoch']")
        carried = self._check_carried(state.get("rollover", [[] for _ in self._batchers]))
        self._seed, self._epoch = seed, epoch
        for batcher, samples in zip(self._batchers, carried):
            batcher._prev = samples   # gluon's BatchSampler has no public setter

    def _check_carried(self, carried):
        """Lists of sample indices, fewer than a batch per batcher; ValueError otherwise."""
        if not (isinstance(carried, list) and len(carried) == len(self._batchers) and all(
                isinstance(samples, list) and len(samples) < self._batch_size
                and all(is_int(i) and 0 <= i < self._num_samples for i in samples) for samples in carried)):
            raise ValueError(f"state['rollover'] must hold {len(self._batchers)} list(s) of fewer than "
                             f"{self._batch_size} sample indices below {self._num_samples}, got {carried!r}; "
                             "pass what state_dict() returned.")
        return [[int(i) for i in samples] for samples in carried]

    def _next_epoch_rng(self):
        """The generator of the epoch about to be yielded; moves on to the next epoch."""
        rng = np.random.default_rng([self._seed, self._epoch])
        self._epoch += 1
        return rng
