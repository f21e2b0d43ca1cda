"""Bucketing: batches of samples of similar shape, padded or resized to a few bucket shapes.

Samples of many sizes either waste work (a shuffled batch padded to its largest sample) or
hand the network a new shape nearly every step, and every change of shape makes a hybridized
graph re-plan. Grouped by size into a few buckets, each batch brought to its bucket's shape,
they leave little padding and a few shapes, which ``gluonkit.nn.ShapeCache`` keeps compiled.
"""
import numbers

import mxnet as mx
import numpy as np
from gluoncv.data.batchify import Tuple
from mxnet import gluon
from mxnet.gluon.data.dataloader import default_batchify_fn

from ..validate import choice, is_int, positive_int
from ._sampling import LAST_BATCH_MODES, DataLoader, Order, seed_or_draw, SeededEpochs
from .multiscale import resize_image
from .seeding import seeded_loader

__all__ = ["Buckets", "BucketSampler", "BucketPad", "BucketBatchify", "bucket_loader"]

_MODES = ("pad", "resize")
_REFINE_ROUNDS = 50


class Buckets:
    """A few bucket shapes, and the rule that puts each sample into one of them.

    A sample's *size* is its shape along ``axes`` (height and width of a (C, H, W) image).
    With ``mode='pad'`` a sample goes to the smallest bucket that contains it (the first of
    the smallest, on ties) and is padded to it; with ``mode='resize'`` it goes to the nearest
    bucket (in log scale) and is resized to it.

    Parameters
    ----------
    shapes : list of tuple of int
        The bucket sizes, each with one entry per axis (an int for a single axis).
    axes : int or tuple of int, default (-2, -1)
        The axes of a sample whose size varies; the other axes must agree between samples.
    mode : {'pad', 'resize'}, default 'pad'
        How a sample is brought to its bucket's size.

    Example::

        >>> buckets = Buckets.from_data([(3, 20, 30), (3, 24, 24), (3, 31, 40)], 2)
        >>> buckets.shapes, buckets.assign((3, 22, 28))
        ([(24, 30), (31, 40)], 0)
    """

    def __init__(self, shapes, axes=(-2, -1), mode="pad"):
        self.axes = (axes,) if isinstance(axes, numbers.Integral) else tuple(axes)
        if not self.axes or len(set(self.axes)) != len(self.axes) or not all(
                isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in self.axes):
            raise ValueError(f"axes must be an int or a tuple of distinct ints, got {axes!r}.")
        self.mode = choice(mode, _MODES, "mode")
        rows = [(s,) if isinstance(s, numbers.Integral) else tuple(s) for s in shapes]
        if not rows:
            raise ValueError("shapes is empty; give at least one bucket shape.")
        for row in rows:
            if len(row) != len(self.axes) or not all(
                    isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in row):
                raise ValueError(f"bucket shape {row} must hold {len(self.axes)} positive int(s), "
                                 f"one per axis of axes={self.axes}.")
        if len(set(rows)) != len(rows):
            raise ValueError(f"bucket shapes {rows} repeat a shape; list each bucket once.")
        self.shapes = [tuple(int(d) for d in row) for row in rows]
        self._table = np.array(self.shapes, dtype=np.int64)

    @classmethod
    def from_data(cls, sample_shapes, num_buckets=4, axes=(-2, -1), mode="pad", multiple=1):
        """Choose ``num_buckets`` bucket shapes (or fewer) that fit the samples' sizes.

        The samples are first split in two, again and again (the split, along any axis, that
        saves the most padding each time), into ``num_buckets`` groups, then refined: in pad
        mode each bucket is the largest size of its members (nothing is cropped) and samples
        move to the smallest bucket that holds them, until nothing moves; in resize mode each
        bucket is the geometric mean of its members and samples move to the nearest bucket
        (k-means in log scale).

        Parameters
        ----------
        sample_shapes : list of tuple of int
            The full shape of every sample, e.g. (3, H, W).
        num_buckets : int, default 4
        axes, mode
            As for :class:`Buckets`.
        multiple : int, default 1
            Make every bucket size a multiple of this (rounded up in pad mode, to the nearest
            in resize mode). A network's total stride is a good choice: odd sizes waste work in
            strided layers (a ResNet-20 step on 8 images of 13x19 took 1.35x as long per pixel
            as on 16x16 on a 2-core CPU).
        """
        num_buckets = positive_int(num_buckets, "num_buckets")
        multiple = positive_int(multiple, "multiple")
        probe = cls([(1,) * (1 if isinstance(axes, numbers.Integral) else len(tuple(axes)))],
                    axes, mode)
        sizes = probe.sizes(sample_shapes)
        if not len(sizes):
            raise ValueError("sample_shapes is empty; bucket shapes are chosen from the samples.")
        groups = _split(sizes, num_buckets)
        if mode == "pad":
            table = np.array([sizes[g].max(axis=0) for g in groups])
            for _ in range(_REFINE_ROUNDS):
                members = _assign_pad(sizes, table)
                new = np.array([sizes[members == b].max(axis=0) for b in np.unique(members)])
                if new.shape == table.shape and (new == table).all():
                    break
                table = new
        else:
            logs = np.log(sizes)
            centers = np.array([logs[g].mean(axis=0) for g in groups])
            for _ in range(_REFINE_ROUNDS):
                members = _nearest(logs, centers)
                new = np.array([logs[members == b].mean(axis=0) for b in np.unique(members)])
                if new.shape == centers.shape and np.allclose(new, centers):
                    break
                centers = new
            table = np.exp(centers)
        if mode == "pad":
            table = -(-table // multiple) * multiple
        else:
            table = np.maximum(1, np.rint(table / multiple)) * multiple
        rows = sorted({tuple(int(d) for d in row) for row in table}, key=lambda r: (np.prod(r), r))
        return cls(rows, axes, mode)

    def __len__(self):
        return len(self.shapes)

    def __repr__(self):
        return f"Buckets({self.shapes}, axes={self.axes}, mode={self.mode!r})"

    def _axes_for(self, ndim):
        if not all(-ndim <= a < ndim for a in self.axes):
            raise ValueError(f"axes={self.axes} do not fit samples with {ndim} dimensions.")
        return tuple(a % ndim for a in self.axes)

    def sizes(self, sample_shapes):
        """The samples' sizes along ``axes``: an int array of shape (samples, len(axes))."""
        shapes = [tuple(s) for s in sample_shapes]
        if not shapes:
            return np.zeros((0, len(self.axes)), dtype=np.int64)
        ndim = len(shapes[0])
        axes = self._axes_for(ndim)
        rest = [a for a in range(ndim) if a not in axes]
        for i, shape in enumerate(shapes):
            if len(shape) != ndim or any(shape[a] != shapes[0][a] for a in rest):
                raise ValueError(f"sample {i} has shape {shape} but sample 0 has {shapes[0]}; only "
                                 f"the axes {self.axes} may differ. Pass the varying axes as axes=.")
        sizes = np.array([[shape[a] for a in axes] for shape in shapes], dtype=np.int64)
        if (sizes < 1).any():
            raise ValueError(f"sample {int(np.argmax((sizes < 1).any(axis=1)))} is empty along "
                             f"axes {self.axes}; drop empty samples first.")
        return sizes

    def assign_all(self, sample_shapes):
        """The bucket index of every sample (an int array)."""
        sizes = self.sizes(sample_shapes)
        if self.mode == "resize":
            return _nearest(np.log(sizes), np.log(self._table))
        members = _assign_pad(sizes, self._table)
        if (members < 0).any():
            i = int(np.argmax(members < 0))
            raise ValueError(f"sample {i} of size {tuple(sizes[i])} is larger than every bucket "
                             f"{self.shapes}; add a bucket that holds it, or use mode='resize'.")
        return members

    def assign(self, sample_shape):
        """The index of the bucket of one sample of shape ``sample_shape``."""
        return int(self.assign_all([sample_shape])[0])

    def overhead(self, sample_shapes):
        """Elements the network sees over elements the samples hold, minus one.

        In pad mode this is the fraction of padding; in resize mode it is the change of
        input volume (negative if samples shrink on average).
        """
        sizes = self.sizes(sample_shapes)
        seen = self._table[self.assign_all(sample_shapes)].prod(axis=1).sum()
        return float(seen / sizes.prod(axis=1).sum() - 1.0)


def _split(sizes, count):
    """Up to ``count`` groups of sample indices: binary splits that each save the most padding."""
    groups = [np.arange(len(sizes))]
    while len(groups) < count:
        best = (0, None, None)
        for g, members in enumerate(groups):
            whole = len(members) * sizes[members].max(axis=0).prod()
            for axis in range(sizes.shape[1]):
                ranked = members[np.argsort(sizes[members, axis], kind="stable")]
                ordered = sizes[ranked]
                head = np.maximum.accumulate(ordered, axis=0)[:-1].prod(axis=1)
                tail = np.maximum.accumulate(ordered[::-1], axis=0)[::-1][1:].prod(axis=1)
                cut = np.arange(1, len(ranked))
                saving = whole - (cut * head + (len(ranked) - cut) * tail)
                saving = np.where(ordered[1:, axis] > ordered[:-1, axis], saving, -1)
                if len(saving) and saving.max() > best[0]:
                    at = int(saving.argmax()) + 1
                    best = (saving.max(), g, (ranked[:at], ranked[at:]))
        if best[1] is None:
            break
        groups[best[1]:best[1] + 1] = best[2]
    return groups


def _assign_pad(sizes, table):
    """Index of the smallest bucket (first on ties) holding each size; -1 if none does."""
    fits = (sizes[:, None, :] <= table[None, :, :]).all(axis=2)
    volume = np.where(fits, table.prod(axis=1)[None, :], np.iinfo(np.int64).max)
    return np.where(fits.any(axis=1), volume.argmin(axis=1), -1)


def _nearest(points, centers):
    """Index of the nearest center (first on ties) of each point."""
    return ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)


