"""Multi-scale training: one input size per batch (or per few batches), drawn from a list.

Detection recipes (GluonCV's YOLOv3 among them) train on a new random input size every few
batches. Here the size is chosen by the batch sampler from a seeded generator, so the sequence
is reproducible and data-loading processes agree on it: each index it yields is a pair
``(index, size)``, which :class:`MultiScaleDataset` turns into the sample resized to ``size``.
"""
import functools
import numbers

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon.data.dataloader import default_batchify_fn

from ..validate import choice, positive_int
from ._sampling import LAST_BATCH_MODES, DataLoader, Order, seed_or_draw, SeededEpochs
from .seeding import seeded_loader

__all__ = ["MultiScaleSampler", "MultiScaleDataset", "resize_first", "resize_image", "multiscale_loader"]

@functools.lru_cache(maxsize=1024)
def _interpolation(size_in, size_out):
    """The (size_out, size_in) matrix of linear interpolation with half-pixel centers."""
    source = np.clip((np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5, 0, size_in - 1)
    low = np.floor(source).astype(np.int64)
    high = np.minimum(low + 1, size_in - 1)
    weight = (source - low).astype(np.float32)
    matrix = np.zeros((size_out, size_in), dtype=np.float32)
    np.add.at(matrix, (np.arange(size_out), low), 1 - weight)
    np.add.at(matrix, (np.arange(size_out), high), weight)
    return matrix


def resize_image(image, size):
    """Bilinear resize of a (C, H, W) or (H, W) image to ``size`` = (height, width), in NumPy.

    Pixel centers are aligned as in OpenCV and ``gluon.data.vision.transforms.Resize``.
    """
    array = image.asnumpy() if isinstance(image, mx.nd.NDArray) else np.asarray(image)
    if array.ndim not in (2, 3):
        raise ValueError(f"only images of shape (C, H, W) or (H, W) can be resized, got {array.shape}; "
                         "bucket other data with mode='pad'.")
    height, width = int(size[0]), int(size[1])
    if array.shape[-2:] == (height, width):
        return array
    out = (_interpolation(array.shape[-2], height) @ array.astype(np.float32, copy=False)
           @ _interpolation(array.shape[-1], width).T)
    if np.issubdtype(array.dtype, np.integer):
        out = np.rint(out)
    return out.astype(array.dtype, copy=False)


def check_sizes(sizes):
    """Input sizes as (height, width) tuples from ints (squares) or pairs; ``TypeError`` or
    ``ValueError`` naming the bad one."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"sizes must be a list of ints or (height, width) pairs, got {sizes!r}.")
    checked = []
    for size in sizes:
        if isinstance(size, numbers.Integral):
            pair = (size, size)
        elif isinstance(size, (tuple, list)):
            pair = tuple(size)
        else:
            raise ValueError(f"size {size!r} must be a positive int or a (height, width) pair of them.")
        if len(pair) != 2 or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                     and d > 0 for d in pair):
            raise ValueError(f"size {size!r} must be a positive int or a (height, width) pair of them.")
        checked.append((int(pair[0]), int(pair[1])))
    if not checked:
        raise ValueError("sizes is empty; give at least one input size, e.g. [320, 352, 384].")
    return checked


class MultiScaleSampler(SeededEpochs):
    """Batches of ``(index, size)`` pairs: one size per batch, or per ``interval`` batches.

    Each epoch the indices are shuffled and cut into batches by ``gluon.data.BatchSampler``;
    every ``interval`` consecutive batches share a size drawn uniformly from ``sizes``. The
    order and the sizes depend only on ``seed`` and the epoch.

    Parameters
    ----------
    length : int
        Number of samples of the dataset.
    batch_size : int
    sizes : list of int or (int, int)
        The input sizes to draw from: an int is a square, a pair is (height, width).
    interval : int, default 1
        Batches per size.
    shuffle : bool, default True
        Shuffle the samples (the sizes are random either way).
    last_batch : {'keep', 'discard', 'rollover'}, default 'keep'
        As in ``gluon.data.BatchSampler``.
    seed : int, optional
        Seed of the order and the sizes; by default drawn from NumPy's global generator.

    Example::

        >>> sampler = MultiScaleSampler(10, batch_size=4, sizes=[16, 24], seed=1)
        >>> [(len(batch), batch[0][1]) for batch in sampler]
        [(4, (16, 16)), (4, (24, 24)), (2, (16, 16))]
    """

    def __init__(self, length, batch_size, sizes, interval=1, shuffle=True, last_batch="keep",
                 seed=None):
        self._length = positive_int(length, "length")
        self.sizes = check_sizes(sizes)
        self._interval = positive_int(interval, "interval")
        self._order = Order(range(self._length))
        self._batch_size = positive_int(batch_size, "batch_size")
        self._last_batch = choice(last_batch, LAST_BATCH_MODES, "last_batch")
        self._batchers = [gluon.data.BatchSampler(self._order, self._batch_size, self._last_batch)]
        self._num_samples = self._length
        self._shuffle = bool(shuffle)
        self._seed = seed_or_draw(seed)
        self._epoch = 0

    def __iter__(self):
        rng = self._next_epoch_rng()
        indices = rng.permutation(self._length) if self._shuffle else np.arange(self._length)
        self._order.order = [int(i) for i in indices]
        batches = list(self._batchers[0])
        picks = rng.integers(len(self.sizes), size=-(-len(batches) // self._interval))
        return iter([[(i, self.sizes[picks[b // self._interval]]) for i in batch]
                     for b, batch in enumerate(batches)])

    def __len__(self):
        return len(self._batchers[0])


def resize_first(sample, size):
    """The sample with its first field (a (C, H, W) or (H, W) image) resized to ``size``.

    Bilinear, as ``gluon.data.vision.transforms.Resize``; the image comes back as a NumPy
    array, the other fields unchanged. The default transform of :class:`MultiScaleDataset`.
    """
    if isinstance(sample, tuple):
        return (resize_image(sample[0], size),) + sample[1:]
    return resize_image(sample, size)


class MultiScaleDataset(gluon.data.Dataset):
    """A dataset indexed by ``(index, size)``: sample ``index`` transformed to ``size``.

    A plain integer index returns the sample unchanged.

    Parameters
    ----------
    dataset : Dataset
        Samples whose first field is a (C, H, W) or (H, W) image (apply ``ToTensor`` first).
    transform : callable, optional
        ``transform(sample, (height, width)) -> sample``; :func:`resize_first` by default.
        Give your own to move boxes or masks along with the image.
    """

    def __init__(self, dataset, transform=None):
        self._dataset = dataset
        self._transform = resize_first if transform is None else transform

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, item):
        if isinstance(item, tuple):
            index, size = item
            return self._transform(self._dataset[index], size)
        return self._dataset[item]


def _stack_fields(samples):
    """Every field of the samples stacked as gluon's DataLoader stacks it, as a tuple."""
    batch = default_batchify_fn(samples)
    return tuple(batch) if isinstance(batch, list) else batch


def multiscale_loader(dataset, batch_size, sizes, interval=1, *, shuffle=True, last_batch="keep",
                      seed=None, transform=None, batchify_fn=None, num_workers=0, pin_memory=False,
                      sample_seeds=False):
    """A ``gluon.data.DataLoader`` whose batches each come at one size drawn from ``sizes``.

    With (image, label) samples it yields ``(data, label)`` batches, as ``gluonkit.fit``
    takes them, on ``cpu(0)`` with the dtypes gluon's DataLoader gives (int labels stay
    int64), ready for a hybridized network on ``cpu(0)`` in one's own loop. ``loader.batch_sampler`` is its :class:`MultiScaleSampler`.

    Parameters
    ----------
    dataset : Dataset
        Samples whose first field is a (C, H, W) or (H, W) image, of any size.
    batch_size : int
    sizes, interval, shuffle, last_batch, seed
        As for :class:`MultiScaleSampler`.
    transform : callable, optional
        As for :class:`MultiScaleDataset`.
    batchify_fn : callable, optional
        Default: every field stacked as gluon's DataLoader stacks it (an NDArray on
        ``cpu(0)`` of the field's dtype: Python int labels give int64).
    num_workers : int, default 0
        Data loading processes (the sizes do not depend on them).
    pin_memory : bool, default False
        As for gluon's DataLoader: batches in ``cpu_pinned(0)``; otherwise they are on
        ``cpu(0)``, also with workers.
    sample_seeds : bool, default False
        Augment every sample from a seed of its own (:func:`~gluonkit.data.seeded_loader`):
        the same batches with any ``num_workers``; ``loader.batch_sampler`` is then a
        ``SeededSamples`` whose ``sampler`` is the :class:`MultiScaleSampler`.

    Example::

        >>> loader = multiscale_loader(train, batch_size=64, sizes=[16, 20, 24, 28], seed=0)
        >>> history = gluonkit.fit(net, loss, trainer, loader, epochs=10)
    """
    sampler = MultiScaleSampler(len(dataset), batch_size, sizes, interval, shuffle, last_batch, seed)
    dataset = MultiScaleDataset(dataset, transform)
    options = {"batchify_fn": _stack_fields if batchify_fn is None else batchify_fn,
               "num_workers": num_workers, "pin_memory": pin_memory}
    if sample_seeds:
        return seeded_loader(dataset, sampler, seed, **options)
    return DataLoader(dataset, batch_sampler=sampler, **options)
