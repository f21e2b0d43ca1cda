"""gluonkit.Trainer at the edges: shared parameters, grad_req changes, dropped windows, bad settings."""
import re
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from gluonkit.params import select


def _values(params):
    return [p.data().asnumpy() for p in params]


def test_a_parameter_listed_twice_is_updated_once():
    """A Dense shared by two blocks, collected from both: plain Gluon over the unique list is the reference."""
    def build():
        shared = gluon.nn.Dense(3, in_units=4)
        other = gluon.nn.Dense(3, in_units=4, params=shared.collect_params())
        shared.initialize(mx.init.One())
        return shared, other

    shared, other = build()
    params = list(shared.collect_params().values()) + list(other.collect_params().values())
    assert len(params) == 4 and len({id(p) for p in params}) == 2
    trainer = gluonkit.Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    ref_shared, ref_other = build()
    ref = gluon.Trainer(ref_shared.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    x = nd.array(np.random.RandomState(0).randn(5, 4))
    for _ in range(2):
        for a, b, t in [(shared, other, trainer), (ref_shared, ref_other, ref)]:
            with autograd.record():
                loss = (a(x) * b(x)).sum()
            loss.backward()
            t.step(5)
    for got, expected in zip(_values(shared.collect_params().values()), _values(ref_shared.collect_params().values())):
        assert_allclose(got, expected, rtol=1e-6)


def test_grad_req_write_within_accumulation_is_refused_and_the_window_dropped():
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(mx.init.One())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=2)
    x = nd.ones((4, 3))

    def backward():
        with autograd.record():
            loss = net(x).sum()
        loss.backward()

    backward()
    assert trainer.step(4) is False
    net.weight.grad_req = "write"
    backward()
    with pytest.raises(RuntimeError, match=r"Parameter\(s\) weight have grad_req='write'.*accumulate=2.*'add'"):
        trainer.step(4)
    assert_array_equal(net.weight.data().asnumpy(), 1.0)
    assert trainer.pending == (0, 0)
    net.weight.grad_req = "add"
    for _ in range(2):   # a fresh window is exact again
        backward()
        trainer.step(4)
    assert_allclose(net.weight.data().asnumpy(), 1.0 - 0.1 * 4 * 2 / 8, rtol=1e-6)


def _bn_net(ctx_list):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=3), gluon.nn.BatchNorm(in_channels=4), gluon.nn.Dense(2, in_units=4))
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    return net


def _running(net):
    return {k: [a.asnumpy() for a in p.list_data()]
            for k, p in select(net).items() if p.grad_req == "null"}


@pytest.mark.parametrize("policy", ["skip", "raise"])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_dropped_window_leaves_the_running_statistics_as_they_were(ctx_list, accumulate, policy):
    net = _bn_net(ctx_list)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=accumulate,
                               on_nonfinite=policy)
    rng = np.random.RandomState(1)

    def micro_batch(bad=False):
        x = rng.randn(4, 3).astype("float32")
        if bad:
            x[0, 0] = np.nan
        xs = gluonkit.split_and_load(nd.array(x), ctx_list)
        with autograd.record():
            losses = [net(a).sum() for a in xs]
        autograd.backward(losses)
        return trainer.step(4)

    for _ in range(accumulate):
        micro_batch()
    start = _running(net)
    assert np.isfinite(np.concatenate([a.ravel() for arrays in start.values() for a in arrays])).all()
    for i in range(accumulate - 1):
        micro_batch()    # good micro-batches first: the window's start is what counts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if policy == "raise":
            with pytest.raises(FloatingPointError):
                micro_batch(bad=True)
        else:
            assert micro_batch(bad=True) is False
    for k, arrays in _running(net).items():
        for got, expected in zip(arrays, start[k]):
            assert_array_equal(got, expected, err_msg=k)
    for _ in range(accumulate):
        micro_batch()
    with autograd.predict_mode():
        assert np.isfinite(net(nd.ones((2, 3), ctx=ctx_list[0])).asnumpy()).all()


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_dropped_first_window_leaves_deferred_running_statistics_as_initialized(ctx_list, accumulate):
    """The statistics were not initialized when the window began (nothing to copy): afterwards
    the network equals a twin seeded alike and initialized by a forward that updates nothing."""
    def deferred():
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(4), gluon.nn.BatchNorm(), gluon.nn.Dense(2))
        net.initialize(mx.init.Xavier(), ctx=ctx_list)
        return net

    def micro_batch(x):
        xs = gluonkit.split_and_load(nd.array(x), ctx_list)
        with autograd.record():
            losses = [net(a).sum() for a in xs]
        autograd.backward(losses)
        return trainer.step(x.shape[0])

    rng = np.random.RandomState(3)
    bad = rng.randn(accumulate, 4, 3).astype("float32")
    bad[-1, 0, 0] = np.nan
    net = deferred()
    trainer = gluonkit.Trainer(net, "sgd", {"learning_rate": 0.1}, accumulate=accumulate, on_nonfinite="skip")
    mx.random.seed(5)
    with pytest.warns(UserWarning, match="Skipped an update"):
        assert [micro_batch(x) for x in bad][-1] is False
    twin = deferred()
    mx.random.seed(5)
    with autograd.predict_mode():
        twin(nd.ones((1, 3), ctx=ctx_list[0]))
    for k, param in select(twin).items():
        for got, expected in zip(select(net)[k].list_data(), param.list_data()):
            assert_array_equal(got.asnumpy(), expected.asnumpy(), err_msg=k)
    for x in rng.randn(accumulate, 4, 3):
        micro_batch(x)
    with autograd.predict_mode():
        assert np.isfinite(net(nd.ones((2, 3), ctx=ctx_list[0])).asnumpy()).all()


