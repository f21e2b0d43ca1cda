"""Global batches: the same data order, micro-batches and augmentations on any number of workers.

An epoch's order is drawn from ``(seed, epoch)`` alone and cut into global batches of
``batch_size`` samples, one update each; every global batch is cut into micro-batches of
``micro_batch`` samples (the last may be smaller). Micro-batch ``j`` of a global batch goes to
worker ``j % workers``, and every sample is augmented from the seed of its position in
the epoch's order. So micro-batch ``j`` of global batch ``b`` holds the same samples,
augmented the same way, on 1, 2 or 3 workers; with ``gluonkit.Trainer(accumulate=
sampler.accumulate)``, which sums the workers' counts, N workers running their micro-batches
side by side make the updates of one process accumulating them all.

For inputs of several sizes (multi-scale detection), ``sizes`` gives every global batch one
size, drawn from ``(seed, epoch)`` too: each item is then an ``(index, size)`` pair, as
:class:`~gluonkit.data.MultiScaleDataset` takes it.
"""
import math

import numpy as np
from mxnet import gluon

from ..validate import non_negative_int, positive_int
from ._sampling import DataLoader, seed_or_draw
from .multiscale import check_sizes
from .seeding import SeededDataset, SeededSamples

__all__ = ["GlobalBatchSampler", "global_loader"]


