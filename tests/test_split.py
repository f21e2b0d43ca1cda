"""gluonkit.split_and_load against NumPy slicing."""
import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import gluonkit


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(1, 40), num_ctx=st.integers(1, 4), batch_axis=st.sampled_from([0, 1, -1]),
       as_numpy=st.booleans())
def test_slices_cover_the_batch_in_order_with_sizes_differing_by_at_most_one(batch, num_ctx, batch_axis,
                                                                            as_numpy):
    shape = [3, 2, 3]
    shape[batch_axis] = batch
    data = np.arange(np.prod(shape), dtype="int32").reshape(shape)
    ctx_list = [mx.cpu(i) for i in range(num_ctx)]
    slices = gluonkit.split_and_load(data if as_numpy else mx.nd.array(data, dtype="int32"), ctx_list,
                                     batch_axis=batch_axis)
    sizes = [s.shape[batch_axis] for s in slices]
    assert len(slices) == min(batch, num_ctx)
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert [s.context for s in slices] == ctx_list[:len(slices)]
    assert all(s.dtype == np.int32 for s in slices)
    assert_array_equal(np.concatenate([s.asnumpy() for s in slices], axis=batch_axis), data)


def test_batch_smaller_than_contexts_gives_fewer_slices():
    slices = gluonkit.split_and_load(mx.nd.array([[1.0, 2.0]]), [mx.cpu(0), mx.cpu(1), mx.cpu(2)])
    assert len(slices) == 1
    assert_array_equal(slices[0].asnumpy(), [[1.0, 2.0]])


def test_larger_slices_come_first():
    assert [s.shape[0] for s in gluonkit.split_and_load(mx.nd.zeros((7, 2)), [mx.cpu(i) for i in range(3)])] \
        == [3, 2, 2]


def test_empty_batch_is_a_value_error():
    with pytest.raises(ValueError, match=r"empty batch.*\(0, 3\)"):
        gluonkit.split_and_load(np.zeros((0, 3)), [mx.cpu(0), mx.cpu(1)])


@pytest.mark.parametrize("ctx_list,error,match", [
    ([], ValueError, "ctx_list is empty"),
    ([mx.cpu(0), mx.cpu(0)], ValueError, r"names a context twice"),
    (["cpu(0)"], TypeError, r"'cpu\(0\)'"),
])
def test_bad_context_lists_are_named(ctx_list, error, match):
    with pytest.raises(error, match=match):
        gluonkit.split_and_load(mx.nd.zeros((4, 3)), ctx_list)


def test_bad_data_and_axis_are_named():
    with pytest.raises(TypeError, match="list"):
        gluonkit.split_and_load([1, 2, 3], [mx.cpu(0)])
    with pytest.raises(ValueError, match="batch_axis=2"):
        gluonkit.split_and_load(mx.nd.zeros((4, 3)), [mx.cpu(0)], batch_axis=2)


def test_single_context_is_accepted():
    (out,) = gluonkit.split_and_load(np.ones((2, 2), dtype="float32"), mx.cpu(0))
    assert out.shape == (2, 2) and out.context == mx.cpu(0)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=7), num_ctx=st.integers(1, 3))
def test_a_list_of_samples_of_their_own_shapes_goes_one_list_per_device(sizes, num_ctx):
    samples = [np.full((3, s, s + 1), i, dtype="float32") for i, s in enumerate(sizes)]
    ctx_list = [mx.cpu(i) for i in range(num_ctx)]
    parts = gluonkit.split_and_load(samples, ctx_list)
    assert len(parts) == min(len(sizes), num_ctx)
    counts = [len(p) for p in parts]
    assert max(counts) - min(counts) <= 1
    flat = [x for part in parts for x in part]
    assert [x.shape for x in flat] == [s.shape for s in samples]
    for part, ctx in zip(parts, ctx_list):
        assert all(x.context == ctx for x in part)
    for x, s in zip(flat, samples):
        assert_array_equal(x.asnumpy(), s)


def test_ragged_boxes_are_padded_to_the_longest_with_the_given_value():
    boxes = [np.arange(k * 5, dtype="float32").reshape(k, 5) for k in (2, 3, 1)]
    first, second = gluonkit.split_and_load(boxes, [mx.cpu(0), mx.cpu(1)], pad_value=-1)
    assert first.shape == (2, 3, 5) and first.context == mx.cpu(0)
    assert second.shape == (1, 3, 5) and second.context == mx.cpu(1)
    expected = np.full((3, 3, 5), -1, dtype="float32")
    for row, b in zip(expected, boxes):
        row[:len(b)] = b
    assert_array_equal(np.concatenate([first.asnumpy(), second.asnumpy()]), expected)
    with pytest.raises(ValueError, match="first axis only"):
        gluonkit.split_and_load([np.zeros((2, 3)), np.zeros((2, 4))], [mx.cpu(0)], pad_value=0)


@pytest.mark.parametrize("args,error,match", [
    ((np.array(["a", "b"]), [mx.cpu(0)]), TypeError, "dtype <U1"),
    ((np.array([object(), 1]), [mx.cpu(0)]), TypeError, "dtype object"),
    (([np.zeros(2), "x"], [mx.cpu(0)]), TypeError, r"data\[1\].*str.*one array per sample"),
    (([], [mx.cpu(0)]), ValueError, "empty batch"),
    ((np.zeros((2, 3)), [mx.cpu(0)], 1.0), TypeError, "batch_axis must be an int, got 1.0"),
    ((np.zeros((2, 3)), None), TypeError, "got None"),
])
def test_issue_14_bad_inputs_are_named(args, error, match):
    with pytest.raises(error, match=match):
        gluonkit.split_and_load(*args)


@pytest.mark.parametrize("batch, parts, error", [(0, 2, ValueError), (-3, 2, ValueError), (4, 0, ValueError),
                                                 (2.5, 2, TypeError)])
def test_split_sizes_refuses_non_positive_sizes(batch, parts, error):
    from gluonkit.split import split_sizes
    with pytest.raises(error, match="must be a positive integer"):
        split_sizes(batch, parts)


def test_numpy_float64_arrives_as_float32_like_gluon_and_other_dtypes_are_kept():
    """NumPy's default float64 fed as float64 to a float32 network fails inside MXNet."""
    x = np.random.RandomState(0).randn(5, 3)
    ctx_list = [mx.cpu(0), mx.cpu(1)]
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize(ctx=ctx_list)
    ours = gluonkit.split_and_load(x, ctx_list)
    theirs = mx.gluon.utils.split_and_load(x, ctx_list, even_split=False)
    for mine, gluons in zip(ours, theirs):
        assert mine.dtype == gluons.dtype == np.float32 and mine.context == gluons.context
        assert_array_equal(net(mine).asnumpy(), net(gluons).asnumpy())
    samples = gluonkit.split_and_load([x[:2], x[2:]], ctx_list)
    padded = gluonkit.split_and_load([x[:2], x[2:]], ctx_list, pad_value=-1)
    assert [a.dtype for part in samples for a in part] == [np.float32] * 2
    assert [a.dtype for a in padded] == [np.float32] * 2
    assert_array_equal(padded[1].asnumpy()[0], x[2:].astype("float32"))
    assert gluonkit.split_and_load(np.arange(3, dtype="int64"), ctx_list)[0].dtype == np.int64