def test_without_a_dropping_policy_nothing_is_copied_and_nan_statistics_stay():
    """'ignore' applies NaN as gluon.Trainer does (the documented contrast)."""
    net = _bn_net([mx.cpu(0)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x = nd.array([[np.nan, 0, 0], [1, 2, 3]])
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(2)
    assert np.isnan(net[1].running_mean.data().asnumpy()).any()


def _dense(ctx=None):
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(ctx=ctx)
    return net


def _grad_reqs(net):
    return [p.grad_req for p in net.collect_params().values()]


@pytest.mark.parametrize("make,error,message", [
    (lambda a, b: gluonkit.Trainer(list(a.collect_params().values()) + list(b.collect_params().values()), "sgd",
                                   accumulate=2),
     ValueError, r"different contexts: .* on \[cpu\(0\)\], .* on \[cpu\(0\), cpu\(1\)\].*same ctx="),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), mx.optimizer.SGD(learning_rate=0.1), {"momentum": 0.9},
                                   accumulate=2),
     ValueError, r"optimizer_params=\{'momentum': 0.9\} was given with an Optimizer instance \(SGD\)"),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), mx.optimizer.SGD(learning_rate=float("nan")), accumulate=2),
     ValueError, "learning_rate must be a finite number >= 0, got nan"),
    (lambda a, b: gluonkit.Trainer(a.collect_params("nothing_matches"), "sgd", accumulate=2),
     ValueError, "The Trainer got no parameters"),
    (lambda a, b: gluonkit.Trainer([], "sgd"), ValueError, "The Trainer got no parameters"),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), "sgd", kvstore="devcie", accumulate=2),
     ValueError, r"kvstore='devcie' is not a kvstore MXNet knows .*'local', 'device', .*'dist_sync'"),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), "sgd", kvstore=3, accumulate=2),
     TypeError, r"kvstore must be a kvstore name, a KVStore or None, got 3"),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), "sgd", update_on_kvstore="yes", accumulate=2),
     TypeError, r"update_on_kvstore must be True, False or None, got 'yes'"),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), 3, accumulate=2),
     TypeError, r"optimizer must be a name such as 'sgd' or an mx.optimizer.Optimizer, got 3"),
    (lambda a, b: gluonkit.Trainer(a.collect_params(), "sgdd", accumulate=2),
     ValueError, r"optimizer='sgdd' is not an optimizer MXNet knows; use one of .*'adam'.*'sgd'"),
    # plain Gluon fails at the first step with AttributeError: 'NoneType' object has no attribute 'is_capable'
    (lambda a, b: gluonkit.Trainer(a.collect_params(), "sgd", update_on_kvstore=True, accumulate=2),
     ValueError, r"update_on_kvstore=True needs a kvstore, but kvstore='device' over 1 context creates none.*"
                 r"leave update_on_kvstore unset"),
    (lambda a, b: gluonkit.Trainer(b.collect_params(), "sgd", kvstore=None, update_on_kvstore=True, accumulate=2),
     ValueError, r"update_on_kvstore=True needs a kvstore, but kvstore=None over 2 contexts creates none"),
])
def test_bad_settings_are_refused_clearly_and_change_nothing(make, error, message):
    a, b = _dense(mx.cpu(0)), _dense([mx.cpu(0), mx.cpu(1)])
    with pytest.raises(error, match=message):
        make(a, b)
    assert _grad_reqs(a) == _grad_reqs(b) == ["write", "write"]


