"""gluonkit.Trainer takes the counts gluon.Trainer takes: ints, floats, NumPy numbers, one-element
NDArrays; each checked against gluon.Trainer doing the same steps."""
import re
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from conftest import params_of

OPT = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}
RNG = np.random.RandomState(11)
X = RNG.randn(12, 4).astype("float32")
Y = RNG.randn(12, 3).astype("float32")


def _net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(6, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=6))
    net.initialize(mx.init.Xavier())
    return net


def _twin(net):
    other = gluon.nn.HybridSequential()
    other.add(gluon.nn.Dense(6, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=6))
    other.initialize()
    for mine, theirs in zip(other.collect_params().values(), net.collect_params().values()):
        mine.set_data(theirs.data())
    return other


def _backward(net, lo, hi, weights=None):
    """Backward of the (weighted) summed L2 loss of samples lo:hi."""
    with autograd.record():
        loss = ((net(nd.array(X[lo:hi])) - nd.array(Y[lo:hi])) ** 2).sum(axis=1)
        if weights is not None:
            loss = loss * nd.array(weights)
    loss.backward()


COUNTS = {
    "int": 5, "float": 2.5, "float-whole": 3.0, "np.float32": np.float32(1.75), "np.float64": np.float64(0.3),
    "np.int64": np.int64(7), "tiny": 1e-3,
    "NDArray float32": nd.array([1.75]), "NDArray float64": nd.array([0.3], dtype="float64"),
    "NDArray int32": nd.array([6], dtype="int32"), "NDArray (1, 1)": nd.array([[2.5]]),
}


@pytest.mark.parametrize("count", COUNTS.values(), ids=COUNTS.keys())
def test_each_kind_of_count_steps_bit_exactly_as_gluon_trainer(count):
    """With accumulate=1: the same rescale_grad as gluon's ``scale / count``, so the same bits.
    gluon.Trainer cannot take an NDArray (MXNet passes it to the kernel as text): it gets the
    count's value."""
    net = _net()
    ref = _twin(net)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT))
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT))
    value = count.asnumpy().item() if isinstance(count, nd.NDArray) else count
    for lo, hi in ((0, 5), (5, 12), (2, 9)):
        _backward(net, lo, hi)
        _backward(ref, lo, hi)
        assert trainer.step(count) is True
        plain.step(value)
    expected, actual = params_of(ref), params_of(net)
    for name in expected:
        assert_array_equal(actual[name], expected[name], err_msg=name)


@pytest.mark.parametrize("counts", [(2.5, 0.5, 1.25), (np.float32(0.75), nd.array([1.5]), 3),
                                    (0.0, 2.5), (4, 1, 2)])
def test_accumulated_real_counts_equal_one_step_by_their_sum(counts):
    """A weighted loss (per-sample weights) over three micro-batches, normalized by the sum of
    the window's counts, equals gluon.Trainer stepping the whole batch by that sum."""
    weights = RNG.rand(12).astype("float32")
    bounds = np.linspace(0, 12, len(counts) + 1).astype(int)
    net = _net()
    ref = _twin(net)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=len(counts))
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT))
    for _ in range(2):
        results = []
        for (lo, hi), count in zip(zip(bounds[:-1], bounds[1:]), counts):
            _backward(net, lo, hi, weights[lo:hi])
            results.append(trainer.step(count))
        assert results == [False] * (len(counts) - 1) + [True]
        _backward(ref, 0, 12, weights)
        plain.step(sum(c.asscalar() if isinstance(c, nd.NDArray) else c for c in counts))
    expected, actual = params_of(ref), params_of(net)
    for name in expected:
        assert_allclose(actual[name], expected[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_integer_counts_keep_exact_arithmetic_and_floats_add_as_floats():
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", accumulate=4)
    _backward(net, 0, 4)
    for count in (np.int64(2), 3, np.uint8(4)):
        trainer.step(count)
    steps, total = trainer.pending
    assert (steps, total, type(total)) == (3, 9, int)
    trainer.pending = (1, 2.5)
    trainer.step(np.float32(0.25))
    assert trainer.pending == (2, 2.75) and type(trainer.pending[1]) is float


def test_a_window_of_real_counts_summing_to_zero_is_dropped_with_a_warning():
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=2)
    before = params_of(net)
    _backward(net, 0, 4)
    assert trainer.step(0.0) is False
    with pytest.warns(UserWarning, match="sum to 0"):
        assert trainer.step(np.float32(0)) is False
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)


@pytest.mark.parametrize("bad", [nd.array([-0.5]), nd.array([np.nan]), nd.array([np.inf])])
def test_an_ndarray_count_that_is_no_count_is_refused_at_the_update_and_nothing_is_applied(bad):
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT))
    before = params_of(net)
    _backward(net, 0, 4)
    with pytest.raises(ValueError, match=rf"sum to {bad.asscalar()} .* must be >= 0"):
        trainer.step(bad)
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)


