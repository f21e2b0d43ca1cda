"""Split a batch over devices, unevenly when it must and never into empty slices."""
import mxnet as mx
import numpy as np
from gluoncv.data.batchify import Pad

from .validate import context_list, is_int, positive_int

__all__ = ["split_and_load", "split_sizes"]


def split_sizes(batch_size, num_parts):
    """Sizes of the non-empty slices of ``batch_size`` samples over ``num_parts`` devices.

    The first ``batch_size % parts`` slices get one sample more; a batch smaller than
    ``num_parts`` gives ``batch_size`` slices of one sample.

    Example::

        >>> split_sizes(7, 3)
        [3, 2, 2]
        >>> split_sizes(2, 3)
        [1, 1]
    """
    batch_size = positive_int(batch_size, "batch_size", "samples to split")
    num_parts = positive_int(num_parts, "num_parts", "devices to split over")
    parts = min(batch_size, num_parts)
    base, extra = divmod(batch_size, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def split_and_load(data, ctx_list, batch_axis=0, pad_value=None):
    """Split ``data`` along ``batch_axis`` and load one slice onto each context that gets data.

    Unlike ``gluon.utils.split_and_load`` it never fails on uneven sizes and never builds a
    zero-size slice: slice sizes differ by at most one, and a batch smaller than
    ``len(ctx_list)`` gives one slice of one sample for each of the first contexts.

    ``data`` may also be a list of per-sample arrays of their own shapes (images of every
    size, boxes per image): then each context that gets samples receives a list of them,
    each array on that context, or with ``pad_value`` one array of them, padded along their
    first axis to the longest sample of the whole batch (``gluoncv.data.batchify.Pad``), so
    every device's array has the same length.

    Parameters
    ----------
    data : NDArray, numpy.ndarray, or list of them (one per sample)
        The batch. NumPy arrays keep their dtype, except float64 (NumPy's default), which
        becomes float32 (MXNet's), as with ``gluon.utils.split_and_load``.
    ctx_list : list of Context
        The devices, in order. A single Context is accepted.
    batch_axis : int, default 0
        The axis that holds the samples (arrays only).
    pad_value : float, optional
        For a list: pad the samples with this value to the longest and stack each context's
        (e.g. -1 for boxes of shape (boxes, 5)); by default they stay a list.

    Returns
    -------
    list of NDArray, or list of list of NDArray
        One slice per context that receives at least one sample, in context order.

    Example::

        >>> xs = split_and_load(mx.nd.arange(5), [mx.cpu(0), mx.cpu(1)])
        >>> [x.shape for x in xs]
        [(3,), (2,)]
        >>> images = [mx.nd.zeros((3, 64, 64)), mx.nd.zeros((3, 96, 80)), mx.nd.zeros((3, 32, 32))]
        >>> [[x.shape for x in part] for part in split_and_load(images, [mx.cpu(0), mx.cpu(1)])]
        [[(3, 64, 64), (3, 96, 80)], [(3, 32, 32)]]
    """
    ctx_list = context_list(ctx_list, "ctx_list")
    if not is_int(batch_axis):
        raise TypeError(f"batch_axis must be an int, got {batch_axis!r}.")
    if isinstance(data, (list, tuple)):
        return _split_list(data, ctx_list, pad_value)
    if pad_value is not None:
        raise ValueError("pad_value applies to a list of per-sample arrays; an array batch is "
                         "already of one shape.")
    _check_array(data, "data")
    if not -data.ndim <= batch_axis < data.ndim:
        raise ValueError(f"batch_axis={batch_axis} is out of range for data of shape {data.shape}.")
    batch_size = data.shape[batch_axis]
    if batch_size == 0:
        raise ValueError(f"Cannot split an empty batch (data of shape {data.shape} has no samples "
                         f"on axis {batch_axis}); skip empty batches before splitting.")
    slices, begin = [], 0
    for ctx, size in zip(ctx_list, split_sizes(batch_size, len(ctx_list))):
        slices.append(_load(_slice(data, batch_axis, begin, begin + size), ctx))
        begin += size
    return slices


def _check_array(data, name):
    if not isinstance(data, (mx.nd.NDArray, np.ndarray)):
        raise TypeError(f"{name} must be an NDArray or a numpy array, got {type(data).__name__}"
                        + ("; a list must hold one array per sample." if name != "data" else "."))
    if np.dtype(data.dtype).kind not in "biuf":
        raise TypeError(f"{name} has dtype {data.dtype}, which MXNet cannot hold; convert it to "
                        "numbers first (e.g. encode strings as class indices).")


def _split_list(samples, ctx_list, pad_value):
    if not samples:
        raise ValueError("Cannot split an empty batch (an empty list); skip empty batches before "
                         "splitting.")
    for i, sample in enumerate(samples):
        _check_array(sample, f"data[{i}] (a {type(sample).__name__} in a list)")
    if pad_value is not None:
        return split_and_load(_pad(samples, pad_value), ctx_list)
    parts, begin = [], 0
    for ctx, size in zip(ctx_list, split_sizes(len(samples), len(ctx_list))):
        parts.append([_load(s, ctx) for s in samples[begin:begin + size]])
        begin += size
    return parts


def _pad(arrays, pad_value):
    """The samples padded along their first axis to the longest of the batch, stacked."""
    if len({(a.ndim,) + tuple(a.shape[1:]) for a in arrays}) > 1:
        raise ValueError(f"pad_value pads the first axis only, but the samples' shapes "
                         f"{[a.shape for a in arrays]} also differ in later axes; keep them as a "
                         "list (pad_value=None).")
    return Pad(axis=0, pad_val=pad_value)([a.asnumpy() if isinstance(a, mx.nd.NDArray) else a.astype(_dtype(a))
                                           for a in arrays])


def _slice(data, axis, begin, end):
    if begin == 0 and end == data.shape[axis]:
        return data
    if isinstance(data, np.ndarray):
        return np.take(data, range(begin, end), axis=axis)
    return data.slice_axis(axis=axis, begin=begin, end=end)


def _dtype(array):
    """The dtype a NumPy array gets on a device: its own, but NumPy's default float64 becomes
    MXNet's float32, as ``gluon.utils.split_and_load`` makes it."""
    return np.float32 if array.dtype == np.float64 else array.dtype


def _load(data, ctx):
    if isinstance(data, np.ndarray):
        return mx.nd.array(data, ctx=ctx, dtype=_dtype(data))
    return data.as_in_context(ctx)
