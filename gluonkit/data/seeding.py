"""Per-sample seeds: augmentations that do not depend on the process that draws them.

GluonCV's transforms and gluonkit's draw from Python's ``random`` and NumPy's global
generator. In the training process those generators are part of what ``fit`` checkpoints;
in a DataLoader worker process they are the worker's own, which no checkpoint holds, so a
seeded run with workers could be neither repeated nor resumed exactly. Here every sample
carries a seed of its own, ``(seed, epoch, position in the epoch)``, set by the batch sampler
in the training process; the sample is read and transformed with both generators seeded by
it. Its augmentation is then the same in whichever process reads it: a run gives the same
batches with any number of workers, and a resumed run continues bit for bit.

MXNet's random operators (``mx.nd.random``, gluon's ``transforms.RandomFlipLeftRight``) draw
from MXNet's generator, which is not seeded per sample.
"""
import contextlib
import hashlib
import random

import numpy as np
from mxnet import gluon

from ..validate import is_int, non_negative_int
from ._sampling import DataLoader, seed_or_draw

__all__ = ["sample_generators", "SeededSamples", "SeededDataset", "seeded_loader"]

_MAX_EPOCH = 2 ** 32     # a saved epoch beyond this is not a run's


@contextlib.contextmanager
def sample_generators(key):
    """Python's ``random`` and NumPy's global generator seeded by ``key`` (a tuple of ints)
    inside the block; their states before it are restored after it.

    The two generators get different seeds derived from ``key`` (the same seed would give
    them the same stream), the same in every process.

    Example::

        >>> with sample_generators((0, 3, 17)):
        ...     a = np.random.rand()
        >>> with sample_generators((0, 3, 17)):
        ...     a == np.random.rand()
        True
    """
    if not (isinstance(key, tuple) and key and all(is_int(k) and k >= 0 for k in key)):
        raise ValueError(f"key must be a tuple of non-negative ints, e.g. (seed, epoch, position), got {key!r}.")
    digest = hashlib.blake2b(repr(tuple(int(k) for k in key)).encode(), digest_size=32).digest()
    python, numpy = random.getstate(), np.random.get_state()
    random.seed(int.from_bytes(digest[:16], "little"))
    np.random.seed(np.frombuffer(digest[16:], dtype=np.uint32))
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