class BucketSampler(SeededEpochs):
    """Batches of sample indices, every batch within one bucket.

    Each epoch the members of every bucket are shuffled and cut into batches (by
    ``gluon.data.BatchSampler``), then the batches of all buckets are shuffled together. The
    order depends only on ``seed`` and the epoch, so a run can be repeated or resumed.
    Use it as a DataLoader's ``batch_sampler`` with :class:`BucketBatchify`.

    Parameters
    ----------
    sample_shapes : list of tuple of int
        The full shape of every sample of the dataset, in dataset order.
    batch_size : int
        Samples per batch (the last batch of a bucket may hold fewer, see ``last_batch``).
    buckets : int, list of tuple or Buckets, default 4
        The number of buckets to choose from the data, the bucket sizes, or a Buckets.
    axes : int or tuple of int, default (-2, -1)
        The varying axes (ignored when ``buckets`` is a Buckets).
    mode : {'pad', 'resize'}, default 'pad'
        As for :class:`Buckets` (ignored when ``buckets`` is a Buckets).
    multiple : int, default 1
        When the buckets are chosen from the data: as for :meth:`Buckets.from_data`.
    shuffle : bool, default True
        Shuffle within and across buckets; if False, buckets in order, samples in index order.
    last_batch : {'keep', 'discard', 'rollover'}, default 'keep'
        What becomes of a bucket's last, incomplete batch, as in ``gluon.data.BatchSampler``
        ('rollover' carries it to the same bucket in the next epoch).
    seed : int, optional
        Seed of the order; by default drawn from NumPy's global generator.

    Example::

        >>> shapes = [(3, 20, 30)] * 5 + [(3, 40, 40)] * 3
        >>> sampler = BucketSampler(shapes, batch_size=2, buckets=2, shuffle=False)
        >>> list(sampler), sampler.buckets.shapes
        ([[0, 1], [2, 3], [4], [5, 6], [7]], [(20, 30), (40, 40)])
    """

    def __init__(self, sample_shapes, batch_size, buckets=4, axes=(-2, -1), mode="pad",
                 multiple=1, shuffle=True, last_batch="keep", seed=None):
        shapes = [tuple(s) for s in sample_shapes]
        self._batch_size = positive_int(batch_size, "batch_size")
        choice(last_batch, LAST_BATCH_MODES, "last_batch")
        if isinstance(buckets, Buckets):
            self.buckets = buckets
        elif is_int(buckets):
            self.buckets = Buckets.from_data(shapes, buckets, axes, mode, multiple)
        elif isinstance(buckets, (list, tuple)):
            self.buckets = Buckets(buckets, axes, mode)
        else:
            raise TypeError(f"buckets must be an int (how many to choose from the data), a list of "
                            f"bucket shapes or a Buckets, got {buckets!r}.")
        self.assignment = self.buckets.assign_all(shapes)
        self._members = [np.flatnonzero(self.assignment == b) for b in range(len(self.buckets))]
        self._orders = [Order(m) for m in self._members]
        self._batchers = [gluon.data.BatchSampler(order, self._batch_size, last_batch)
                          for order in self._orders]
        self._last_batch = last_batch
        self._num_samples = len(shapes)
        self._shuffle = bool(shuffle)
        self._seed = seed_or_draw(seed)
        self._epoch = 0

    def __iter__(self):
        rng = self._next_epoch_rng()
        batches = []
        for members, order, batcher in zip(self._members, self._orders, self._batchers):
            order.order = [int(i) for i in (rng.permutation(members) if self._shuffle else members)]
            batches.extend(batcher)
        if self._shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return iter(batches)

    def __len__(self):
        return sum(len(batcher) for batcher in self._batchers)