class GlobalBatchSampler(gluon.data.Sampler):
    """This worker's micro-batches of every global batch, in the job's global order.

    Parameters
    ----------
    length : int
        Samples in the (whole, unsharded) dataset: every worker reads all of it.
    batch_size : int
        Samples per global batch (per update, over every worker).
    micro_batch : int
        Samples per micro-batch: what a worker runs in one forward and backward (split over
        its devices). It does not depend on the number of workers.
    rank, workers : int, default 0 and 1
        This worker and the job's workers (``trainer.rank``, ``trainer.num_workers``).
    shuffle : bool, default True
        Draw each epoch's order from ``(seed, epoch)``; False keeps the dataset's order.
    seed : int, optional
        The same on every worker; drawn from NumPy's global generator if None.
    last_batch : {'keep', 'discard'}, default 'keep'
        What becomes of the samples that do not fill a last global batch.
    sizes : list of int or (int, int), optional
        Input sizes (an int is a square, a pair is (height, width)): every ``interval``
        global batches share one, drawn uniformly from ``(seed, epoch)``, and every item
        yielded is an ``(index, size)`` pair. None (the default) yields plain indices.
    interval : int, default 1
        Global batches per drawn size.

    Example::

        >>> import mxnet as mx, gluonkit
        >>> from gluonkit.data import GlobalBatchSampler
        >>> kv = mx.kv.create("device")     # "dist_sync" in each worker under gluonkit-launch
        >>> sampler = GlobalBatchSampler(1000, 64, 16, kv.rank, kv.num_workers, seed=0)
        >>> net = mx.gluon.nn.Dense(10, in_units=64)
        >>> net.initialize()
        >>> trainer = gluonkit.Trainer(net.collect_params(), "sgd", kvstore=kv, accumulate=sampler.accumulate)
        >>> sampler.accumulate, len(sampler)   # 16 global batches, the last of 40 samples in 3
        (4, 63)
    """

    def __init__(self, length, batch_size, micro_batch, rank=0, workers=1, shuffle=True, seed=None,
                 last_batch="keep", sizes=None, interval=1):
        self.length = positive_int(length, "length", "the samples of the dataset")
        self.batch_size = positive_int(batch_size, "batch_size", "samples per global batch")
        self.micro_batch = positive_int(micro_batch, "micro_batch", "samples per micro-batch")
        self.workers = positive_int(workers, "workers", "the job's workers")
        self.rank = non_negative_int(rank, "rank")
        if self.rank >= self.workers:
            raise ValueError(f"rank {rank} is not one of the {workers} workers (0 to {workers - 1}).")
        if self.micro_batch > self.batch_size:
            raise ValueError(f"micro_batch {micro_batch} is larger than the global batch_size {batch_size}; "
                             "pass a micro-batch of at most the global batch.")
        if self.micro_batches_per_batch < self.workers:
            largest = self.largest_micro_batch(self.batch_size, self.workers)
            fix = (f"pass a micro-batch of at most {largest}" if largest else
                   f"pass a batch_size of at least {workers}, or run fewer workers")
            raise ValueError(f"a global batch of {batch_size} holds {self.micro_batches_per_batch} micro-batch(es) "
                             f"of {micro_batch}, fewer than the {workers} workers: some would have nothing to "
                             f"run; {fix}.")
        if last_batch not in ("keep", "discard"):
            raise ValueError(f"last_batch must be 'keep' or 'discard', got {last_batch!r}.")
        if last_batch == "discard" and self.length < self.batch_size:
            raise ValueError(f"last_batch='discard' with {length} samples and global batches of {batch_size} "
                             "leaves no batch; pass last_batch='keep' or a smaller batch_size.")
        self.sizes = None if sizes is None else check_sizes(sizes)
        self.interval = positive_int(interval, "interval", "global batches per drawn size")
        if self.sizes is None and self.interval != 1:
            raise ValueError(f"interval={interval} is the global batches per input size drawn from sizes, but "
                             "sizes is None; pass sizes=[...] too, or leave interval out.")
        self.shuffle, self.last_batch = bool(shuffle), last_batch
        self._seed = seed_or_draw(seed)
        self._epoch = 0
        self.batch_position = 0   # where in the epoch's order the micro-batch last yielded begins

    @property
    def seed(self):
        """int: The seed of the data order (and, in :func:`global_loader`, of the augmentations)."""
        return self._seed

    @staticmethod
    def largest_micro_batch(batch_size, workers):
        """int: The largest micro-batch that cuts a global batch of ``batch_size`` samples into
        at least ``workers`` micro-batches (one or more for every worker); 0 if none does
        (``batch_size`` < ``workers``).

        Example::

            >>> GlobalBatchSampler.largest_micro_batch(8, 3)    # 3 micro-batches: 3, 3 and 2
            3
        """
        return batch_size if workers == 1 else math.ceil(batch_size / (workers - 1)) - 1

    @property
    def micro_batches_per_batch(self):
        """int: Micro-batches in a full global batch (over every worker)."""
        return math.ceil(self.batch_size / self.micro_batch)

    @property
    def accumulate(self):
        """int: This worker's micro-batches in a full global batch: the ``accumulate`` of its
        Trainer (a last, smaller global batch ends the epoch, where ``flush`` applies it)."""
        return len(range(self.rank, self.micro_batches_per_batch, self.workers))

    @property
    def updates_per_epoch(self):
        """int: Global batches (updates) in an epoch."""
        if self.last_batch == "discard":
            return self.length // self.batch_size
        return math.ceil(self.length / self.batch_size)

    @property
    def samples_per_epoch(self):
        """int: Samples an epoch trains on, over every worker."""
        return min(self.length, self.updates_per_epoch * self.batch_size)

    def micro_batch_ranges(self):
        """``[(begin, end), ...]``: every micro-batch of an epoch as positions in its order, over
        every worker, in global order."""
        ranges = []
        for start in range(0, self.samples_per_epoch, self.batch_size):
            stop = min(start + self.batch_size, self.samples_per_epoch)
            ranges.extend((begin, min(begin + self.micro_batch, stop))
                          for begin in range(start, stop, self.micro_batch))
        return ranges

    def own_micro_batches(self):
        """list of int: The global indices (into :meth:`micro_batch_ranges`) of this worker's
        micro-batches, in the order it yields them."""
        per_batch = self.micro_batches_per_batch
        indices, index = [], 0
        for start in range(0, self.samples_per_epoch, self.batch_size):
            count = math.ceil((min(start + self.batch_size, self.samples_per_epoch) - start) / self.micro_batch)
            indices.extend(index + j for j in range(self.rank, min(count, per_batch), self.workers))
            index += count
        return indices

    def share(self):
        """int: The samples of an epoch this worker runs."""
        ranges = self.micro_batch_ranges()
        return sum(ranges[i][1] - ranges[i][0] for i in self.own_micro_batches())

    @property
    def epoch(self):
        """int: The epoch the next iteration yields (counted from 0)."""
        return self._epoch

    def set_epoch(self, epoch):
        """Make the next iteration yield epoch ``epoch``'s order."""
        self._epoch = non_negative_int(epoch, "epoch")

    def order(self, epoch):
        """The dataset's indices in epoch ``epoch``'s order (the same on every worker)."""
        if not self.shuffle:
            return np.arange(self.length)
        return np.random.default_rng([self._seed, epoch]).permutation(self.length)

    def batch_sizes(self, epoch):
        """The input size of every global batch of epoch ``epoch`` (the same on every worker),
        or None without ``sizes``."""
        if self.sizes is None:
            return None
        picks = np.random.default_rng([self._seed, epoch, 1]).integers(
            len(self.sizes), size=math.ceil(self.updates_per_epoch / self.interval))
        return [self.sizes[picks[b // self.interval]] for b in range(self.updates_per_epoch)]

    def __iter__(self):
        epoch, self._epoch = self._epoch, self._epoch + 1
        order, sizes = self.order(epoch), self.batch_sizes(epoch)
        ranges = self.micro_batch_ranges()
        for index in self.own_micro_batches():
            begin, end = ranges[index]
            self.batch_position = begin   # SeededSamples seeds its samples from here
            indices = [int(i) for i in order[begin:end]]
            yield indices if sizes is None else [(i, sizes[begin // self.batch_size]) for i in indices]

    def __len__(self):
        return len(self.own_micro_batches())

    def state_dict(self):
        """dict: The seed and the epoch the next iteration yields (JSON values); the same on
        every worker, so that a checkpoint of any worker resumes any other."""
        return {"seed": self._seed, "epoch": self._epoch}

    def load_state_dict(self, state):
        """Continue from ``state_dict()``. Checked first: on ``ValueError`` nothing changed."""
        if not (isinstance(state, dict) and set(state) == {"seed", "epoch"}):
            raise ValueError(f"state must be a GlobalBatchSampler.state_dict() ({{'seed', 'epoch'}}), got {state!r}.")
        seed, epoch = seed_or_draw(state["seed"]), non_negative_int(state["epoch"], "state['epoch']")
        self._seed, self._epoch = seed, epoch


def global_loader(dataset, batch_size, micro_batch, rank=0, workers=1, shuffle=True, seed=None,
                  last_batch="keep", sizes=None, interval=1, **loader_kwargs):
    """A gluonkit ``DataLoader`` of this worker's micro-batches of ``dataset`` (the whole
    dataset, on every worker), each sample augmented from the seed of its position in the
    epoch's global order (as :func:`seeded_loader`): the same micro-batches on any number of
    workers and data-loading processes.

    ``loader.batch_sampler`` is the :class:`~gluonkit.data.SeededSamples`; its ``sampler`` is
    the :class:`GlobalBatchSampler`, whose ``accumulate`` the Trainer takes; with ``sizes``
    (and ``interval``) it yields ``(index, size)`` items, for a dataset that takes them (a
    :class:`~gluonkit.data.MultiScaleDataset`). ``loader_kwargs`` go to the DataLoader
    (``batchify_fn``, ``num_workers`` for data-loading processes, ...).

    Example::

        >>> import mxnet as mx, gluonkit
        >>> from gluonkit.data import global_loader
        >>> kv = mx.kv.create("device")     # "dist_sync" in each worker under gluonkit-launch
        >>> loader = global_loader(gluonkit.data.digits(), 64, 16, kv.rank, kv.num_workers, seed=0)
        >>> net = mx.gluon.nn.Dense(10, in_units=64)
        >>> net.initialize()
        >>> trainer = gluonkit.Trainer(net.collect_params(), "sgd", kvstore=kv,
        ...                            accumulate=loader.batch_sampler.sampler.accumulate)
        >>> len(loader), loader.batch_sampler.sampler.accumulate
        (90, 4)
    """
    if loader_kwargs.get("thread_pool"):
        raise ValueError("global_loader(thread_pool=True): threads share the process's generators, so the "
                         "samples' seeds would mix; use worker processes (thread_pool=False, the default).")
    sampler = GlobalBatchSampler(len(dataset), batch_size, micro_batch, rank, workers, shuffle, seed,
                                 last_batch, sizes, interval)
    return DataLoader(SeededDataset(dataset), batch_sampler=SeededSamples(sampler, sampler.seed),
                      **loader_kwargs)
