"""Passes over gradient arrays: zeroing them, their sum of squares in few calls, reading results."""
import math
from collections import defaultdict

import mxnet as mx
import numpy as np

__all__ = ["clip_on_device", "read", "replicas", "sum_of_squares", "zero"]

_DOT_FROM = 1 << 16  # elements from which the pass uses a dot rather than multi_sum_sq
_SUM_SQ_GROUP = 60   # small arrays per multi_sum_sq call


def replicas(param):
    """The parameter's data arrays on every context, whatever their storage type.

    ``Parameter.list_data`` refuses row_sparse parameters; the fresh-gradient flags that tell
    which contexts got a gradient since the last update live on these arrays.
    """
    return param._check_and_get(param._data, list)


def zero(grads):
    """Set gradient arrays to zero, one fused call per context for the dense ones."""
    by_ctx = defaultdict(list)
    for grad in grads:
        if grad.stype == "default":
            by_ctx[grad.context].append(grad)
        else:
            mx.nd.zeros_like(grad, out=grad)
    for arrays in by_ctx.values():
        mx.nd.reset_arrays(*arrays, num_arrays=len(arrays))


def sum_of_squares(grads):
    """The sum of the squares of every element of every gradient, as a float64 NDArray of
    shape (1,) on the first gradient's context, not read (no wait); NaN or Inf if any is.

    One pass over the gradients in few calls: a BLAS dot per large array (on CPU ~5x faster
    than ``multi_sum_sq`` on a 45 MB array, ~100x faster than ``multi_all_finite``) and one
    ``multi_sum_sq`` per group of small ones, whose many calls would otherwise cost the host
    more than the pass. A float32 sum of squares (``multi_sum_sq`` always gives float32)
    overflows for a gradient norm above ~1e19, which counts as non-finite too.
    """
    groups = defaultdict(list)   # arrays of one context and dtype: their sums can be added
    for grad in grads:
        array = grad.data if grad.stype == "row_sparse" else grad
        if array.dtype == np.float16:
            array = array.astype("float32")   # float16 squares overflow from 256 on
        if array.size:
            groups[(array.context, array.dtype)].append(array)
    totals = []
    for (_, dtype), group in groups.items():
        small = [a for a in group if a.size < _DOT_FROM]
        parts = [mx.nd.dot(flat, flat) for flat in (a.reshape(-1) for a in group if a.size >= _DOT_FROM)]
        for i in range(0, len(small), _SUM_SQ_GROUP):
            chunk = small[i:i + _SUM_SQ_GROUP]
            sums = mx.nd.multi_sum_sq(*chunk, num_arrays=len(chunk)).sum()   # always float32
            parts.append(sums.astype(dtype, copy=False))
        total = mx.nd.add_n(*parts) if len(parts) > 1 else parts[0]
        totals.append(total.reshape((1,)).astype("float64", copy=False))
    if not totals:
        return mx.nd.zeros((1,), dtype="float64")
    ctx = totals[0].context
    totals = [total.as_in_context(ctx) for total in totals]
    return mx.nd.add_n(*totals) if len(totals) > 1 else totals[0]


def read(*arrays):
    """The values of one-element NDArrays (on any contexts) as floats, read in one wait."""
    ctx = arrays[0].context
    values = mx.nd.concat(*(a.reshape((1,)).astype("float64", copy=False).as_in_context(ctx) for a in arrays),
                          dim=0)
    return [float(v) for v in values.asnumpy()]


def clip_on_device(grads, norm, clip):
    """Multiply the gradients in place by min(1, clip / norm), ``norm`` a one-element NDArray,
    computed and applied on the devices (no wait): one operator per gradient array, one cast
    per device and dtype. A NaN or infinite norm gives 1: the gradient is applied as it is,
    as with a norm read on the host (MXNet's ``maximum`` and ``minimum`` propagate NaN)."""
    factor = mx.nd.where((norm > clip) * (norm < math.inf), clip / norm, mx.nd.ones_like(norm))
    factors = {}
    for grad in grads:
        key = (grad.context, grad.dtype)
        if key not in factors:
            factors[key] = factor.as_in_context(grad.context).astype(grad.dtype, copy=False)
        mx.nd.broadcast_mul(grad, factors[key], out=grad)
