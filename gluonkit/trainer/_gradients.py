"""Passes over gradient arrays: zeroing them, their sum of squares in few calls, reading results,
scaling them by a factor on the device (folded into SGD's update where it can be)."""
import functools
import math
from collections import defaultdict

import mxnet as mx
import numpy as np

__all__ = ["clip_factors", "read", "replicas", "scaled_update", "sum_of_squares", "zero"]

_DOT_FROM = 1 << 16  # elements from which the pass uses a dot rather than multi_sum_sq
_SUM_SQ_GROUP = 110  # small arrays per multi_sum_sq call (its kernel takes 110 per pass)
_SMALLEST_FACTOR = 1e-30   # keeps lr * factor and wd / factor normal float32 numbers
_FOLDED_DTYPES = (np.float32, np.float16)   # weights that float32 learning rates serve exactly
_GROUPED_LISTS = 4    # gradient lists whose grouping a cache keeps


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


def sum_of_squares(grads, cache=None):
    """The sum of the squares of every element of every gradient, as a float64 NDArray of
    shape (1,) on the first gradient's context, not read (no wait); NaN or Inf if any is.
    ``cache``, a dict its caller owns, keeps the grouping of the lists it has seen (see
    ``_groups``).

    One pass over the gradients in few calls: a BLAS dot per large array (on CPU ~5x faster
    than ``multi_sum_sq`` on a 45 MB array, ~100x faster than ``multi_all_finite``) and one
    ``multi_sum_sq`` per group of small ones, whose many calls would otherwise cost the host
    more than the pass. A float32 sum of squares (``multi_sum_sq`` always gives float32)
    overflows for a gradient norm above ~1e19, which counts as non-finite too.
    """
    totals = []
    for (_, dtype), (large, small) in _groups(grads, {} if cache is None else cache).items():
        parts = [mx.nd.dot(flat, flat) for flat in (a.reshape(-1) for a in large)]
        parts += [mx.nd.multi_sum_sq(*small[i:i + _SUM_SQ_GROUP], num_arrays=len(small[i:i + _SUM_SQ_GROUP]))
                  .astype(dtype, copy=False) for i in range(0, len(small), _SUM_SQ_GROUP)]   # always float32
        total = mx.nd.concat(*parts, dim=0) if len(parts) > 1 else parts[0]
        totals.append(total.sum().astype("float64", copy=False))
    if not totals:
        return mx.nd.zeros((1,), dtype="float64")
    ctx = totals[0].context
    totals = [total.as_in_context(ctx) for total in totals]
    return mx.nd.add_n(*totals) if len(totals) > 1 else totals[0]


def _groups(grads, cache):
    """``{(context, dtype): (large arrays, small arrays)}``: what ``sum_of_squares`` squares.

    Grouping asks every array for its storage type, context, dtype and size, which costs
    the host more than the pass itself on a network of many small arrays: a list of dense
    float32 or float64 gradients (the same arrays update after update) is grouped once and
    kept in ``cache`` with its last few companions.
    """
    key = tuple(map(id, grads))
    if key in cache:
        return cache[key][1]
    groups, reusable = defaultdict(lambda: ([], [])), True   # arrays of one context and dtype add up
    for grad in grads:
        array = grad.data if grad.stype == "row_sparse" else grad
        if array.dtype == np.float16:
            array = array.astype("float32")   # float16 squares overflow from 256 on
        reusable = reusable and array is grad
        if array.size:
            groups[(array.context, array.dtype)][array.size < _DOT_FROM].append(array)
    groups = dict(groups)
    if reusable:   # the list is kept with its groups: its arrays' ids are not reused meanwhile
        cache[key] = (grads, groups)
        while len(cache) > _GROUPED_LISTS:
            del cache[next(iter(cache))]
    return groups


def read(*arrays):
    """The values of one-element NDArrays (on any contexts) as floats, read in one wait."""
    ctx = arrays[0].context
    values = mx.nd.concat(*(a.reshape((1,)).astype("float64", copy=False).as_in_context(ctx) for a in arrays),
                          dim=0)
    return [float(v) for v in values.asnumpy()]


def clip_factors(sum_sq, multiplier, clip):
    """``(norm, factors)`` computed on ``sum_sq``'s device, without a wait: the gradient norm
    sqrt(sum_sq) * multiplier (a float64 NDArray of shape (1,)), and ``[[f], [1 / f]]`` for the
    clip factor f = min(1, clip / norm) (float32, shape (2, 1)), as ``scaled_update`` takes it.

    A NaN or infinite norm gives f = 1: the gradient is applied as it is, as with a norm read
    on the host. A factor below 1e-30 (a norm more than 1e30 times the clip) is taken as 1e-30,
    so that 1 / f stays a float32 number. One call of a cached graph: its ten operators
    called one by one cost the host five times as much.
    """
    return _clip_graph(clip)(sum_sq, _constant(sum_sq.context, multiplier))


