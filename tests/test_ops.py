"""gluonkit.ops against NumPy, finite differences and hand-derived gradients, both modes."""
import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

from gluonkit import ops

PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


class _Apply(gluon.HybridBlock):
    """Runs ``fn(x, *arrays, **kwargs)`` so each op can be hybridized."""

    def __init__(self, fn, **kwargs):
        super().__init__()
        self._fn = fn
        self._kwargs = kwargs

    def hybrid_forward(self, F, x, *arrays):
        return self._fn(x, *arrays, **self._kwargs)


def _run(fn, x, hybridize, *arrays, head=None, **kwargs):
    """Output and gradient w.r.t. ``x`` of ``fn``, for the head gradient ``head`` (ones)."""
    block = _Apply(fn, **kwargs)
    if hybridize:
        block.hybridize()
    x = nd.array(x, dtype=x.dtype)
    x.attach_grad()
    arrays = [nd.array(a, dtype=a.dtype) for a in arrays]
    with autograd.record():
        y = block(x, *arrays)
    y.backward(None if head is None else nd.array(head, dtype=head.dtype))
    return y.asnumpy(), x.grad.asnumpy()


def _np_threshold(x, k, axis):
    return np.take(-np.sort(-x, axis=axis), [k - 1], axis=axis)


def _distinct(shape, dtype="float64"):
    """Values at least 1 apart, in random order, so small perturbations keep the order."""
    size = int(np.prod(shape))
    return (np.random.permutation(size) + 0.1 * np.random.rand(size)).reshape(shape).astype(dtype)