def _two_device_twins():
    """Two nets of the same weights on cpu(0) and cpu(1)."""
    ctx = [mx.cpu(0), mx.cpu(1)]
    nets = []
    for _ in range(2):
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(6, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=6))
        net.initialize(mx.init.Xavier(), ctx=ctx)
        nets.append(net)
    for mine, theirs in zip(nets[1].collect_params().values(), nets[0].collect_params().values()):
        mine.set_data(theirs.data(ctx[0]))
    return ctx, nets


def test_gluonnlps_allreduce_clip_update_pattern_equals_gluon_trainer():
    """GluonNLP's scripts: ``allreduce_grads()``, ``gluon.utils.clip_global_norm`` on the
    gradients, then ``update(float)``; on two devices, with a real normalizer."""
    ctx, nets = _two_device_twins()
    kit = gluonkit.Trainer(nets[0].collect_params(), "sgd", dict(OPT), update_on_kvstore=False)
    plain = gluon.Trainer(nets[1].collect_params(), "sgd", dict(OPT), update_on_kvstore=False)
    for lo, hi in ((0, 6), (6, 12), (1, 11)):
        norms = []
        for net, trainer in zip(nets, (kit, plain)):
            xs = gluonkit.split_and_load(nd.array(X[lo:hi]), ctx)
            ys = gluonkit.split_and_load(nd.array(Y[lo:hi]), ctx)
            with autograd.record():
                losses = [((net(a) - b) ** 2).sum() for a, b in zip(xs, ys)]
            autograd.backward(losses)
            trainer.allreduce_grads()
            grads = [p.grad(c) for p in net.collect_params().values() for c in ctx]
            norms.append(gluon.utils.clip_global_norm(grads, 0.5))
            trainer.update((hi - lo) / 2.5)
        assert norms[0] == norms[1]
    for c in ctx:
        for a, b in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
            assert_array_equal(a.data(c).asnumpy(), b.data(c).asnumpy(), err_msg=a.name)


def test_a_bool_or_text_count_is_a_type_error_and_changes_nothing():
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", accumulate=3)
    _backward(net, 0, 4)
    trainer.step(1.5)
    for bad in (True, "2", None, [2]):
        expected = rf"batch_size \(.*\) must be a finite number >= 0, got {re.escape(repr(bad))}"
        with pytest.raises(TypeError, match=expected):
            trainer.step(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert trainer.pending == (1, 1.5)


@pytest.mark.parametrize("policy", ["skip", "raise"])
def test_a_window_refused_for_its_ndarray_count_leaves_the_running_statistics(policy):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=3), gluon.nn.BatchNorm(in_channels=4), gluon.nn.Dense(2, in_units=4))
    net.initialize()
    trainer = gluonkit.Trainer(net, "sgd", {"learning_rate": 0.1}, on_nonfinite=policy)
    before = params_of(net)
    with autograd.record():
        loss = net(nd.array(np.random.RandomState(0).randn(5, 3))).sum()
    loss.backward()
    with pytest.raises(ValueError, match="sum to -1"):
        trainer.step(nd.array([-1.0]))
    after = params_of(net)
    for name in ("1.running_mean", "1.running_var", "0.weight"):
        assert_array_equal(after[name], before[name], err_msg=name)


def test_an_ndarray_count_of_zero_without_a_backward_steps_like_the_number_zero():
    # a micro-batch that got no sample, its count computed on the device (num_valid.sum())
    nets = [_net()]
    nets.append(_twin(nets[0]))
    ref = _twin(nets[0])
    trainers = [gluonkit.Trainer(n.collect_params(), "sgd", dict(OPT), accumulate=3) for n in nets]
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT))
    for zero, net, trainer in zip((nd.array([0]), 0), nets, trainers):
        for lo, hi in ((0, 5), (5, 12)):
            assert not trainer.step(zero)          # first in the window: no backward yet
            _backward(net, lo, hi)
            assert not trainer.step(hi - lo)
            assert trainer.step(zero)              # the third micro-batch, empty again
    for lo, hi in ((0, 5), (5, 12)):
        _backward(ref, lo, hi)
        plain.step(hi - lo)
    for name, value in params_of(ref).items():
        assert_allclose(params_of(nets[0])[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
        assert_array_equal(params_of(nets[0])[name], params_of(nets[1])[name], err_msg=name)


def test_an_ndarray_count_without_a_backward_that_is_not_zero_is_refused_at_the_update_and_nothing_is_applied():
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=2)
    before = params_of(net)
    trainer.step(nd.array([3]))                    # three samples, but no backward ran
    _backward(net, 0, 4)
    with pytest.raises(RuntimeError, match=r"step\(\) was given a count of 3 \(an NDArray, read now\) with no "
                                           r"backward since the last update"):
        trainer.step(4)
    assert trainer.pending == (0, 0)
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)