def test_a_distributed_kvstore_outside_the_launcher_says_to_use_it(monkeypatch):
    for name in ("DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"):
        monkeypatch.delenv(name, raising=False)
    net = _dense()
    with pytest.raises(RuntimeError, match=r"kvstore='dist_sync' needs a distributed job.*python -m gluonkit.launch"):
        gluonkit.Trainer(net.collect_params(), "sgd", kvstore="dist_sync")


@pytest.mark.parametrize("kvstore", ["local", "device", "Device", None])
def test_known_kvstore_names_are_accepted(kvstore):
    net = _dense([mx.cpu(0), mx.cpu(1)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kvstore)
    with autograd.record():
        loss = sum(net(nd.ones((1, 3), ctx=c)).sum() for c in (mx.cpu(0), mx.cpu(1)))
    loss.backward()
    assert trainer.step(2)


def test_an_optimizer_instance_alone_is_accepted():
    net = _dense()
    trainer = gluonkit.Trainer(net.collect_params(), mx.optimizer.SGD(learning_rate=0.5))
    assert trainer.learning_rate == 0.5


def test_after_a_checkpoint_is_loaded_a_dropped_window_returns_to_the_loaded_statistics(tmp_path):
    net = _bn_net([mx.cpu(0)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, on_nonfinite="skip")
    rng = np.random.RandomState(2)

    def step(x):
        with autograd.record():
            loss = net(nd.array(x)).sum()
        loss.backward()
        return trainer.step(x.shape[0])

    step(rng.randn(4, 3))
    checkpoint = gluonkit.Checkpoint(str(tmp_path))
    checkpoint.save(net, trainer, epoch=1)
    loaded = _running(net)
    for _ in range(3):
        step(rng.randn(4, 3) + 5)   # the statistics move on
    checkpoint.load(net, trainer)
    bad = rng.randn(4, 3)
    bad[0, 0] = np.inf
    with pytest.warns(UserWarning, match="Skipped an update"):
        assert step(bad) is False
    for k, arrays in _running(net).items():
        assert_array_equal(arrays[0], loaded[k][0], err_msg=k)


@pytest.mark.parametrize("window", [None, (0, 1, 2), (1,), "12", (1, "3"), (2, 5), (1, -1), (1, float("nan"))])
def test_a_malformed_pending_window_is_refused_and_changes_nothing(window):
    net = _dense()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=2)
    with autograd.record():
        loss = net(nd.ones((3, 3))).sum()
    loss.backward()
    trainer.step(3)
    with pytest.raises(ValueError, match=r"pending must be \(steps, count\) with 0 <= steps < accumulate=2 .*"
                                         rf"got {re.escape(repr(window))}"):
        trainer.pending = window
    assert trainer.pending == (1, 3)


def test_set_learning_rate_with_an_lr_scheduler_is_a_runtime_error_not_a_raised_warning():
    """gluon.Trainer raises UserWarning (a warning class raised as an exception) here."""
    net = _dense()
    scheduler = mx.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"lr_scheduler": scheduler})
    with pytest.raises(RuntimeError, match=r"set_learning_rate\(0.5\).*lr_scheduler \(FactorScheduler\) sets the "
                                           r"learning rate at every update.*gluonkit.callbacks.LRSchedule"):
        trainer.set_learning_rate(0.5)
    assert trainer.learning_rate == 0.1
    plain = gluonkit.Trainer(_dense().collect_params(), "sgd", {"learning_rate": 0.1})
    plain.set_learning_rate(0.5)
    assert plain.learning_rate == 0.5