def _finite_differences(fn, x, head, eps=1e-3, **kwargs):
    """Central differences of sum(head * fn(x)); exact for functions linear near x."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        diff = (fn(nd.array(up, dtype=x.dtype), **kwargs).asnumpy()
                - fn(nd.array(down, dtype=x.dtype), **kwargs).asnumpy())
        grad[i] = (head * diff).sum() / (2 * eps)
    return grad


# An input with ties: small integers, a shape of 1 to 3 axes, an axis and a k for that axis.
tied_inputs = st.lists(st.integers(1, 5), min_size=1, max_size=3).flatmap(
    lambda shape: st.tuples(
        st.builds(lambda seed: np.random.RandomState(seed).randint(0, 3, shape).astype("float32"),
                  st.integers(0, 2 ** 16)),
        st.integers(-len(shape), len(shape) - 1)).flatmap(
        lambda xa: st.tuples(st.just(xa[0]), st.just(xa[1]),
                             st.integers(1, xa[0].shape[xa[1]]))))


@PROPERTY
@given(case=tied_inputs)
def test_topk_values_match_numpy_with_ties(case, hybridize):
    x, axis, k = case
    threshold = _np_threshold(x, k, axis)
    mask = (x >= threshold).astype(x.dtype)
    out, _ = _run(ops.topk_threshold, x, hybridize, k=k, axis=axis)
    assert_array_equal(out, threshold)
    out, _ = _run(ops.topk_mask, x, hybridize, k=k, axis=axis)
    assert_array_equal(out, mask)
    assert out.dtype == x.dtype
    out, _ = _run(ops.keep_topk, x, hybridize, k=k, axis=axis, fill=-7.0)
    assert_array_equal(out, np.where(mask, x, -7.0))
    # at least k marked (ties may add more), and every unmarked element is below the threshold
    assert (mask.sum(axis=axis) >= k).all()


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_gradients_match_finite_differences(axis, k, hybridize):
    x = _distinct((4, 5))
    head_shape = list(x.shape)
    head_shape[axis] = 1
    head_threshold = np.random.randn(*head_shape)
    head_full = np.random.randn(*x.shape)
    for fn, head, kwargs in [(ops.topk_threshold, head_threshold, {}),
                             (ops.keep_topk, head_full, {"fill": -1.0}),
                             (ops.topk_mask, head_full, {})]:
        _, grad = _run(fn, x, hybridize, head=head, k=k, axis=axis)
        expected = _finite_differences(fn, x, head, k=k, axis=axis, **kwargs)
        assert_allclose(grad, expected, rtol=1e-6, atol=1e-8, err_msg=fn.__name__)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gradients_match_hand_derivation(axis, hybridize):
    x = _distinct((4, 5))
    k = 3
    order = np.argsort(-x, axis=axis)
    kth = np.take(order, [k - 1], axis=axis)
    head = np.random.randn(*np.take(x, [0], axis=axis).shape)
    _, grad = _run(ops.topk_threshold, x, hybridize, head=head, k=k, axis=axis)
    expected = np.zeros_like(x)
    np.put_along_axis(expected, kth, head, axis=axis)          # one element per slice
    assert_array_equal(grad, expected)

    head = np.random.randn(*x.shape)
    _, grad = _run(ops.keep_topk, x, hybridize, head=head, k=k, axis=axis)
    rank = np.argsort(order, axis=axis)                         # 0 for the largest
    assert_array_equal(grad, np.where(rank < k, head, 0.0))


def test_keep_topk_with_infinite_fill(hybridize):
    x = _distinct((3, 5), "float32")
    out, grad = _run(ops.keep_topk, x, hybridize, k=2, fill=-np.inf)
    kept = x >= _np_threshold(x, 2, -1)
    assert_array_equal(out, np.where(kept, x, -np.inf))           # no nan from -inf * 0
    assert_array_equal(grad, kept.astype("float32"))
    softmax = nd.softmax(nd.array(out)).asnumpy()
    assert_allclose(softmax.sum(axis=1), 1.0, rtol=1e-6)
    assert_array_equal(softmax[~kept], 0.0)


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_keep_topk_of_integers_refuses_a_fill_the_dtype_cannot_hold(dtype):
    x = np.array([[3, 1, 2], [0, 5, 4]]).astype(dtype)
    assert_array_equal(ops.keep_topk(nd.array(x, dtype=dtype), 1, fill=7).asnumpy(),
                       np.where(x >= x.max(axis=1, keepdims=True), x, 7))
    low = -1 if dtype == "uint8" else -2.0 ** 40
    for fill in (-0.5, -np.inf, low):                # MXNet gave 0, the minimum, 255 or garbage
        with pytest.raises(ValueError, match=f"fill={fill!r} cannot be held by {dtype}"):
            ops.keep_topk(nd.array(x, dtype=dtype), 1, fill=fill)


def test_threshold_gradient_reaches_one_tied_element(hybridize):
    x = np.array([[1, 4, 4, 2], [3, 3, 3, 3], [5, 0, 5, 5]], dtype="float32")
    head = np.array([[2.0], [3.0], [-1.0]], dtype="float32")
    out, grad = _run(ops.topk_threshold, x, hybridize, head=head, k=2)
    assert_array_equal(out, [[4], [3], [5]])
    assert_array_equal(grad.sum(axis=1, keepdims=True), head)     # all of it arrives ...
    assert_array_equal((grad != 0).sum(axis=1), [1, 1, 1])       # ... at one element ...
    assert (x[grad != 0] == out.ravel()).all()                     # ... that holds the value
    _, grad = _run(ops.keep_topk, x, hybridize, k=2)
    assert_array_equal(grad, (x >= out).astype("float32"))  # every kept tie gets gradient


def test_masks_carry_no_gradient(hybridize):
    x = _distinct((3, 4), "float32")
    head = np.random.randn(3, 4).astype("float32")
    _, grad = _run(ops.topk_mask, x, hybridize, head=head, k=2)
    assert_array_equal(grad, np.zeros_like(x))
    _, grad = _run(ops.threshold_mask, x, hybridize, head=head, threshold=5.0)
    assert_array_equal(grad, np.zeros_like(x))


def test_threshold_mask_values(hybridize):
    x = np.random.randn(4, 6).astype("float64")
    per_sample = np.random.randn(4, 1)
    for threshold, arrays in [(0.25, ()), (None, (per_sample,))]:
        kwargs = {} if threshold is None else {"threshold": threshold}
        out, _ = _run(ops.threshold_mask, x, hybridize, *arrays, **kwargs)
        reference = x > (per_sample if threshold is None else threshold)
        assert_array_equal(out, reference.astype("float64"))
        assert out.dtype == np.float64
    # with topk_threshold's keepdims output: strictly above the 3rd largest = the top 2
    top = ops.topk_threshold(nd.array(x, dtype="float64"), k=3)
    out = ops.threshold_mask(nd.array(x, dtype="float64"), top).asnumpy()
    assert_array_equal(out, (x > _np_threshold(x, 3, -1)).astype("float64"))
    assert_array_equal(out.sum(axis=1), [2, 2, 2, 2])


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "uint8"])
def test_threshold_mask_of_integers_compares_exactly_like_numpy(dtype):
    # MXNet would cast the threshold to x's dtype: -1.5 to -1 (so -1 > -1.5 gave 0), -1 to 255
    x = np.array([[-3, -2, -1, 0, 1, 2, 100]]).astype(dtype)
    for threshold in [-1.5, -1, 0.5, 1.0, 99.9, 300, -300, np.inf, -np.inf]:
        expected = (x > threshold).astype(dtype)
        scalar = ops.threshold_mask(nd.array(x, dtype=dtype), threshold)
        assert scalar.dtype == np.dtype(dtype)
        assert_array_equal(scalar.asnumpy(), expected, err_msg=f"threshold {threshold}")
        for as_array in ([[threshold]], nd.array([[threshold]], dtype="float64")):
            out = ops.threshold_mask(nd.array(x, dtype=dtype), as_array).asnumpy()
            assert_array_equal(out, expected, err_msg=f"threshold [[{threshold}]]")


def test_threshold_mask_straight_through(hybridize):
    x = np.array([[1e8, -np.inf, 0.3, -0.2], [np.inf, 0.1, 0.7, 2.0]], dtype="float32")
    head = np.random.randn(*x.shape).astype("float32")
    out, grad = _run(ops.threshold_mask, x, hybridize, head=head, threshold=0.2,
                     straight_through=True)
    assert_array_equal(out, (x > 0.2).astype("float32"))        # exact 0/1, even at 1e8
    finite = np.isfinite(x)
    assert_array_equal(grad[finite], head[finite])               # passed unchanged
    assert_array_equal(grad[~finite], 0.0)                       # no nan from inf - inf

    # the threshold itself receives no gradient
    xs, thr = nd.array(x[:, 2:]), nd.array([[0.0], [0.5]])
    thr.attach_grad()
    with autograd.record():
        y = ops.threshold_mask(xs, thr, straight_through=True)
    y.backward()
    assert_array_equal(thr.grad.asnumpy(), 0.0)


@pytest.mark.parametrize("axis,keepdims", [(0, False), (1, True), (-1, False), (2, True)])
def test_pick_matches_numpy(axis, keepdims, hybridize):
    x = np.random.randn(3, 4, 5).astype("float32")
    n = x.shape[axis]
    index_shape = list(x.shape)
    index_shape[axis] = 1
    index = np.random.randint(-n, n, size=index_shape)
    head = np.random.randn(*(index_shape if keepdims else np.delete(x.shape, axis)))
    out, grad = _run(ops.pick, x, hybridize, index.astype("float32"), axis=axis,
                     keepdims=keepdims, head=head.astype("float32"))
    expected = np.take_along_axis(x, index % n, axis=axis)
    assert_array_equal(out, expected if keepdims else expected.squeeze(axis))
    expected_grad = np.zeros_like(x)
    np.put_along_axis(expected_grad, index % n, head.reshape(index_shape), axis=axis)
    assert_allclose(grad, expected_grad, rtol=0, atol=0)


@PROPERTY
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_pick_property(shape, data):
    x = np.random.randn(*shape).astype("float32")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    index_shape = tuple(np.delete(shape, axis))
    index = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(index_shape)),
                                        max_size=int(np.prod(index_shape))))).reshape(index_shape)
    out = ops.pick(nd.array(x), nd.array(index), axis=axis).asnumpy()
    expected = np.take_along_axis(x, np.expand_dims(index % n, axis), axis=axis).squeeze(axis)
    assert_array_equal(out, expected)
    bad = index.copy().ravel()
    bad[data.draw(st.integers(0, bad.size - 1))] = data.draw(
        st.one_of(st.integers(n, n + 100), st.integers(-n - 100, -n - 1)))
    with pytest.raises(IndexError, match=f"length {n}"):
        ops.pick(nd.array(x), nd.array(bad.reshape(index_shape)), axis=axis)


def test_pick_raises_on_out_of_range_index():
    x = nd.array(np.arange(12).reshape(3, 4))
    assert nd.pick(x, nd.array([0, 1, 4]), axis=1).asnumpy()[2] == 11   # nd.pick clips silently
    for bad in (4, -5, 100):
        with pytest.raises(IndexError, match=f"index {bad} at position \\(2,\\).*length 4"):
            ops.pick(x, nd.array([0, 1, bad]), axis=1)
    with pytest.raises(ValueError, match="not an integer"):
        ops.pick(x, nd.array([0, 1, 1.5]), axis=1)
    with pytest.raises(ValueError, match=r"shape \(2,\).*\(3,\)"):
        ops.pick(x, nd.array([0, 1]), axis=1)
    assert_array_equal(ops.pick(x, [0, -1, 3], axis=1).asnumpy(), [0, 7, 11])  # lists work


class _PickScore(gluon.HybridBlock):
    """A head that scores each sample by its label's logit, with ops.pick in hybrid_forward."""

    def __init__(self):
        super().__init__()
        self.dense = gluon.nn.Dense(4, in_units=3)

    def hybrid_forward(self, F, x, label):
        return ops.pick(self.dense(x), label)