class BucketPad:
    """Batchify one field: pad (or resize) every sample to the bucket of the batch.

    In pad mode the batch goes to the smallest bucket that holds all its samples (for batches
    of a :class:`BucketSampler`, their bucket) and every sample is padded at the end of each
    axis. In resize mode every sample is resized (bilinear, as ``transforms.Resize``) to the
    bucket of the first sample; the axes must then be the last two (height, width). The batch
    is stacked as gluon's DataLoader stacks samples: an NDArray on ``cpu(0)`` of the samples'
    dtype.

    Parameters
    ----------
    buckets : Buckets
    pad_val : float, default 0
        The value of the padding (e.g. an ignore label for segmentation masks).
    ret_valid : bool, default False
        Also return the valid sizes, an int32 NDArray of shape (batch, len(axes)): a sample's
        own size in pad mode, the bucket's size in resize mode.

    Example::

        >>> pad = BucketPad(Buckets([(4, 4), (8, 8)]), ret_valid=True)
        >>> data, valid = pad([np.ones((1, 3, 2)), np.ones((1, 5, 4))])
        >>> data.shape, valid.asnumpy().tolist()
        ((2, 1, 8, 8), [[3, 2], [5, 4]])
    """

    def __init__(self, buckets, pad_val=0, ret_valid=False):
        if not isinstance(buckets, Buckets):
            raise TypeError(f"buckets must be a gluonkit.data.Buckets, got {type(buckets).__name__}; "
                            "take it from BucketSampler.buckets or build one with Buckets(...).")
        self._buckets = buckets
        self._pad_val = pad_val
        self._ret_valid = bool(ret_valid)

    def __call__(self, data):
        arrays = [x.asnumpy() if isinstance(x, mx.nd.NDArray) else np.asarray(x) for x in data]
        buckets = self._buckets
        sizes = buckets.sizes([x.shape for x in arrays])
        ndim = arrays[0].ndim
        axes = buckets._axes_for(ndim)
        if buckets.mode == "resize":
            if axes != (ndim - 2, ndim - 1):
                raise ValueError(f"mode='resize' resizes the last two axes (height, width), but the "
                                 f"buckets' axes are {buckets.axes}; use mode='pad' for other axes.")
            target = buckets.shapes[buckets.assign(arrays[0].shape)]
            rows = [resize_image(x, target) for x in arrays]
            valid = np.tile(np.array(target), (len(arrays), 1))
        else:
            full = list(arrays[0].shape)
            for axis, size in zip(axes, sizes.max(axis=0)):
                full[axis] = size
            target = buckets.shapes[buckets.assign(full)]
            for axis, size in zip(axes, target):
                full[axis] = size
            rows = np.full((len(arrays),) + tuple(full), self._pad_val, dtype=arrays[0].dtype)
            for row, x in zip(rows, arrays):
                row[tuple(slice(0, n) for n in x.shape)] = x
            valid = sizes
        batch = default_batchify_fn(list(rows))
        if not self._ret_valid:
            return batch
        return batch, mx.nd.array(valid, ctx=batch.context, dtype=np.int32)


