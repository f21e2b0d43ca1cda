"""Top-k thresholds, masks and row picks that keep the gradient where it belongs.

Every function takes an NDArray or a Symbol and uses the matching operator namespace
(``mx.nd`` or ``mx.sym``), so the same call runs imperatively and inside a hybridized
``hybrid_forward``. Checks that need shapes (``k`` against the axis length) run whenever
the shapes are known: always on NDArrays, and on Symbols whose shapes can be inferred. Checks
that need values (``pick``'s index range) run on NDArrays only; on Symbols ``pick`` clips an
index out of range, as MXNet does.
"""
import math
import numbers

import mxnet as mx
import numpy as np

from .validate import is_int

__all__ = ["topk_threshold", "topk_mask", "keep_topk", "threshold_mask", "pick"]


def _namespace(x):
    """Return ``mx.nd`` for an NDArray and ``mx.sym`` for a Symbol."""
    if isinstance(x, (mx.np.ndarray, mx.sym.np._Symbol)):
        raise TypeError(f"gluonkit.ops works on legacy NDArray and Symbol, got {type(x).__name__}; "
                        "convert with x.as_nd_ndarray() (or run outside mx.npx.set_np()).")
    if isinstance(x, mx.sym.Symbol):
        return mx.sym
    if isinstance(x, mx.nd.NDArray):
        return mx.nd
    raise TypeError(f"x must be an mx.nd.NDArray or an mx.sym.Symbol, got {type(x).__name__}; "
                    "wrap NumPy data with mx.nd.array(x).")


def _shape(x):
    """The shape of ``x`` if it is known (always for NDArrays, sometimes for Symbols), else None."""
    if isinstance(x, mx.nd.NDArray):
        return x.shape
    try:
        _, out_shapes, _ = x.infer_shape_partial()
    except mx.base.MXNetError:
        return None
    if len(out_shapes) != 1 or not out_shapes[0] or 0 in out_shapes[0]:
        return None
    return out_shapes[0]


def _axis_length(x, axis):
    """The length of ``axis`` of ``x`` if its shape is known, else None; checks ``axis``."""
    if not is_int(axis):
        raise TypeError(f"axis must be an int, got {axis!r}.")
    shape = _shape(x)
    if shape is None:
        return None
    if not shape:
        raise ValueError(f"x is a scalar (shape ()) and has no axis {axis} to select along; "
                         "reshape it to (1,) first.")
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis={axis} is out of range for an input of shape {shape}; "
                         f"use an axis in [{-len(shape)}, {len(shape) - 1}].")
    return shape[axis]


def _check_k(x, k, axis):
    """Raise unless ``k`` is an int in [1, length of ``axis``] (the upper bound when known)."""
    if not is_int(k):
        raise TypeError(f"k must be an int, got {k!r}.")
    length = _axis_length(x, axis)
    if k < 1 or (length is not None and k > length):
        upper = "the axis length" if length is None else length
        raise ValueError(f"k={k} is out of range for axis {axis}"
                         + ("" if length is None else f" of length {length}")
                         + f"; use 1 <= k <= {upper}.")


def _check_flag(value, name):
    """Raise ``TypeError`` unless ``value`` is a bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}.")


def _numeric(value, name, kinds="iuf"):
    """``value`` (a number or nested list of numbers) as a NumPy array of one of ``kinds``."""
    array = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    if array is None or array.dtype.kind not in kinds:
        raise TypeError(f"{name} must hold numbers, got {value!r} of type "
                        f"{type(value).__name__}; pass an NDArray, a number or a list of "
                        "numbers (convert text first, e.g. float('0.5')).")
    return array


def _like(value, x, name):
    """``value`` as an array of ``x``'s kind (and, for NDArrays, its context and dtype)."""
    if isinstance(x, mx.sym.Symbol):
        if not isinstance(value, mx.sym.Symbol):
            raise TypeError(f"{name} must be a Symbol when x is a Symbol, "
                            f"got {type(value).__name__}.")
        return value
    if isinstance(value, mx.sym.Symbol):
        raise TypeError(f"{name} is a Symbol but x is an NDArray; pass an NDArray.")
    if isinstance(value, mx.nd.NDArray):
        return value.as_in_context(x.context).astype(x.dtype, copy=False)
    return mx.nd.array(_numeric(value, name), ctx=x.context, dtype=x.dtype)