@functools.lru_cache(maxsize=8)
def _clip_graph(clip):
    """The graph of ``clip_factors`` for one clip value, as an ``mx.nd.CachedOp``."""
    sum_sq, multiplier = mx.sym.var("sum_sq"), mx.sym.var("multiplier")
    norm = mx.sym.broadcast_mul(mx.sym.sqrt(sum_sq), multiplier)
    finite = mx.sym.where(norm < math.inf, norm, mx.sym.zeros_like(norm))   # NaN < inf is false too
    ratio = mx.sym.clip(finite / clip, 1, 1 / _SMALLEST_FACTOR)   # max(norm, clip) / clip = 1 / f
    factors = mx.sym.concat(mx.sym.reciprocal(ratio), ratio, dim=0).reshape((2, 1)).astype("float32")
    return mx.nd.CachedOp(mx.sym.Group([norm, factors]))


@functools.lru_cache(maxsize=16)
def _constant(ctx, value):
    """``value`` as a float64 NDArray of shape (1,) on ``ctx``, made once (never written)."""
    return mx.nd.array([value], ctx=ctx, dtype="float64")


@functools.lru_cache(maxsize=16)
def _rates(ctx, lrs, wds):
    """The learning rates and weight decays (tuples) as the rows of a float32 array on ``ctx``,
    made once for the values of a group of parameters (never written)."""
    return mx.nd.array([lrs, wds], ctx=ctx, dtype="float32")


def scaled_update(updater, indices, grads, weights, factors, dense=True):
    """``updater(indices, grads, weights)`` with every gradient multiplied by a factor f on the
    devices, without reading it (no wait); ``factors`` is ``clip_factors``'s ``[[f], [1 / f]]``.

    MXNet's SGD (float32 or float16 weights, no ``clip_gradient``; ``dense``: no gradient is
    sparse) takes f into the learning rates and weight decays its preloaded multi-tensor
    kernels read from arrays: lr * (wd * w + r * f * g) == (lr * f) * (wd / f * w + r * g), one
    call more per 60 parameters. Otherwise each gradient is multiplied by f first (one
    operator per array).
    """
    optimizer = updater.optimizer
    if not (dense and type(optimizer) is mx.optimizer.SGD and not optimizer.clip_gradient):
        _scale_each(grads, factors)
        updater(indices, grads, weights)
        return
    # MXNet's Updater creates and syncs the states, groups the arrays by dtype and splits them
    # by aggregate_num, then calls the optimizer's update_multi_precision: only that call changes.
    optimizer.update_multi_precision = functools.partial(_sgd_update, optimizer, factors)
    try:
        updater(indices, grads, weights)
    finally:
        del optimizer.update_multi_precision


def _scale_each(grads, factors):
    """Multiply each gradient in place by f on its device: one cast per device and dtype."""
    cast = {}
    for grad in grads:
        key = (grad.context, grad.dtype)
        if key not in cast:
            cast[key] = factors[0].as_in_context(grad.context).astype(grad.dtype, copy=False)
        mx.nd.broadcast_mul(grad, cast[key], out=grad)


def _sgd_update(optimizer, factors, indices, weights, grads, states):
    """``SGD.update_multi_precision`` with the learning rates times f and the weight decays
    divided by f, given to MXNet's preloaded multi-tensor kernels as float32 arrays.

    The optimizer's own bookkeeping is kept: update counts (the learning-rate schedule),
    lr_mult and wd_mult, momentum, the float32 master weights of ``multi_precision``.
    """
    if not isinstance(indices, (list, tuple)):   # the Updater's path when SGD does not aggregate
        indices, weights, grads, states = [indices], [weights], [grads], [states]
    dtype = weights[0].dtype   # the Updater groups the arrays by dtype
    if dtype not in _FOLDED_DTYPES:
        _scale_each(grads, factors)   # and SGD's own update (the instance's is this function now)
        mx.optimizer.SGD.update_multi_precision(optimizer, indices, weights, grads, states)
        return
    ctx = weights[0].context
    # MXNet internals: the update count drives the lr scheduler; lrs/wds carry lr_mult and wd_mult
    optimizer._update_count(indices)
    given = _rates(ctx, tuple(optimizer._get_lrs(indices)), tuple(optimizer._get_wds(indices)))
    lrs, wds = mx.nd.broadcast_mul(given, factors.as_in_context(ctx))   # rows: lr * f, wd / f
    momentum = optimizer.momentum > 0
    if optimizer.multi_precision and dtype == np.float16:   # states: (momentum or None, float32 weights)
        moms, masters = zip(*states)
        per_weight = zip(weights, grads, moms, masters) if momentum else zip(weights, grads, masters)
        kernel = mx.nd.preloaded_multi_mp_sgd_mom_update if momentum else mx.nd.preloaded_multi_mp_sgd_update
    else:
        per_weight = zip(weights, grads, states) if momentum else zip(weights, grads)
        kernel = mx.nd.preloaded_multi_sgd_mom_update if momentum else mx.nd.preloaded_multi_sgd_update
    options = {"momentum": optimizer.momentum} if momentum else {}
    kernel(*(a for arrays in per_weight for a in arrays), lrs, wds, out=list(weights), num_weights=len(weights),
           rescale_grad=optimizer.rescale_grad, **options)