def test_pick_hybridized_clips_out_of_range_as_mxnet_does():
    """Hybridized, an index the graph cannot check is clipped like MXNet's pick (never wrapped
    around to element 0); every index in [-n, n) gives what the imperative call gives."""
    net = _PickScore()
    net.initialize()
    x = nd.array(np.random.randn(6, 3))
    valid = nd.array([0, 3, -1, -4, 2, 1])
    imperative = net(x, valid).asnumpy()
    out_of_range = nd.array([4, 7, -5, -9, 3, 0])
    with pytest.raises(IndexError, match=r"index 4 at position \(0,\)"):
        net(x, out_of_range)
    net.hybridize()
    assert_array_equal(net(x, valid).asnumpy(), imperative)
    clipped = nd.pick(net.dense(x), out_of_range, mode="clip").asnumpy()   # elements 3, 3, 0, 0, 3, 0
    assert_array_equal(net(x, out_of_range).asnumpy(), clipped)
    # the gradient reaches the element picked, as MXNet's own pick sends it
    scores = nd.array(np.random.randn(2, 4))
    picked = ops.pick(mx.sym.var("s"), mx.sym.var("i"))
    executor = picked.bind(mx.cpu(), {"s": scores, "i": nd.array([4, -5])},
                           args_grad={"s": nd.zeros((2, 4))}, grad_req={"s": "write", "i": "null"})
    executor.forward(is_train=True)
    executor.backward(nd.ones((2,)))
    assert_array_equal(executor.outputs[0].asnumpy(), scores.asnumpy()[[0, 1], [3, 0]])
    assert_array_equal(executor.grad_dict["s"].asnumpy(), [[0, 0, 0, 1], [1, 0, 0, 0]])