def topk_threshold(x, k, axis=-1):
    """The k-th largest value of each slice along ``axis``, with ``axis`` kept (size 1).

    The gradient reaches the element that holds the value (one element per slice, also
    when several elements tie with it), unlike masks built from ``topk(ret_typ='indices')``.

    Parameters
    ----------
    x : NDArray or Symbol
    k : int
        1 for the largest value, up to the length of ``axis``.
    axis : int, default -1

    Example::

        >>> topk_threshold(mx.nd.array([[3, 1, 2], [0, 5, 4]]), k=2)
        [[2.]
         [4.]]
    """
    F = _namespace(x)
    _check_k(x, k, axis)
    top = F.topk(x, axis=axis, k=k, ret_typ="value")
    return F.slice_axis(top, axis=axis, begin=k - 1, end=k)


def topk_mask(x, k, axis=-1):
    """1 where an element is >= the k-th largest value of its slice, else 0 (x's dtype).

    Elements that tie with the threshold are all marked, so a slice may hold more than ``k``
    ones. The mask carries no gradient.

    Example::

        >>> topk_mask(mx.nd.array([[3, 1, 2], [0, 5, 4]]), k=2)
        [[1. 0. 1.]
         [0. 1. 1.]]
    """
    F = _namespace(x)
    return F.BlockGrad(F.broadcast_greater_equal(x, topk_threshold(x, k, axis)))


def keep_topk(x, k, axis=-1, fill=0.0):
    """``x`` where it is among the top ``k`` of its slice (ties included), ``fill`` elsewhere.

    The gradient flows to the kept elements only. ``fill`` may be ``-inf`` (for a softmax
    over the kept elements): values are selected, never multiplied by the mask. For an
    integer NDArray ``x``, ``fill`` must be an integer its dtype holds (``ValueError``).

    Example::

        >>> keep_topk(mx.nd.array([[3, 1, 2], [0, 5, 4]]), k=1, fill=-1)
        [[ 3. -1. -1.]
         [-1.  5. -1.]]
    """
    F = _namespace(x)
    if isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"fill must be a number, got {fill!r}.")
    if isinstance(x, mx.nd.NDArray) and np.dtype(x.dtype).kind in "iu":
        limits = np.iinfo(x.dtype)
        if not (math.isfinite(fill) and float(fill).is_integer()
                and limits.min <= fill <= limits.max):
            raise ValueError(f"fill={fill!r} cannot be held by {np.dtype(x.dtype).name} x, "
                             f"whose values are the integers in [{limits.min}, {limits.max}]; "
                             "pass such a fill, or cast x to a float dtype first.")
    return F.where(topk_mask(x, k, axis), x, F.zeros_like(x) + float(fill))


def threshold_mask(x, threshold, straight_through=False):
    """``(x > threshold)`` as 1 and 0 in x's dtype.

    Parameters
    ----------
    x : NDArray or Symbol
    threshold : float, NDArray or Symbol
        A number, or an array that broadcasts to ``x``: the keepdims output of
        :func:`topk_threshold`, or shape ``(N, 1, ...)`` for one value per sample. An
        integer NDArray ``x`` is compared with it exactly, as NumPy does (-1 > -1.5).
    straight_through : bool, default False
        False: the mask carries no gradient. True: the incoming gradient passes to ``x``
        unchanged (the straight-through estimator); ``threshold`` gets none either way.

    Example::

        >>> x = mx.nd.array([[3, 1, 2], [0, 5, 4]])
        >>> threshold_mask(x, mx.nd.array([[1.5], [4.5]]))
        [[1. 0. 1.]
         [0. 1. 0.]]
    """
    F = _namespace(x)
    _check_flag(straight_through, "straight_through")
    if threshold is None or isinstance(threshold, (bool, np.bool_)):
        raise TypeError(f"threshold must be a number or an array that broadcasts to x, got "
                        f"{threshold!r}; pass a number such as 0.5, or an NDArray.")
    # MXNet casts the threshold to x's dtype (-1.5 to -1 for int32, -1 to 255 for uint8):
    # integers are compared in float64 instead, which holds them and the threshold exactly
    exact = isinstance(x, mx.nd.NDArray) and np.dtype(x.dtype).kind in "iu"
    values = x.astype("float64") if exact else x
    if isinstance(threshold, numbers.Real):
        if math.isnan(threshold):
            raise ValueError("threshold is nan, and every comparison with nan is false; pass "
                             "a number (inf and -inf give all zeros and all ones).")
        mask = values > float(threshold)
    else:
        threshold = _like(threshold, values, "threshold")
        if isinstance(x, mx.nd.NDArray) and _broadcast(threshold.shape, x.shape) != x.shape:
            raise ValueError(f"threshold of shape {threshold.shape} does not broadcast to x of "
                             f"shape {x.shape}; for one value per sample reshape it to "
                             f"{(x.shape[0],) + (1,) * (x.ndim - 1)}.")
        mask = F.broadcast_greater(values, threshold)
    mask = F.BlockGrad(mask.astype(x.dtype) if exact else mask)
    if straight_through:
        # x - x is exactly 0 for finite x, so the forward values stay exactly 0 and 1; where x
        # is infinite (nan - nan) the zero is taken instead and that element gets no gradient.
        identity = x - F.BlockGrad(x)
        mask = mask + F.where(identity == identity, identity, F.zeros_like(identity))
    return mask