class SeededSamples(gluon.data.Sampler):
    """The batches of ``batch_sampler``, every item ``i`` paired with its sample's seed:
    ``(i, (seed, epoch, position))``, the position counted from 0 over the epoch.

    For a loader of :class:`SeededDataset` (see :func:`seeded_loader`). A ``batch_sampler``
    that yields one worker's share of a global order (``GlobalBatchSampler``) gives, as
    ``batch_position``, where its last batch begins in that order, and the positions count
    from there. The seeds depend
    only on ``seed``, the epoch and the order ``batch_sampler`` yields; ``state_dict()``
    holds the epoch and ``batch_sampler``'s own state (when it has one), which ``fit``
    checkpoints to resume exactly.

    Parameters
    ----------
    batch_sampler : Sampler
        Yields lists of items of the dataset (indices, or ``(index, size)`` pairs).
    seed : int, optional
        Drawn from NumPy's global generator if None (so ``np.random.seed`` fixes it).
    """

    def __init__(self, batch_sampler, seed=None):
        if not (hasattr(batch_sampler, "__iter__") and hasattr(batch_sampler, "__len__")):
            raise TypeError(f"batch_sampler must be a sampler of batches (lists of items), e.g. "
                            f"gluon.data.BatchSampler(gluon.data.RandomSampler(n), 32), got {batch_sampler!r}.")
        if getattr(batch_sampler, "_last_batch", None) == "rollover" and not hasattr(batch_sampler, "state_dict"):
            # gluon's BatchSampler keeps what it carries over in a private field, no state to resume
            raise ValueError("a gluon.data.BatchSampler with last_batch='rollover' carries samples into the next "
                             "epoch that no state holds, so a resumed run could not be exact; use last_batch="
                             "'keep' or 'discard', or gluonkit's MultiScaleSampler or BucketSampler (whose "
                             "state keeps the carried samples).")
        self.sampler = batch_sampler
        self.seed = seed_or_draw(seed)
        self._epoch = 0

    @property
    def epoch(self):
        """int: The epoch the next iteration yields (counted from 0)."""
        return self._epoch

    def set_epoch(self, epoch):
        """Make the next iteration yield epoch ``epoch``'s seeds."""
        self._epoch = non_negative_int(epoch, "epoch")

    def __iter__(self):
        epoch, self._epoch = self._epoch, self._epoch + 1
        position = 0
        for batch in self.sampler:
            if not isinstance(batch, (list, tuple)):
                raise TypeError(f"batch_sampler yielded {batch!r}, not a batch (a list of items); wrap a "
                                "sampler of single items in gluon.data.BatchSampler(sampler, batch_size).")
            # a sampler of one worker's share of a global order says where its batch begins in it
            start = getattr(self.sampler, "batch_position", position)
            yield [(item, (self.seed, epoch, start + k)) for k, item in enumerate(batch)]
            position += len(batch)

    def __len__(self):
        return len(self.sampler)

    def state_dict(self):
        """dict: The seed, the epoch the next iteration yields and ``batch_sampler``'s
        ``state_dict()`` (None if it has none). JSON values only."""
        inner = self.sampler.state_dict() if hasattr(self.sampler, "state_dict") else None
        return {"seed": self.seed, "epoch": self._epoch, "sampler": inner}

    def load_state_dict(self, state):
        """Continue from ``state_dict()``. Checked first: on ``ValueError`` or ``TypeError``
        nothing changed."""
        if not (isinstance(state, dict) and set(state) == {"seed", "epoch", "sampler"}):
            raise ValueError("state must be a SeededSamples.state_dict() ({'seed', 'epoch', 'sampler'}), "
                             f"got {state!r}.")
        if not (is_int(state["seed"]) and state["seed"] >= 0):
            raise ValueError(f"state['seed'] must be a non-negative int, got {state['seed']!r}; pass what "
                             "state_dict() returned.")
        epoch = non_negative_int(state["epoch"], "state['epoch']")
        if epoch > _MAX_EPOCH:
            raise ValueError(f"state['epoch'] is {epoch}, more epochs than any run makes; pass what "
                             "state_dict() returned.")
        if state["sampler"] is not None:
            if not hasattr(self.sampler, "load_state_dict"):
                raise ValueError(f"state['sampler'] holds a sampler's state, but {type(self.sampler).__name__} "
                                 "takes none; pass the state of a loader over the same kind of sampler.")
            self.sampler.load_state_dict(state["sampler"])
        self.seed, self._epoch = int(state["seed"]), epoch


class SeededDataset(gluon.data.Dataset):
    """``dataset`` whose item ``(i, key)`` is ``dataset[i]`` read and transformed inside
    :func:`sample_generators` ``(key)``: the keys :class:`SeededSamples` yields."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, item):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"SeededDataset takes items (index, key) from a SeededSamples, got {item!r}; "
                            "build the loader with seeded_loader(dataset, batch_sampler).")
        index, key = item
        with sample_generators(key):
            return self.dataset[index]


def seeded_loader(dataset, batch_sampler, seed=None, **loader_kwargs):
    """A gluonkit ``DataLoader`` of ``dataset`` whose samples are each augmented from a seed
    of their own (:class:`SeededSamples`): the same batches with any ``num_workers``.

    ``loader.batch_sampler`` is the :class:`SeededSamples`; ``batch_sampler`` is its
    ``sampler``. ``loader_kwargs`` go to the DataLoader (``batchify_fn``, ``num_workers``,
    ``pin_memory``, ...).

    Example::

        >>> sampler = MultiScaleSampler(len(train), 16, [320, 416], seed=0)
        >>> loader = seeded_loader(MultiScaleDataset(train, transform), sampler, seed=0,
        ...                        num_workers=2)
        >>> history = gluonkit.fit(net, loss, trainer, loader, epochs=10)
    """
    if loader_kwargs.get("thread_pool"):
        raise ValueError("seeded_loader(thread_pool=True): threads share the process's generators, so the "
                         "samples' seeds would mix; use worker processes (thread_pool=False, the default).")
    return DataLoader(SeededDataset(dataset), batch_sampler=SeededSamples(batch_sampler, seed),
                      **loader_kwargs)