def test_k_out_of_range_raises():
    x = nd.array(np.random.randn(2, 5))
    for fn in (ops.topk_threshold, ops.topk_mask, ops.keep_topk):
        for k in (0, 6):
            with pytest.raises(ValueError, match=f"k={k}"):
                fn(x, k)
        with pytest.raises(ValueError, match="k=3 is out of range for axis 0 of length 2"):
            fn(x, 3, axis=0)
        with pytest.raises(TypeError, match="k must be an int"):
            fn(x, 2.0)
        with pytest.raises(ValueError, match="axis=2"):
            fn(x, 1, axis=2)
        with pytest.raises(ValueError, match=r"scalar \(shape \(\)\) and has no axis -1"):
            fn(nd.array([3]).reshape(()), 1)
        # Symbols: checked against the shape when it can be inferred, else only k >= 1
        with pytest.raises(ValueError, match="of length 5"):
            fn(mx.sym.var("x", shape=(2, 5)), 6)
        with pytest.raises(ValueError, match="k=0"):
            fn(mx.sym.var("x"), 0)
    # inside a hybridized block the length is only known to MXNet, which refuses too
    block = _Apply(ops.topk_mask, k=6)
    block.hybridize()
    with pytest.raises(mx.base.MXNetError, match="k must be smaller than 5"):
        block(x).wait_to_read()