def _broadcast(shape, target):
    """NumPy's broadcast of two shapes, or None if they do not broadcast."""
    try:
        return np.broadcast_shapes(shape, target)
    except ValueError:
        return None


def pick(x, index, axis=-1, keepdims=False):
    """Pick one element per slice along ``axis``, like ``nd.pick``, but never silently clip.

    ``index`` has ``x``'s shape without ``axis`` (or with size 1 there). Negative indices
    count from the end, as in Python. On NDArrays an index outside ``[-n, n)`` raises
    ``IndexError``; ``nd.pick`` would clip it to the nearest valid one. On Symbols (inside a
    hybridized block) the values are unknown until the graph runs and cannot be checked: an
    index outside ``[-n, n)`` is clipped to it, as MXNet's ``pick`` clips (``n`` and above
    give the last element, below ``-n`` the first), so every valid index gives the same
    answer in both modes. The gradient reaches the picked elements.

    Example::

        >>> pick(mx.nd.array([[3, 1, 2], [0, 5, 4]]), mx.nd.array([0, -1]))
        [3. 4.]
        >>> pick(mx.nd.array([[3, 1, 2]]), mx.nd.array([3]))    # nd.pick would give 2
        Traceback (most recent call last):
        IndexError: index 3 at position (0,) is out of range for axis -1 of length 3 ...
    """
    F = _namespace(x)
    _check_flag(keepdims, "keepdims")
    length = _axis_length(x, axis)
    if isinstance(x, mx.nd.NDArray):
        index = _index_array(index, x)
        _check_index(x, index, axis, length)
        return F.pick(x, index, axis=axis, keepdims=keepdims, mode="wrap")
    index = F.cast(_like(index, x, "index"), dtype="float64")   # exact for any axis length
    n = F.cast(F.slice_axis(F.shape_array(x), axis=0, begin=axis,
                            end=None if axis == -1 else axis + 1), dtype="float64")
    # Python's negative indices, then 'clip': n and above give the last element, below -n the first
    index = F.broadcast_add(index, F.broadcast_mul(index < 0, n))
    return F.pick(x, index, axis=axis, keepdims=keepdims, mode="clip")


def _index_array(index, x):
    """``index`` as an NDArray on ``x``'s context, keeping an integer dtype if it has one."""
    if isinstance(index, mx.nd.NDArray):
        return index.as_in_context(x.context)
    if isinstance(index, mx.sym.Symbol):
        raise TypeError("index is a Symbol but x is an NDArray; pass an NDArray or a list.")
    array = _numeric(index, "index")
    return mx.nd.array(array, ctx=x.context, dtype=array.dtype)


def _check_index(x, index, axis, length):
    """Raise unless ``index`` has a shape ``pick`` accepts and holds integers in [-n, n)."""
    dims = list(x.shape)
    del dims[axis]
    kept = list(x.shape)
    kept[axis] = 1
    if index.shape not in (tuple(dims), tuple(kept)):
        raise ValueError(f"index has shape {index.shape} but x of shape {x.shape} needs "
                         f"{tuple(dims)} (or {tuple(kept)}) to pick along axis {axis}.")
    values = index.asnumpy()
    fractional = values != np.floor(values)
    if fractional.any():
        raise ValueError(f"index holds {values[fractional][0]}, which is not an integer; "
                         "pick needs whole-number indices.")
    bad = (values < -length) | (values >= length)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise IndexError(f"index {values[where]:g} at position {where} is out of range for axis "
                         f"{axis} of length {length} ({int(bad.sum())} out of range in all); "
                         f"use integers in [{-length}, {length - 1}].")
