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
