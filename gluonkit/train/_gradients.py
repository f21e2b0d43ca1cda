"""Passes over gradient arrays: zeroing them, their sum of squares in few calls, reading results,
scaling them by a factor on the device (folded into SGD's update where it can be)."""
import functools
import math
from collections import defaultdict

import mxnet as mx
import numpy as np

__all__ = ["clip_factor", "read", "replicas", "scaled_update", "sum_of_squares", "zero"]

_DOT_FROM = 1 << 16  # elements from which the pass uses a dot rather than multi_sum_sq
_SUM_SQ_GROUP = 60   # small arrays per multi_sum_sq call
_SMALLEST_FACTOR = 1e-30   # keeps lr * factor and wd / factor normal float32 numbers
_FOLDED_DTYPES = (np.float32, np.float16)   # those whose update float32 learning rates serve exactly


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


def clip_factor(norm, clip):
    """The clip factor min(1, clip / norm) as a float64 NDArray of shape (1,) on ``norm``'s
    context, computed there (no wait); ``norm`` is a one-element NDArray.

    A NaN or infinite norm gives 1: the gradient is applied as it is, as with a norm read on
    the host (MXNet's ``maximum`` and ``minimum`` propagate NaN). A factor below 1e-30 (a norm
    more than 1e30 times the clip) is taken as 1e-30, so that it divides weight decays safely.
    """
    factor = mx.nd.where((norm > clip) * (norm < math.inf), clip / norm, mx.nd.ones_like(norm))
    return mx.nd.maximum(factor, _SMALLEST_FACTOR)


def scaled_update(updater, indices, grads, weights, factor):
    """``updater(indices, grads, weights)`` with every gradient multiplied by ``factor``, a
    one-element NDArray, without reading it (no wait).

    MXNet's SGD (float32 or float16 weights, dense gradients, no ``clip_gradient``) takes the
    factor into the learning rates and weight decays that its preloaded multi-tensor kernels
    read from arrays: lr * (wd * w + r * f * g) == (lr * f) * (wd / f * w + r * g), a handful of
    calls per 60 parameters. Otherwise each gradient is multiplied on its device first (one
    operator per array).
    """
    optimizer = updater.optimizer
    if not _folds(optimizer, grads, weights):
        _scale_each(grads, factor)
        updater(indices, grads, weights)
        return
    # MXNet's Updater creates and syncs the states, groups the arrays by dtype and splits them
    # by aggregate_num, then calls the optimizer's update_multi_precision: only that call changes.
    optimizer.update_multi_precision = functools.partial(_sgd_update, optimizer, factor)
    try:
        updater(indices, grads, weights)
    finally:
        del optimizer.update_multi_precision


def _folds(optimizer, grads, weights):
    """Whether the factor can go into ``optimizer``'s learning rates and weight decays."""
    return (type(optimizer) is mx.optimizer.SGD and not optimizer.clip_gradient
            and all(g.stype == "default" for g in grads)
            and all(w.stype == "default" and w.dtype in _FOLDED_DTYPES for w in weights))


def _scale_each(grads, factor):
    """Multiply each gradient in place by ``factor`` on its device: one cast per device and dtype."""
    factors = {}
    for grad in grads:
        key = (grad.context, grad.dtype)
        if key not in factors:
            factors[key] = factor.as_in_context(grad.context).astype(grad.dtype, copy=False)
        mx.nd.broadcast_mul(grad, factors[key], out=grad)


def _sgd_update(optimizer, factor, indices, weights, grads, states):
    """``SGD.update_multi_precision`` with the learning rates times ``factor`` and the weight
    decays divided by it, given to MXNet's preloaded multi-tensor kernels as float32 arrays.

    The optimizer's own bookkeeping is kept: update counts (the learning-rate schedule),
    lr_mult and wd_mult, momentum, the float32 master weights of ``multi_precision``.
    """
    if not isinstance(indices, (list, tuple)):   # the Updater's path when SGD does not aggregate
        indices, weights, grads, states = [indices], [weights], [grads], [states]
    ctx = weights[0].context
    master = optimizer.multi_precision and weights[0].dtype == np.float16
    # MXNet internals: the update count drives the lr scheduler; lrs/wds carry lr_mult and wd_mult
    optimizer._update_count(indices)
    factor = factor.as_in_context(ctx)
    lrs = (mx.nd.array(optimizer._get_lrs(indices), ctx=ctx, dtype="float64") * factor).astype("float32")
    wds = (mx.nd.array(optimizer._get_wds(indices), ctx=ctx, dtype="float64") / factor).astype("float32")
    momentum = optimizer.momentum > 0
    if master:   # states are (momentum or None, float32 master weights)
        moms, masters = zip(*states)
        per_weight = zip(weights, grads, moms, masters) if momentum else zip(weights, grads, masters)
        kernel = mx.nd.preloaded_multi_mp_sgd_mom_update if momentum else mx.nd.preloaded_multi_mp_sgd_update
    else:
        per_weight = zip(weights, grads, states) if momentum else zip(weights, grads)
        kernel = mx.nd.preloaded_multi_sgd_mom_update if momentum else mx.nd.preloaded_multi_sgd_update
    options = {"momentum": optimizer.momentum} if momentum else {}
    kernel(*(a for arrays in per_weight for a in arrays), lrs, wds, out=list(weights), num_weights=len(weights),
           rescale_grad=optimizer.rescale_grad, **options)
