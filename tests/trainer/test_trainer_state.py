"""Trainer.state_dict / load_state_dict: structural names, the pending window replaced, checks first."""
import copy
import warnings

import mxnet as mx
import pytest
from mxnet import gluon

import gluonkit
from conftest import params_of as values
from small_classifier import assert_same, batches, train
from gluonkit.trainer import Trainer

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def build(ctx, seed, prefixes=("a_", "b_")):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="relu", prefix=prefixes[0]),
            gluon.nn.Dense(3, in_units=8, prefix=prefixes[1]))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def copy_values(source, target):
    for name, param in gluonkit.params.select(target).items():
        param.set_data(gluonkit.params.select(source)[name].data())


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_state_moves_to_another_build_by_structural_name(ctx_list, optimizer):
    """gluon.Trainer orders parameters by prefixed name, which differs between the builds."""
    hyper = {"learning_rate": 0.05, "wd": 1e-3, **({"momentum": 0.9} if optimizer == "sgd" else {})}
    data = batches([6, 5, 7, 4, 6])
    net = build(ctx_list, 1)
    trainer = Trainer(net, optimizer, hyper, accumulate=2)
    train(net, trainer, data[:3], ctx_list)             # one update and half a window
    state = trainer.state_dict()
    assert sorted(state["states"]) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    at_save = values(net)
    train(net, trainer, data[3:], ctx_list)

    other = build(ctx_list, 2, prefixes=("d_", "c_"))
    other_trainer = Trainer(other.collect_params(), optimizer, hyper, accumulate=2)
    other_trainer.name_params(other)
    for name, param in gluonkit.params.select(other).items():
        param.set_data(mx.nd.array(at_save[name]))
    other_trainer.load_state_dict(state)
    assert other_trainer.pending == (1, 7)
    train(other, other_trainer, data[3:], ctx_list)
    assert_same(values(other), values(net))


def test_loading_replaces_a_stale_half_window(ctx_list):
    data = batches([5, 3, 4, 6])
    net = build(ctx_list, 1)
    trainer = Trainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, accumulate=2)
    state = trainer.state_dict()                       # empty window
    train(net, trainer, data[3:], ctx_list)            # half a window that must not survive
    assert trainer.pending == (1, 6)
    start = build(ctx_list, 1)
    copy_values(start, net)
    trainer.load_state_dict(state)
    assert trainer.pending == (0, 0)
    train(net, trainer, data[:3], ctx_list)
    trainer.flush()

    reference = build(ctx_list, 1)
    ref_trainer = Trainer(reference, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, accumulate=2)
    train(reference, ref_trainer, data[:3], ctx_list)
    ref_trainer.flush()
    assert_same(values(net), values(reference))


def test_saved_window_replaces_another_half_window():
    ctx = [mx.cpu()]
    data = batches([5, 3, 4, 6])
    net = build(ctx, 1)
    trainer = Trainer(net, "sgd", {"learning_rate": 0.1}, accumulate=3)
    train(net, trainer, data[:2], ctx)
    state = trainer.state_dict()
    train(net, trainer, data[2:3], ctx)
    straight = values(net)

    other = build(ctx, 1)
    other_trainer = Trainer(other, "sgd", {"learning_rate": 0.1}, accumulate=3)
    train(other, other_trainer, data[3:], ctx)          # a different half window
    other_trainer.load_state_dict(state)
    train(other, other_trainer, data[2:3], ctx)
    assert_same(values(other), straight)


@pytest.mark.parametrize("change, message", [
    ("optimizer", "holds SGD optimizer states but the trainer uses Adam"),
    ("params", "trainer of 4 parameters .* but this trainer has 2"),
    ("accumulate", "resume with accumulate=3"),
    ("garbage", "not a gluonkit.Trainer state_dict"),
])
def test_a_state_that_does_not_fit_changes_nothing(change, message):
    ctx = [mx.cpu()]
    data = batches([5, 3, 4, 6])
    net = build(ctx, 1)
    trainer = Trainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, accumulate=3)
    train(net, trainer, data[:1], ctx)
    state = trainer.state_dict()

    def target(seed):
        other = build(ctx, seed)
        kind = "adam" if change == "optimizer" else "sgd"
        params = other[1] if change == "params" else other
        accumulate = 2 if change == "accumulate" else 3
        t = Trainer(params, kind, {"learning_rate": 0.1}, accumulate=accumulate)
        train(other, t, data[1:2], ctx)
        return other, t

    other, other_trainer = target(2)
    with pytest.raises(ValueError, match=message):
        other_trainer.load_state_dict("x" if change == "garbage" else state)
    twin, twin_trainer = target(2)
    assert other_trainer.pending == twin_trainer.pending
    train(other, other_trainer, data[2:], ctx)
    train(twin, twin_trainer, data[2:], ctx)
    assert_same(values(other), values(twin))


