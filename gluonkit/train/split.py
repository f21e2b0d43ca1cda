"""Split a batch over devices, unevenly when it must and never into empty slices."""
import mxnet as mx
import numpy as np

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
    parts = min(batch_size, num_parts)
    base, extra = divmod(batch_size, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def _check_ctx_list(ctx_list):
    if isinstance(ctx_list, mx.Context):
        return [ctx_list]
    ctx_list = list(ctx_list)
    if not ctx_list:
        raise ValueError("ctx_list is empty; pass at least one context, e.g. [mx.cpu()].")
    for ctx in ctx_list:
        if not isinstance(ctx, mx.Context):
            raise TypeError(f"ctx_list must hold mx.Context objects, got {ctx!r}; "
                            "use mx.cpu(i) or mx.gpu(i).")
    if len(set(ctx_list)) != len(ctx_list):
        raise ValueError(f"ctx_list {ctx_list} names a context twice; list each device once.")
    return ctx_list


def split_and_load(data, ctx_list, batch_axis=0):
    """Split ``data`` along ``batch_axis`` and load one slice onto each context that gets data.

    Unlike ``gluon.utils.split_and_load`` it never fails on uneven sizes and never builds a
    zero-size slice: slice sizes differ by at most one, and a batch smaller than
    ``len(ctx_list)`` gives one slice of one sample for each of the first contexts.

    Parameters
    ----------
    data : NDArray or numpy.ndarray
        The batch.
    ctx_list : list of Context
        The devices, in order. A single Context is accepted.
    batch_axis : int, default 0
        The axis that holds the samples.

    Returns
    -------
    list of NDArray
        One slice per context that receives at least one sample, in context order.

    Example::

        >>> xs = split_and_load(mx.nd.arange(5), [mx.cpu(0), mx.cpu(1)])
        >>> [x.shape for x in xs]
        [(3,), (2,)]
    """
    ctx_list = _check_ctx_list(ctx_list)
    if not isinstance(data, (mx.nd.NDArray, np.ndarray)):
        raise TypeError(f"data must be an NDArray or a numpy array, got {type(data).__name__}.")
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


def _slice(data, axis, begin, end):
    if begin == 0 and end == data.shape[axis]:
        return data
    if isinstance(data, np.ndarray):
        return np.take(data, range(begin, end), axis=axis)
    return data.slice_axis(axis=axis, begin=begin, end=end)


def _load(data, ctx):
    if isinstance(data, np.ndarray):
        return mx.nd.array(data, ctx=ctx, dtype=data.dtype)
    return data.as_in_context(ctx)