def test_update_counts_that_sum_to_zero_skip_the_update_with_a_warning():
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT))
    before = params_of(net)
    _backward(net, 0, 4)
    trainer.allreduce_grads()
    with pytest.warns(UserWarning, match="sum to 0"):
        trainer.update(nd.array([0]))
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)


def _backward_on(net, ctx, lo, hi):
    xs = gluonkit.split_and_load(nd.array(X[lo:hi]), ctx)
    ys = gluonkit.split_and_load(nd.array(Y[lo:hi]), ctx)
    with autograd.record():
        losses = [((net(a) - b) ** 2).sum() for a, b in zip(xs, ys)]
    autograd.backward(losses)


def test_update_without_allreduce_grads_on_two_devices_is_refused_and_changes_nothing():
    # each device would apply its own gradient (gluon.Trainer lets their weights part)
    ctx, (net, ref) = _two_device_twins()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), update_on_kvstore=False)
    before = params_of(net)
    _backward_on(net, ctx, 0, 6)
    with pytest.raises(RuntimeError, match=r"^update\(\) was called without allreduce_grads\(\): each device and "
                                           r"worker would apply its own gradient"):
        trainer.update(6)
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)
    trainer.allreduce_grads()     # the gradients are kept: the right calls then give gluon's update
    trainer.update(6)
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT), update_on_kvstore=False)
    _backward_on(ref, ctx, 0, 6)
    plain.step(6)
    for c in ctx:
        for a, b in zip(net.collect_params().values(), ref.collect_params().values()):
            assert_allclose(a.data(c).asnumpy(), b.data(c).asnumpy(), rtol=1e-6, atol=1e-7, err_msg=a.name)


def test_allreduce_grads_twice_or_then_step_is_refused_so_no_gradient_is_summed_twice():
    ctx, (net, ref) = _two_device_twins()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), update_on_kvstore=False)
    _backward_on(net, ctx, 0, 6)
    trainer.allreduce_grads()
    summed = [p.grad(c).asnumpy() for p in net.collect_params().values() for c in ctx]
    with pytest.raises(RuntimeError, match=r"^allreduce_grads\(\) was called twice before update\(\)"):
        trainer.allreduce_grads()
    with pytest.raises(RuntimeError, match=r"^step\(\) was called after allreduce_grads\(\): step sums the "
                                           r"gradients itself"):
        trainer.step(6)
    assert trainer.pending == (0, 0)
    for got, expected in zip((p.grad(c).asnumpy() for p in net.collect_params().values() for c in ctx), summed):
        assert_array_equal(got, expected)
    trainer.update(6)
    _backward_on(ref, ctx, 0, 6)
    gluon.Trainer(ref.collect_params(), "sgd", dict(OPT), update_on_kvstore=False).step(6)
    for a, b in zip(net.collect_params().values(), ref.collect_params().values()):
        assert_allclose(a.data(ctx[1]).asnumpy(), b.data(ctx[1]).asnumpy(), rtol=1e-6, atol=1e-7, err_msg=a.name)


@pytest.mark.parametrize("zero", [0, nd.array([0])], ids=["number", "ndarray"])
def test_a_window_of_micro_batches_that_all_got_no_sample_is_dropped_with_a_warning(zero):
    # the loop's last micro-batches were empty: no backward ran in the window at all
    net = _net()
    ref = _twin(net)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=2)
    _backward(net, 0, 5)
    trainer.step(5)
    _backward(net, 5, 12)
    assert trainer.step(7)
    after_first = params_of(net)
    assert not trainer.step(zero)
    with pytest.warns(UserWarning, match="sum to 0"):
        assert not trainer.step(zero)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not trainer.flush()               # nothing pending: no second warning
    for name, value in params_of(net).items():
        assert_array_equal(value, after_first[name], err_msg=name)
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT))
    _backward(ref, 0, 12)
    plain.step(12)
    for name, value in params_of(ref).items():
        assert_allclose(after_first[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


def test_allreduce_grads_and_update_where_the_kvstore_updates_are_refused_as_gluon_refuses_them():
    # gluon.Trainer raises AssertionError there; gluonkit's RuntimeError is one too
    ctx, (net, ref) = _two_device_twins()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), update_on_kvstore=True)
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT), update_on_kvstore=True)
    for t, model in ((trainer, net), (plain, ref)):
        _backward_on(model, ctx, 0, 6)
        t.step(6)
    before = params_of(net)
    for call in (trainer.allreduce_grads, lambda: trainer.update(6)):
        with pytest.raises(AssertionError):
            call()
        with pytest.raises(RuntimeError, match=r"cannot be used with update_on_kvstore=True: the kvstore updates"):
            call()
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)
        assert_allclose(value, params_of(ref)[name], rtol=1e-6, atol=1e-7, err_msg=name)