def test_params_and_names():
    net = build([mx.cpu()], 1)
    assert list(Trainer(net, "sgd").params) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    assert sorted(Trainer(net.collect_params(), "sgd").params) == ["0.bias", "0.weight", "1.bias",
                                                                   "1.weight"]
    by_parameter_name = Trainer(list(net.collect_params().values()), "sgd")
    assert sorted(by_parameter_name.params) == ["a_bias", "a_weight", "b_bias", "b_weight"]
    by_parameter_name.name_params(net)
    assert sorted(by_parameter_name.params) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    assert all(p is net[int(k[0])].params.get(k[2:]) for k, p in by_parameter_name.params.items())
    with pytest.raises(TypeError, match="names must be a Block or a dict"):
        by_parameter_name.name_params(["0.weight"])


class TwoHeads(gluon.nn.HybridBlock):
    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.trunk = gluon.nn.Dense(6, in_units=4)
            self.aux = gluon.nn.Dense(2, in_units=6)
            self.main = gluon.nn.Dense(3, in_units=6)

    def hybrid_forward(self, F, x):
        return self.main(self.trunk(x))


def test_unused_parameter_warning_uses_structural_names():
    net = TwoHeads()
    net.initialize()
    x, y = batches([4])[0]
    history = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = gluonkit.fit(net, LOSS, Trainer(net.collect_params(), "sgd"),
                               [(mx.nd.array(x), mx.nd.array(y))], epochs=1, progress=False)
    assert history["loss"]
    texts = [str(w.message) for w in caught if "got no gradient" in str(w.message)]
    assert len(texts) == 1 and "aux.bias" in texts[0] and "aux.weight" in texts[0], texts
    assert net.aux.bias.name not in texts[0]


def _with(state, change):
    """A deep copy of ``state`` with one part corrupted."""
    state = copy.deepcopy(state)
    if change == "pending past the window":
        state["pending"] = (3, 4)
    elif change == "negative pending count":
        state["pending"] = (1, -4)
    elif change == "pending not a pair":
        state["pending"] = "x"
    elif change == "optimizer state of an unknown parameter":
        state["states"]["9.weight"] = state["states"]["0.weight"]
    elif change == "update count of an unknown parameter":
        state["update_counts"]["0"]["9.weight"] = 1
    elif change == "window of an unknown parameter":
        state["window"]["9.weight"] = state["window"]["0.weight"]
    elif change == "window without gradients":
        del state["window"]["0.weight"]["grads"]
    elif change == "states not a dict":
        state["states"] = None
    elif change == "update counts of a device that is not a number":
        state["update_counts"]["gpu"] = state["update_counts"].pop("0")
    elif change == "a negative update count":
        state["update_counts"]["0"]["0.weight"] = -1
    elif change == "nonfinite_skips not a count":
        state["nonfinite_skips"] = "3"
    elif change == "loss scaler not a dict of numbers":
        state["loss_scaler"] = {"loss_scale": object()}
    elif change == "optimizer field not a number":
        state["optimizer"]["fields"]["momentum"] = [0.9]
    elif change == "optimizer state of another shape":
        state["states"]["0.weight"] = mx.nd.zeros((7, 7))
    elif change == "optimizer state not an array":
        state["states"]["0.weight"] = "x"
    return state