def _mask(valid, shape, ctx):
    """1 where an element lies within the sample's valid size, else 0: (batch,) + shape."""
    mask = np.ones((valid.shape[0],) + tuple(shape), dtype=np.float32)
    for dim, size in enumerate(shape):
        index = np.arange(size).reshape((1,) * (dim + 1) + (size,) + (1,) * (len(shape) - dim - 1))
        mask *= index < valid[:, dim].reshape((-1,) + (1,) * len(shape))
    return mx.nd.array(mask, ctx=ctx)


class _StackLabels:
    """Labels of one shape stacked as gluon's DataLoader does (Python ints give int64); labels
    of several shapes are refused with the fix."""

    def __call__(self, labels):
        shapes = {tuple(np.shape(y)) for y in labels}
        if len(shapes) > 1:
            raise ValueError(f"the labels of a batch have different shapes {sorted(shapes)[:4]} "
                             "(detection boxes?); pass label_fn=gluoncv.data.batchify.Pad(axis=0, "
                             "pad_val=-1) to pad them, or BucketPad(buckets, pad_val=-1) for masks.")
        return default_batchify_fn(labels)


class BucketBatchify:
    """Batchify (data, label) samples of a bucketed dataset for a ``gluon.data.DataLoader``.

    The data are padded (or resized) to their bucket by :class:`BucketPad`; the labels are
    batched by ``label_fn`` (stacked as gluon's DataLoader does by default, or e.g. ``BucketPad(buckets,
    pad_val=-1)`` for segmentation masks). The batch is ``(data, label)``, or with ``extra``
    ``(data, label, valid)`` / ``(data, label, mask)``.

    Parameters
    ----------
    buckets : Buckets
    label_fn : callable, optional
        Batchify function of the labels; by default they are stacked as gluon's DataLoader
        stacks them, keeping their dtype (Python ints give int64; labels of different shapes, such as boxes per image, then raise: pass
        ``gluoncv.data.batchify.Pad(axis=0, pad_val=-1)``).
    pad_val : float, default 0
        Padding value of the data.
    extra : {None, 'valid', 'mask'}, default None
        None: ``(data, label)``, what ``gluonkit.fit`` takes. 'valid': also the valid sizes,
        int32 (batch, len(axes)). 'mask': also a float32 mask of shape (batch,) + bucket size,
        1 on the sample's own elements and 0 on padding, to multiply a per-element loss with.

    Example::

        >>> sampler = BucketSampler(shapes, batch_size=32, buckets=4)
        >>> loader = gluon.data.DataLoader(dataset, batch_sampler=sampler,
        ...                                batchify_fn=BucketBatchify(sampler.buckets))
    """

    def __init__(self, buckets, label_fn=None, pad_val=0, extra=None):
        choice(extra, (None, "valid", "mask"), "extra")
        self._extra = extra
        self._buckets = buckets
        self._tuple = Tuple(BucketPad(buckets, pad_val, ret_valid=extra is not None),
                            _StackLabels() if label_fn is None else label_fn)

    def __call__(self, samples):
        if not isinstance(samples[0], (tuple, list)) or len(samples[0]) != 2:
            raise ValueError("BucketBatchify takes (data, label) samples, got a sample of type "
                             f"{type(samples[0]).__name__}; wrap the data as "
                             "gluon.data.ArrayDataset(data, label) or batchify with BucketPad.")
        data, label = self._tuple(samples)
        if self._extra is None:
            return data, label
        data, valid = data
        if self._extra == "valid":
            return data, label, valid
        axes = self._buckets._axes_for(data.ndim - 1)
        return data, label, _mask(valid.asnumpy(), [data.shape[1 + a] for a in axes], data.context)