def test_hybridized_equals_imperative():
    x = np.random.randn(3, 6).astype("float32")
    head = np.random.randn(3, 6).astype("float32")
    index = np.array([0, -1, 5], dtype="float32")
    cases = [(ops.keep_topk, (), {"k": 2, "fill": -np.inf}),
             (ops.topk_mask, (), {"k": 2, "axis": 0}),
             (ops.threshold_mask, (np.zeros((3, 1), "float32"),), {"straight_through": True})]
    for fn, arrays, kwargs in cases:
        imperative = _run(fn, x, False, *arrays, head=head, **kwargs)
        hybrid = _run(fn, x, True, *arrays, head=head, **kwargs)
        for a, b in zip(imperative, hybrid):
            assert_array_equal(a, b, err_msg=fn.__name__)
    imperative = _run(ops.pick, x, False, index, head=head[:, 0])
    hybrid = _run(ops.pick, x, True, index, head=head[:, 0])
    for a, b in zip(imperative, hybrid):
        assert_array_equal(a, b)


def test_wrong_input_types_raise():
    with pytest.raises(TypeError, match="mx.nd.array"):
        ops.topk_mask(np.ones((2, 3)), 1)
    with pytest.raises(TypeError, match="fill must be a number"):
        ops.keep_topk(nd.ones((2, 3)), 1, fill="min")
    with pytest.raises(TypeError, match="threshold is a Symbol"):
        ops.threshold_mask(nd.ones((2, 3)), mx.sym.var("t"))
    with pytest.raises(ValueError, match=r"reshape it to \(2, 1\)"):
        ops.threshold_mask(nd.ones((2, 3)), nd.ones((2,)))


@pytest.mark.parametrize("threshold", ["0.5", None, True, ["a", "b"], [1.0, None]],
                         ids=["str", "none", "bool", "str-list", "none-in-list"])
def test_threshold_that_is_not_a_number_raises_type_error_naming_it(threshold):
    with pytest.raises(TypeError) as err:
        ops.threshold_mask(nd.ones((2, 3)), threshold)
    assert repr(threshold) in str(err.value)
    assert "pass a number" in str(err.value) or "pass an NDArray, a number" in str(err.value)


def test_nan_threshold_raises_and_infinite_ones_work():
    x = nd.array([[-np.inf, 0.0, 2.0]])
    with pytest.raises(ValueError, match="threshold is nan"):
        ops.threshold_mask(x, float("nan"))
    assert_array_equal(ops.threshold_mask(x, np.inf).asnumpy(), [[0, 0, 0]])
    assert_array_equal(ops.threshold_mask(x, -np.inf).asnumpy(), [[0, 1, 1]])
    assert_array_equal(ops.threshold_mask(x, np.float32(1)).asnumpy(), [[0, 0, 1]])


@pytest.mark.parametrize("index", ["ab", ["a", "b"], [0, None], None],
                         ids=["str", "str-list", "none-in-list", "none"])
def test_pick_with_indices_that_are_not_numbers_raises_type_error(index):
    with pytest.raises(TypeError) as err:
        ops.pick(nd.ones((2, 3)), index)
    assert repr(index) in str(err.value) and "pass an NDArray" in str(err.value)


def test_flags_must_be_booleans():
    x = nd.ones((2, 3))
    with pytest.raises(TypeError, match="straight_through must be True or False, got 'yes'"):
        ops.threshold_mask(x, 0.5, straight_through="yes")
    with pytest.raises(TypeError, match="keepdims must be True or False, got 1"):
        ops.pick(x, [0, 1], keepdims=1)
    np_ints = ops.pick(x * nd.array([[1, 2, 3]]), np.array([2, 0], dtype=np.int64), axis=np.int64(1))
    assert_array_equal(np_ints.asnumpy(), [3, 1])
    assert_array_equal(ops.topk_threshold(nd.array([[3, 1, 2]]), k=np.int32(2)).asnumpy(), [[2]])