@pytest.mark.parametrize("change, message", [
    ("pending past the window", r"pending must be \(steps, count\) with 0 <= steps < accumulate=3 .*got \(3, 4\)"),
    ("negative pending count", r"pending must be \(steps, count\) .*got \(1, -4\)"),
    ("pending not a pair", r"pending must be \(steps, count\) .*got 'x'"),
    ("optimizer state of an unknown parameter", r"states names parameters this trainer does not have: '9.weight'"),
    ("update count of an unknown parameter", r"update_counts names parameters this trainer does not have: '9.weight'"),
    ("window of an unknown parameter", r"window names parameters this trainer does not have: '9.weight'"),
    ("window without gradients", r"window\['0.weight'\] must be a dict of 'grads' and 'fresh'"),
    ("states not a dict", r"states must be a dict by parameter name, got None"),
    ("update counts of a device that is not a number", r"update_counts must map device numbers .*got 'gpu'"),
    ("a negative update count", r"update_counts must map device numbers .*counts >= 0 .*got '0'"),
    ("nonfinite_skips not a count", r"nonfinite_skips must be an int >= 0 .*got '3'"),
    ("loss scaler not a dict of numbers", r"loss_scaler must be a dict of numbers"),
    ("optimizer field not a number", r"SGD fields \['momentum'\] are not number or string fields"),
    ("optimizer state of another shape", r"optimizer state of 0.weight is laid out as \(\(7, 7\), 'float32'\) \(array "
                                         r"shapes, dtypes\) where SGD keeps \(\(8, 4\), 'float32'\) for a parameter of "
                                         r"shape \(8, 4\)"),
    ("optimizer state not an array", r"optimizer state of 0.weight is laid out as str .*where SGD keeps \(\(8, 4\), "),
])
def test_a_corrupted_state_is_refused_clearly_and_changes_nothing(change, message):
    ctx = [mx.cpu()]
    data = batches([5, 3, 4, 6])
    hyper = {"learning_rate": 0.1, "momentum": 0.9}

    def target():
        net = build(ctx, 2)
        trainer = Trainer(net, "sgd", dict(hyper), accumulate=3)
        train(net, trainer, data[1:2], ctx)
        return net, trainer

    net = build(ctx, 1)
    trainer = Trainer(net, "sgd", dict(hyper), accumulate=3)
    train(net, trainer, data, ctx)                      # one update and a micro-batch pending
    state = _with(trainer.state_dict(), change)
    other, other_trainer = target()
    with pytest.raises(ValueError, match=message):
        other_trainer.check_state_dict(state)
    with pytest.raises(ValueError, match=message):
        other_trainer.load_state_dict(state)
    twin, twin_trainer = target()
    assert other_trainer.pending == twin_trainer.pending
    train(other, other_trainer, data[2:], ctx)
    train(twin, twin_trainer, data[2:], ctx)
    assert_same(values(other), values(twin))


def test_a_state_of_a_network_of_other_shapes_is_refused_at_a_window_boundary():
    """No gradient pending to compare: the optimizer states' shapes tell (MXNet would fail at the
    next update, after the states were replaced)."""
    ctx = [mx.cpu()]
    data = batches([5, 3])

    def wide(hidden):
        mx.random.seed(0)
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(hidden, in_units=4), gluon.nn.Dense(3, in_units=hidden))
        net.initialize(ctx=ctx)
        return net, Trainer(net, "adam", {"learning_rate": 0.01}, accumulate=2)

    net, trainer = wide(8)
    train(net, trainer, data, ctx)
    assert trainer.pending == (0, 0)
    _, other_trainer = wide(6)
    with pytest.raises(ValueError, match=r"a trainer whose 0\.(weight|bias) has shape \(8[,)].* but this "
                                         r"trainer's has shape \(6[,)].*load a state of the same network"):
        other_trainer.load_state_dict(trainer.state_dict())


def test_optimizer_states_of_their_own_shapes_load():
    """GroupAdaGrad keeps one value per row, (rows, 1): a state is checked against what its own
    optimizer creates, not against the parameter's shape."""
    ctx = [mx.cpu()]
    data = batches([5, 3, 4, 6, 2])

    def rows_only(seed):
        mx.random.seed(seed)
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(8, in_units=4, use_bias=False), gluon.nn.Dense(3, in_units=8, use_bias=False))
        net.initialize(mx.init.Xavier(), ctx=ctx)
        return net, Trainer(net, "groupadagrad", {"learning_rate": 0.1}, accumulate=2)

    net, trainer = rows_only(1)
    train(net, trainer, data[:3], ctx)
    state = trainer.state_dict()
    assert [s.shape for s in state["states"].values()] == [(8, 1), (3, 1)]
    other, other_trainer = rows_only(2)
    copy_values(net, other)
    other_trainer.load_state_dict(state)
    train(net, trainer, data[3:], ctx)
    train(other, other_trainer, data[3:], ctx)
    assert_same(values(other), values(net))