def _sample_shapes(dataset):
    """The shape of the data (field 0) of every sample of ``dataset``."""
    shapes = []
    for i in range(len(dataset)):
        sample = dataset[i]
        data = sample[0] if isinstance(sample, (tuple, list)) else sample
        shapes.append(tuple(np.shape(data) if not isinstance(data, mx.nd.NDArray) else data.shape))
    return shapes


def bucket_loader(dataset, batch_size, buckets=4, *, axes=(-2, -1), mode="pad", multiple=1,
                  shapes=None, shuffle=True, last_batch="keep", seed=None, pad_val=0, label_fn=None,
                  extra=None, num_workers=0, pin_memory=False, sample_seeds=False):
    """A ``gluon.data.DataLoader`` of bucketed batches of a dataset of (data, label) samples.

    It yields ``(data, label)`` (or with ``extra`` a third array, see :class:`BucketBatchify`),
    every batch padded or resized to one of a few bucket shapes; ``gluonkit.fit`` takes it,
    and so does one's own loop: the arrays are on ``cpu(0)`` with the dtypes gluon's
    DataLoader gives (int labels stay int64), as a hybridized network on ``cpu(0)`` needs.
    ``loader.batch_sampler`` is its :class:`BucketSampler` (bucket shapes in
    ``loader.batch_sampler.buckets.shapes``; ``state_dict`` to resume: ``fit`` saves it).

    Parameters
    ----------
    dataset : Dataset
        Samples (data, label) whose data may differ in shape along ``axes``.
    batch_size : int
    buckets : int, list of tuple or Buckets, default 4
        As for :class:`BucketSampler`.
    axes, mode, multiple, shuffle, last_batch, seed
        As for :class:`BucketSampler`.
    shapes : list of tuple, optional
        The data shape of every sample; read from the dataset (one pass) if not given.
    pad_val, label_fn, extra
        As for :class:`BucketBatchify`.
    num_workers : int, default 0
        Data loading processes.
    pin_memory : bool, default False
        As for gluon's DataLoader: batches in ``cpu_pinned(0)``; otherwise they are on
        ``cpu(0)``, also with workers.
    sample_seeds : bool, default False
        Augment every sample from a seed of its own (:func:`~gluonkit.data.seeded_loader`):
        the same batches with any ``num_workers``; ``loader.batch_sampler`` is then a
        ``SeededSamples`` whose ``sampler`` is the :class:`BucketSampler`.

    Example::

        >>> loader = bucket_loader(dataset, batch_size=32, buckets=4, mode='resize', multiple=4)
        >>> history = gluonkit.fit(net, loss, trainer, loader, epochs=10)
    """
    sampler = BucketSampler(_sample_shapes(dataset) if shapes is None else shapes, batch_size,
                            buckets, axes=axes, mode=mode, multiple=multiple, shuffle=shuffle,
                            last_batch=last_batch, seed=seed)
    options = {"batchify_fn": BucketBatchify(sampler.buckets, label_fn, pad_val, extra),
               "num_workers": num_workers, "pin_memory": pin_memory}
    if sample_seeds:
        return seeded_loader(dataset, sampler, seed, **options)
    return DataLoader(dataset, batch_sampler=sampler, **options)
