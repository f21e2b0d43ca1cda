"""gluonkit.Trainer against plain Gluon doing the same work the long way."""
import re
import warnings

import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from conftest import params_of as _params
from gluonkit.params import select

OPTIMIZERS = {
    "sgd": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}),
    "adam": ("adam", {"learning_rate": 0.01, "wd": 0.01}),
}


def _mlp():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(5, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=5))
    return net


def _copy_params(src, dst, ctx_list):
    """Initialize ``dst`` on ``ctx_list`` with the values of ``src``."""
    dst.initialize(ctx=ctx_list)
    for a, b in zip(src.collect_params().values(), dst.collect_params().values()):
        b.set_data(a.data(a.list_ctx()[0]))


def _twins(make, ctx_list):
    """A reference network on cpu(0) and an identical one on ``ctx_list``."""
    ref = make()
    ref.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net = make()
    _copy_params(ref, net, ctx_list)
    return ref, net


def _assert_same(ref, net, rtol=1e-5, atol=1e-6):
    expected, actual = _params(ref), _params(net)
    for name in expected:
        assert_allclose(actual[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


def _loss(out, y):
    return ((out - y) ** 2).sum(axis=1)


def _backward_on(net, x, y, ctx_list):
    """Forward and backward one micro-batch split over ``ctx_list``; return its size."""
    xs = gluonkit.split_and_load(x, ctx_list)
    ys = gluonkit.split_and_load(y, ctx_list)
    with autograd.record():
        losses = [_loss(net(a), b) for a, b in zip(xs, ys)]
    autograd.backward(losses)
    return x.shape[0]


def _reference_step(ref, trainer, x, y):
    with autograd.record():
        loss = _loss(ref(nd.array(x)), nd.array(y))
    loss.backward()
    trainer.step(x.shape[0])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_ctx=st.integers(1, 3), accumulate=st.integers(1, 4), optimizer=st.sampled_from(sorted(OPTIMIZERS)),
       data=st.data())
def test_accumulation_equals_one_big_batch(num_ctx, accumulate, optimizer, data):
    sizes = data.draw(st.lists(st.integers(1, 17), min_size=2 * accumulate, max_size=2 * accumulate),
                      label="micro-batch sizes")
    ctx_list = [mx.cpu(i) for i in range(num_ctx)]
    rng = np.random.RandomState(sum(sizes))
    x = rng.randn(sum(sizes), 4).astype("float32")
    y = rng.randn(sum(sizes), 3).astype("float32")
    ref, net = _twins(_mlp, ctx_list)
    name, opt_params = OPTIMIZERS[optimizer]
    ref_trainer = gluon.Trainer(ref.collect_params(), name, dict(opt_params))
    trainer = gluonkit.Trainer(net.collect_params(), name, dict(opt_params), accumulate=accumulate)

    offsets = np.cumsum([0] + sizes)
    for window in range(2):
        window_sizes = range(window * accumulate, (window + 1) * accumulate)
        updated = [trainer.step(_backward_on(net, nd.array(x[offsets[j]:offsets[j + 1]]),
                                             nd.array(y[offsets[j]:offsets[j + 1]]), ctx_list))
                   for j in window_sizes]
        assert updated == [False] * (accumulate - 1) + [True]
        begin, end = offsets[window * accumulate], offsets[(window + 1) * accumulate]
        _reference_step(ref, ref_trainer, x[begin:end], y[begin:end])
        _assert_same(ref, net, atol=1e-5)
    for param in net.collect_params().values():  # every replica holds the same weights
        for arr in param.list_data()[1:]:
            assert_array_equal(arr.asnumpy(), param.list_data()[0].asnumpy())


class _ConvNet(gluon.nn.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = gluon.nn.Conv2D(4, 3, padding=1, in_channels=2)
        self.pool = gluon.nn.GlobalAvgPool2D()
        self.out = gluon.nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, x):
        return self.out(self.pool(F.relu(self.conv(x))))


@pytest.mark.parametrize("hybrid", [False, True], ids=["imperative", "hybrid"])
def test_micro_batches_of_different_spatial_sizes_match_summed_gradients(ctx_list, hybrid):
    """Three micro-batches of 6x6, 9x9 and 7x7 images against gradients summed by hand."""
    lr, wd = 0.5, 0.01
    ref, net = _twins(_ConvNet, ctx_list)
    if hybrid:
        net.hybridize()
    rng = np.random.RandomState(1)
    batches = [(rng.rand(n, 2, s, s).astype("float32"), rng.randn(n, 3).astype("float32"))
               for n, s in [(3, 6), (5, 9), (2, 7)]]
    total = sum(x.shape[0] for x, _ in batches)

    grad_sums = {k: 0.0 for k in _params(ref)}
    for x, y in batches:
        with autograd.record():
            loss = _loss(ref(nd.array(x)), nd.array(y))
        loss.backward()
        for k, p in select(ref).items():
            grad_sums[k] = grad_sums[k] + p.grad().asnumpy()
    before = _params(ref)
    expected = {k: w - lr * (grad_sums[k] / total + wd * w) for k, w in before.items()}

    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": lr, "wd": wd}, accumulate=3)
    for x, y in batches:
        trainer.step(_backward_on(net, nd.array(x), nd.array(y), ctx_list))
    actual = _params(net)
    for k in expected:
        assert_allclose(actual[k], expected[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_batch_of_one_over_three_contexts_trains_like_one_context():
    ctx_list = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    ref, net = _twins(_mlp, ctx_list)
    opt_name, opt_params = OPTIMIZERS["sgd"]
    ref_trainer = gluon.Trainer(ref.collect_params(), opt_name, dict(opt_params))
    trainer = gluonkit.Trainer(net.collect_params(), opt_name, dict(opt_params))
    rng = np.random.RandomState(2)
    for _ in range(3):
        x, y = rng.randn(1, 4).astype("float32"), rng.randn(1, 3).astype("float32")
        assert trainer.step(_backward_on(net, nd.array(x), nd.array(y), ctx_list))
        _reference_step(ref, ref_trainer, x, y)
    _assert_same(ref, net)


@pytest.mark.parametrize("update_on_kvstore", [True, False])
def test_context_without_data_contributes_zero_not_its_old_gradient(update_on_kvstore):
    """Batches of 6, 1, 4 over 3 contexts: cpu(1) and cpu(2) get nothing in the second step."""
    ctx_list = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    opt_name, opt_params = OPTIMIZERS["sgd"]
    rng = np.random.RandomState(3)
    batches = [(rng.randn(n, 4).astype("float32"), rng.randn(n, 3).astype("float32")) for n in (6, 1, 4)]

    def train(trainer_class, net):
        trainer = trainer_class(net.collect_params(), opt_name, dict(opt_params),
                                update_on_kvstore=update_on_kvstore)
        for x, y in batches:
            trainer.step(_backward_on(net, nd.array(x), nd.array(y), ctx_list), ignore_stale_grad=True)
        return net

    ref, net = _twins(_mlp, ctx_list)
    plain = _mlp()
    _copy_params(ref, plain, ctx_list)
    ref_trainer = gluon.Trainer(ref.collect_params(), opt_name, dict(opt_params))
    for x, y in batches:
        _reference_step(ref, ref_trainer, x, y)
    _assert_same(ref, train(gluonkit.Trainer, net))

    # plain gluon.Trainer mixes the stale gradients in here: the scenario is a real trap
    stale = _params(train(gluon.Trainer, plain))
    assert max(np.abs(stale[k] - v).max() for k, v in _params(ref).items()) > 1e-3


class _TwoHeads(gluon.nn.Block):
    """A trunk and two heads; ``use`` picks the heads a forward runs through."""

    def __init__(self, in_units=4, **kwargs):
        super().__init__(**kwargs)
        kw = {"in_units": 5} if in_units else {}
        self.trunk = gluon.nn.Dense(5, in_units=in_units, activation="tanh")
        self.head_a = gluon.nn.Dense(3, **kw)
        self.head_b = gluon.nn.Dense(3, **kw)

    def forward(self, x, use=("a",)):
        h = self.trunk(x)
        return sum(getattr(self, "head_" + k)(h) for k in use)


def test_unused_parameters_stay_bit_identical_and_keep_no_optimizer_state(ctx_list):
    net = _TwoHeads()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd",
                               {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.1})
    head_b = {k: v.copy() for k, v in _params(net).items() if k.startswith("head_b")}
    trunk_before = _params(net)["trunk.weight"].copy()
    rng = np.random.RandomState(4)
    with pytest.warns(UserWarning, match=r"head_b\.weight"):
        for _ in range(4):
            x, y = nd.array(rng.randn(6, 4)), nd.array(rng.randn(6, 3))
            assert trainer.step(_backward_on(net, x, y, ctx_list))
    after = _params(net)
    for k, v in head_b.items():
        for arr in select(net)[k].list_data():
            assert_array_equal(arr.asnumpy(), v, err_msg=k)
    assert not np.array_equal(after["trunk.weight"], trunk_before)
    assert set(trainer.skipped) == {"head_b.weight", "head_b.bias"}

    # head_b's first real update is a first step: no momentum was built up while unused
    check = _TwoHeads()
    _copy_params(net, check, [mx.cpu(0)])
    x, y = nd.array(rng.randn(6, 4)), nd.array(rng.randn(6, 3))
    fresh = gluon.Trainer(check.head_b.collect_params(), "sgd",
                          {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.1})
    with autograd.record():
        loss = _loss(check(x, ("a", "b")), y)
    loss.backward()
    fresh.step(6)
    xs, ys = gluonkit.split_and_load(x, ctx_list), gluonkit.split_and_load(y, ctx_list)
    with autograd.record():
        losses = [_loss(net(a, ("a", "b")), b) for a, b in zip(xs, ys)]
    autograd.backward(losses)
    trainer.step(6)
    assert trainer.skipped == ()
    for k in head_b:
        assert_allclose(_params(net)[k], _params(check)[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_deferred_parameter_does_not_stop_step_and_joins_once_initialized(ctx_list):
    lr, wd = 0.1, 0.01
    net = _TwoHeads(in_units=0)
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": lr, "wd": wd})
    rng = np.random.RandomState(5)
    x, y = nd.array(rng.randn(4, 4)), nd.array(rng.randn(4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert trainer.step(_backward_on(net, x, y, ctx_list))
    assert "head_b.weight" in trainer.skipped
    with pytest.raises(gluon.parameter.DeferredInitializationError):
        net.head_b.weight.data()

    xs, ys = gluonkit.split_and_load(x, ctx_list), gluonkit.split_and_load(y, ctx_list)
    with autograd.record():
        losses = [_loss(net(a, ("b",)), b) for a, b in zip(xs, ys)]
    autograd.backward(losses)
    w0 = net.head_b.weight.data().asnumpy()
    grad = sum(g.asnumpy() for g in net.head_b.weight.list_grad())
    trainer.step(4)
    assert "head_b.weight" not in trainer.skipped
    expected = w0 - lr * (grad / 4 + wd * w0)
    for arr in net.head_b.weight.list_data():
        assert_allclose(arr.asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_flush_applies_a_partial_window_scaled_by_its_samples(ctx_list):
    ref, net = _twins(_mlp, ctx_list)
    opt_name, opt_params = OPTIMIZERS["sgd"]
    ref_trainer = gluon.Trainer(ref.collect_params(), opt_name, dict(opt_params))
    trainer = gluonkit.Trainer(net.collect_params(), opt_name, dict(opt_params), accumulate=4)
    assert trainer.flush() is False
    rng = np.random.RandomState(6)
    x, y = rng.randn(7, 4).astype("float32"), rng.randn(7, 3).astype("float32")
    assert trainer.step(_backward_on(net, nd.array(x[:5]), nd.array(y[:5]), ctx_list)) is False
    assert trainer.step(_backward_on(net, nd.array(x[5:]), nd.array(y[5:]), ctx_list)) is False
    assert trainer.pending == (2, 7)
    assert trainer.flush() is True
    assert trainer.pending == (0, 0)
    assert trainer.flush() is False
    _reference_step(ref, ref_trainer, x, y)
    _assert_same(ref, net)


def _beside_gluon(make, ctx_list, in_units, optimizer_params, **kwargs):
    """Twin networks on ``ctx_list``, trained 4 steps on the same batches by ``gluon.Trainer``
    and by ``gluonkit.Trainer`` with the same settings: ``(plain, net, plain_trainer, trainer)``."""
    ref, net = _twins(make, ctx_list)
    plain = make()
    _copy_params(ref, plain, ctx_list)
    plain_trainer = gluon.Trainer(plain.collect_params(), "sgd", dict(optimizer_params), **kwargs)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(optimizer_params), **kwargs)
    rng = np.random.RandomState(7)
    for _ in range(4):
        x, y = nd.array(rng.randn(8, in_units)), nd.array(rng.randn(8, 3))
        plain_trainer.step(_backward_on(plain, x, y, ctx_list))
        trainer.step(_backward_on(net, x, y, ctx_list))
    return plain, net, plain_trainer, trainer


@pytest.mark.parametrize("update_on_kvstore", [None, True, False])
@pytest.mark.parametrize("kvstore", ["device", "local"])
def test_accumulate_one_is_a_drop_in_for_gluon_trainer(kvstore, update_on_kvstore):
    plain, net, _, _ = _beside_gluon(_mlp, [mx.cpu(0), mx.cpu(1)], 4, {"learning_rate": 0.1, "momentum": 0.9},
                                     kvstore=kvstore, update_on_kvstore=update_on_kvstore)
    _assert_same(plain, net, rtol=0, atol=0)


@pytest.mark.parametrize("layers", [3, 35])   # 6 and 70 parameters: one call, and 60 + 10
def test_sgd_updates_up_to_60_parameters_per_call_exactly_like_gluon(layers, monkeypatch):
    def chain():
        net = gluon.nn.HybridSequential()
        for _ in range(layers):
            net.add(gluon.nn.Dense(3, in_units=3))
        return net

    plain, net, plain_trainer, trainer = _beside_gluon(chain, [mx.cpu(0)], 3,
                                                       {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3})
    assert (plain_trainer.optimizer.aggregate_num, trainer.optimizer.aggregate_num) == (4, 60)
    _assert_same(plain, net, rtol=0, atol=0)
    monkeypatch.setenv("MXNET_OPTIMIZER_AGGREGATION_SIZE", "2")   # the user's setting wins
    assert gluonkit.Trainer(net.collect_params(), "sgd").optimizer.aggregate_num == 2
    assert gluonkit.Trainer(net.collect_params(), "adam").optimizer.aggregate_num == 0


def test_accumulate_switches_to_add_and_zeroes_after_each_update():
    net = _mlp()
    net.initialize(ctx=mx.cpu(0))
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=2)
    assert {p.grad_req for p in net.collect_params().values()} == {"add"}
    x, y = nd.ones((2, 4)), nd.ones((2, 3))
    trainer.step(_backward_on(net, x, y, [mx.cpu(0)]))
    assert any(np.abs(p.grad().asnumpy()).sum() > 0 for p in net.collect_params().values())
    trainer.step(_backward_on(net, x, y, [mx.cpu(0)]))
    for p in net.collect_params().values():
        assert_array_equal(p.grad().asnumpy(), 0)


@pytest.mark.parametrize("batch_size, error", [(-3, ValueError), (-0.5, ValueError), (np.float32(-2), ValueError),
                                               (float("nan"), ValueError), (float("inf"), ValueError),
                                               ("8", TypeError), (True, TypeError), (None, TypeError)])
def test_step_rejects_a_count_that_is_not_a_finite_number_of_at_least_zero(batch_size, error):
    net = _mlp()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", accumulate=2)
    _backward_on(net, nd.ones((2, 4)), nd.ones((2, 3)), [mx.cpu(0)])
    trainer.step(1.5)
    with pytest.raises(error, match=rf"batch_size \(.*\) must be a finite number >= 0, got {re.escape(repr(batch_size))}"):
        trainer.step(batch_size)
    with pytest.raises(ValueError, match=r"must hold one element .* got shape \(2,\)"):
        trainer.step(nd.array([1, 2]))
    assert trainer.pending == (1, 1.5)   # nothing changed


@pytest.mark.parametrize("accumulate, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                               (True, TypeError)])
def test_accumulate_must_be_a_positive_integer(accumulate, error):
    net = _mlp()
    net.initialize()
    with pytest.raises(error, match=rf"accumulate \(.*\) must be a positive integer, got {accumulate!r}"):
        gluonkit.Trainer(net.collect_params(), "sgd", accumulate=accumulate)


def test_step_without_backward_says_backward_is_missing():
    net = _mlp()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd")
    before = _params(net)
    with pytest.raises(RuntimeError, match=r"no backward\(\) ran"):
        trainer.step(4)
    for k, v in _params(net).items():
        assert_array_equal(v, before[k])


@pytest.mark.parametrize("accumulate", [1, 2, 3])
def test_step_without_backward_is_refused_before_it_enters_the_window(accumulate):
    """The reporter's mistake: step(4) with no backward, then one real batch of 4 (flushed).
    The stray step must raise and count nothing, so the update equals plain Gluon's one step
    on that batch (with the stray step counted it moved the weights half as far)."""
    net, ref = _mlp(), _mlp()
    net.initialize(mx.init.Xavier())
    _copy_params(net, ref, [mx.cpu()])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}, accumulate=accumulate)
    reference = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.5})
    x, y = nd.array(np.random.RandomState(3).randn(4, 4)), nd.array([0, 1, 2, 1])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    with pytest.raises(RuntimeError, match=r"no backward\(\) ran since the last update, and nothing was counted"):
        trainer.step(4)
    assert trainer.pending == (0, 0)
    for model, opt in [(net, trainer), (ref, reference)]:
        with autograd.record():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step(4)
    assert trainer.flush() is (accumulate > 1)
    for k, v in _params(ref).items():
        assert_allclose(_params(net)[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
    with pytest.raises(RuntimeError, match="no fresh gradient"):   # and again after the update
        trainer.step(4)


def test_a_step_of_no_sample_without_backward_fills_the_window_and_changes_nothing():
    """A micro-batch that got no sample (a worker's or rank's empty share) steps with count 0 and
    no backward: it takes its place in the window, and the update equals one batch of the rest."""
    net, ref = _mlp(), _mlp()
    net.initialize(mx.init.Xavier())
    _copy_params(net, ref, [mx.cpu()])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}, accumulate=2)
    reference = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.5})
    x, y = nd.array(np.random.RandomState(3).randn(4, 4)), nd.array([0, 1, 2, 1])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    assert trainer.step(0) is False and trainer.pending == (1, 0)
    for model, opt in [(net, trainer), (ref, reference)]:
        with autograd.record():
            loss = loss_fn(model(x), y)
        loss.backward()
        assert opt.step(4) in (True, None)          # the second micro-batch completes the window
    for k, v in _params(ref).items():
        assert_allclose(_params(net)[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


def test_unused_parameters_are_warned_about_once():
    net = _TwoHeads()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x, y = nd.ones((2, 4)), nd.ones((2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            trainer.step(_backward_on(net, x, y, [mx.cpu(0)]))
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1
    assert "head_b.weight" in messages[0] and "head_b.bias" in messages[0]


@pytest.mark.parametrize("kvstore,update_on_kvstore", [("dist_async", None), ("dist_sync", True)])
def test_distributed_settings_that_cannot_normalize_exactly_are_refused(kvstore, update_on_kvstore):
    net = _mlp()
    net.initialize()
    with pytest.raises(ValueError, match=kvstore if update_on_kvstore is None else "update_on_kvstore=True"):
        gluonkit.Trainer(net.collect_params(), "sgd", kvstore=kvstore, update_on_kvstore=update_on_kvstore)


def _two_parameters(ctx_list):
    a = gluon.Parameter("a", shape=(3,))
    b = gluon.Parameter("b", shape=(3,))
    for p in (a, b):
        p.initialize(mx.init.One(), ctx=ctx_list)
    return a, b


def _backward_two(a, b, scale_b, ctx_list):
    with autograd.record():
        losses = [(a.data(c) * 2).sum() + (b.data(c) * scale_b).sum() for c in ctx_list]
    autograd.backward(losses)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_skip_drops_a_nonfinite_update_and_keeps_optimizer_state(ctx_list, accumulate):
    a, b = _two_parameters(ctx_list)
    trainer = gluonkit.Trainer([a, b], "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                               accumulate=accumulate, on_nonfinite="skip")
    ref_a, ref_b = _two_parameters([mx.cpu(0)])
    ref = gluon.Trainer([ref_a, ref_b], "sgd", {"learning_rate": 0.1, "momentum": 0.9})

    def window(scale_b):
        for _ in range(accumulate):
            _backward_two(a, b, scale_b, ctx_list)
            updated = trainer.step(len(ctx_list))
        return updated

    assert window(1.0) is True
    _backward_two(ref_a, ref_b, 1.0, [mx.cpu(0)])
    ref.step(1)
    before = [p.data().asnumpy() for p in (a, b)]
    with pytest.warns(UserWarning, match=r"gradient of b holds NaN or Inf \(1 skipped so far\)"):
        assert window(float("inf")) is False
    assert trainer.nonfinite_skips == 1
    for p, v in zip((a, b), before):
        assert_array_equal(p.data().asnumpy(), v)
    assert window(1.0) is True  # the momentum carried on as if the bad window never happened
    _backward_two(ref_a, ref_b, 1.0, [mx.cpu(0)])
    ref.step(1)
    for p, r in zip((a, b), (ref_a, ref_b)):
        for arr in p.list_data():
            assert_allclose(arr.asnumpy(), r.data().asnumpy(), rtol=1e-6)


def test_raise_names_the_first_parameter_with_a_nonfinite_gradient():
    a, b = _two_parameters([mx.cpu(0)])
    trainer = gluonkit.Trainer([a, b], "sgd", {"learning_rate": 0.1}, on_nonfinite="raise")
    _backward_two(a, b, float("nan"), [mx.cpu(0)])
    with pytest.raises(FloatingPointError, match="gradient of b holds NaN or Inf"):
        trainer.step(1)
    assert_array_equal(b.data().asnumpy(), 1.0)
    _backward_two(a, b, 1.0, [mx.cpu(0)])
    assert trainer.step(1) is True  # the bad window was dropped whole
    assert_allclose(b.data().asnumpy(), 0.9, rtol=1e-6)


@pytest.mark.parametrize("last_size", [4, 1 << 16])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_check_finds_one_bad_value_among_many_arrays_of_any_float_dtype(dtype, last_size):
    """70 parameters (more than one group of small arrays), the last small or large (a dot);
    large finite gradients pass."""
    params = [gluon.Parameter(f"p{i}", shape=(4 if i < 69 else last_size,), dtype=dtype) for i in range(70)]
    for p in params:
        p.initialize(mx.init.Zero())
    trainer = gluonkit.Trainer(params, "sgd", {"learning_rate": 0.5, "multi_precision": dtype == "float16"},
                               on_nonfinite="skip")

    def backward(bad_value):
        with autograd.record():
            loss = sum((p.data() * 300).sum() for p in params[:-1]) + (params[-1].data() * bad_value).sum()
        loss.backward()   # every gradient is 300: squares overflow float16, not the check

    backward(float("inf"))
    with pytest.warns(UserWarning, match="gradient of p69 holds NaN or Inf"):
        assert trainer.step(1) is False
    backward(300.0)
    assert trainer.step(1) is True
    assert trainer.nonfinite_skips == 1
    for p in params:
        assert_array_equal(p.data().asnumpy(), np.full(p.shape, -150.0, dtype=dtype))


def test_ignore_applies_nonfinite_updates_like_gluon():
    a, b = _two_parameters([mx.cpu(0)])
    trainer = gluonkit.Trainer([a, b], "sgd", {"learning_rate": 0.1})
    _backward_two(a, b, float("nan"), [mx.cpu(0)])
    assert trainer.step(1) is True
    assert np.isnan(b.data().asnumpy()).all() and np.isfinite(a.data().asnumpy()).all()


@pytest.mark.parametrize("lr, error", [(float("nan"), ValueError), (float("inf"), ValueError),
                                       (-0.1, ValueError), ("0.1", TypeError)])
def test_learning_rate_must_be_finite_and_non_negative(lr, error):
    a, b = _two_parameters([mx.cpu(0)])
    with pytest.raises(error, match=f"learning_rate must be a finite number >= 0, got {lr!r}"):
        gluonkit.Trainer([a, b], "sgd", {"learning_rate": lr})
    trainer = gluonkit.Trainer([a, b], "sgd", {"learning_rate": 0.1})
    with pytest.raises(error, match="learning_rate must be a finite number"):
        trainer.set_learning_rate(lr)
    assert trainer.learning_rate == 0.1


def test_unknown_nonfinite_policy_is_refused():
    a, b = _two_parameters([mx.cpu(0)])
    with pytest.raises(ValueError, match="on_nonfinite must be one of .*'warn'"):
        gluonkit.Trainer([a, b], "sgd", on_nonfinite="warn")
    trainer = gluonkit.Trainer([a, b], "sgd", {"learning_rate": 0.1})
    with pytest.raises(ValueError, match="on_nonfinite must be one of .*'warn'"):
        trainer.on_nonfinite = "warn"
    assert trainer.on_nonfinite == "ignore"


def test_the_policy_can_be_changed_between_updates():
    a, b = _two_parameters([mx.cpu(0)])
    trainer = gluonkit.Trainer([a, b], "sgd", {"learning_rate": 0.1})
    trainer.on_nonfinite = "skip"
    _backward_two(a, b, float("nan"), [mx.cpu(0)])
    with pytest.warns(UserWarning, match="Skipped an update"):
        assert trainer.step(1) is False
    assert_array_equal(b.data().asnumpy(), 1.0)
    trainer.on_nonfinite = "raise"
    _backward_two(a, b, float("inf"), [mx.cpu(0)])
    with pytest.raises(FloatingPointError, match="gradient of b"):
        trainer.step(1)
    assert trainer.nonfinite_skips == 1 and np.isfinite(b.data().asnumpy()).all()


def test_a_restored_window_completes_like_the_original():
    """Setting ``pending`` (as a checkpoint does) continues the window with its sample count."""
    ref, net = _twins(_mlp, [mx.cpu(0)])
    ref_trainer = gluonkit.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=3)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=3)
    rng = np.random.RandomState(8)
    x, y = nd.array(rng.randn(9, 4)), nd.array(rng.randn(9, 3))
    for begin, end in [(0, 2), (2, 7)]:
        ref_trainer.step(_backward_on(ref, x[begin:end], y[begin:end], [mx.cpu(0)]))
        _backward_on(net, x[begin:end], y[begin:end], [mx.cpu(0)])
    trainer.pending = (2, 7)
    assert ref_trainer.step(_backward_on(ref, x[7:], y[7:], [mx.cpu(0)]))
    assert trainer.step(_backward_on(net, x[7:], y[7:], [mx.cpu(0)]))
    _assert_same(ref, net, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"0 <= steps < accumulate=3 .* got \(3, 9\)"):
        trainer.pending = (3, 9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_ctx=st.integers(1, 3), accumulate=st.integers(1, 3), data=st.data())
def test_windows_with_unused_branches_equal_one_batch_of_plain_gluon(num_ctx, accumulate, data):
    """Random micro-batches, each using head_b or not; plain Gluon on one context is the reference."""
    windows = data.draw(st.lists(st.lists(st.tuples(st.integers(1, 9), st.booleans()),
                                          min_size=accumulate, max_size=accumulate),
                                 min_size=1, max_size=3), label="windows of (size, uses head_b)")
    ctx_list = [mx.cpu(i) for i in range(num_ctx)]
    ref, net = _twins(_TwoHeads, ctx_list)
    opt = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.05}
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", dict(opt))
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(opt), accumulate=accumulate)
    rng = np.random.RandomState(len(windows))
    for window in windows:
        batches = [(nd.array(rng.randn(n, 4)), nd.array(rng.randn(n, 3)), ("a", "b") if b else ("a",))
                   for n, b in window]
        with autograd.record():
            ref_loss = [_loss(ref(x, heads), y) for x, y, heads in batches]
        autograd.backward(ref_loss)
        ref_trainer.step(sum(x.shape[0] for x, _, _ in batches), ignore_stale_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x, y, heads in batches:
                xs, ys = gluonkit.split_and_load(x, ctx_list), gluonkit.split_and_load(y, ctx_list)
                with autograd.record():
                    losses = [_loss(net(a, heads), b) for a, b in zip(xs, ys)]
                autograd.backward(losses)
                trainer.step(x.shape[0])
        _assert_same(ref, net, atol=1e-5)