def test_snapshot_statistics_takes_the_running_statistics_a_dropped_window_returns_to():
    """Statistics set by hand (not through the Trainer) and taken with snapshot_statistics()
    are what a dropped window restores; without the call it restores the earlier ones."""
    for take in (True, False):
        net = _bn_net([mx.cpu(0)])
        trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, on_nonfinite="skip")
        net[1].running_mean.set_data(nd.full((4,), 3.0))
        if take:
            trainer.snapshot_statistics()
        x = np.ones((4, 3), dtype="float32")
        x[0, 0] = np.nan
        with autograd.record():
            loss = net(nd.array(x)).sum()
        loss.backward()
        with pytest.warns(UserWarning, match="Skipped an update"):
            assert trainer.step(4) is False
        assert_array_equal(net[1].running_mean.data().asnumpy(), np.full(4, 3.0 if take else 0.0))


class _MultiTask(gluonkit.nn.Branches):
    """The multi-task network of docs/branches.md."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential()
            self.trunk.add(gluon.nn.Dense(8, activation="relu"))
            self.add("digit", gluon.nn.Dense(10))
            self.add("parity", gluon.nn.Dense(2))


@pytest.mark.parametrize("given", ["collect_params", "selection", "net"])
def test_warnings_and_skipped_use_structural_names_whatever_the_trainer_was_given(given):
    # built from net.collect_params(), as docs/branches.md shows, the trainer named the
    # skipped head by Gluon's internal names ('multitask0_dense2_weight')
    net = _MultiTask()
    net.initialize()
    params = {"collect_params": net.collect_params, "net": lambda: net,
              "selection": lambda: net.collect_params(".*weight")}[given]()
    trainer = gluonkit.Trainer(params, "sgd", {"learning_rate": 0.1})
    x, y = nd.random.uniform(shape=(4, 5)), nd.array([3, 1, 4, 1])
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net.route("digit")(x), y)
    loss.backward()
    expected = {"parity.weight"} if given == "selection" else {"parity.weight", "parity.bias"}
    with pytest.warns(UserWarning, match=r"\): parity\.\w+(, parity\.\w+)?\. They are left"):
        trainer.step(4)
    assert set(trainer.skipped) == expected
    assert set(trainer.params) == set(select(net, "weight$" if given == "selection" else None))


def test_a_sub_blocks_collected_parameters_go_by_the_sub_blocks_names():
    net = _MultiTask()
    net.initialize()
    trainer = gluonkit.Trainer(net.trunk.collect_params(), "sgd", {"learning_rate": 0.1})
    assert list(trainer.params) == ["0.bias", "0.weight"]


def _conv_bn_updates(freeze, micro_batches):
    """The weights after one SGD update over 8 samples given in ``micro_batches`` pieces."""
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=3), gluon.nn.BatchNorm(in_channels=4),
            gluon.nn.Activation("relu"), gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(3, in_units=4))
    net.initialize(mx.init.Xavier())
    if freeze:
        gluonkit.nn.freeze_batchnorm(net)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0},
                               accumulate=micro_batches)
    rng = np.random.RandomState(0)
    x, y = nd.array(rng.randn(8, 3, 6, 6) * 3 + 1), nd.array(rng.randint(0, 3, 8))
    for part in np.array_split(np.arange(8), micro_batches):
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x[part]), y[part])
        loss.backward()
        trainer.step(len(part))
    return {name: p.data().asnumpy() for name, p in select(net).items()}


def test_accumulation_with_batchnorm_is_one_large_batch_only_when_frozen():
    """What docs/trainer.md says where it promises one large batch: BatchNorm normalizes each
    micro-batch by its own statistics, so only frozen BatchNorm makes the two equal."""
    whole, parts = _conv_bn_updates(False, 1), _conv_bn_updates(False, 2)
    assert max(np.abs(whole[k] - parts[k]).max() for k in whole) > 1e-3
    whole, parts = _conv_bn_updates(True, 1), _conv_bn_updates(True, 2)
    for name, value in whole.items():
        assert_allclose(parts[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
