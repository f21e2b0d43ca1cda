"""Branches: outputs against NumPy, routes after hybridize, deferred init, training, export."""
import mxnet as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mxnet import autograd
from mxnet.gluon import nn
from conftest import params_of
from triplet_net import Embedding, Triplet, TripletTrunk
from numpy.testing import assert_allclose

import gluonkit
from gluonkit.nn import Branches
from gluonkit.params import select

NAMES = ("digit", "parity", "aux")
IN_UNITS = 6


class ThreeHeads(Branches):
    """Dense trunk (deferred input size) and three heads, one of them two layers deep."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.HybridSequential()
            self.trunk.add(nn.Dense(16, activation="tanh"), nn.Dense(12, activation="relu"))
            self.add("digit", nn.Dense(10))
            self.add("parity", nn.Dense(2))
            aux = nn.HybridSequential()
            aux.add(nn.Dense(8, activation="tanh"), nn.Dense(1))
            self.add("aux", aux)


class Nested(Branches):
    """A trunk, one head, and a Branches of two heads with its own small trunk."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.Dense(12, activation="relu")
            self.add("digit", nn.Dense(10))
            heads = Branches(trunk=nn.Dense(7, activation="tanh"))
            with heads.name_scope():
                heads.add("parity", nn.Dense(2))
                heads.add("aux", nn.Dense(3))
            self.add("heads", heads)


def _dense(layer, x, act=None):
    y = x @ layer.weight.data().asnumpy().T + layer.bias.data().asnumpy()
    return {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0), None: lambda v: v}[act](y)


def numpy_three_heads(net, x):
    """ThreeHeads' outputs computed in NumPy from its parameters."""
    h = _dense(net.trunk[1], _dense(net.trunk[0], x, "tanh"), "relu")
    return {"digit": _dense(net.digit, h), "parity": _dense(net.parity, h),
            "aux": _dense(net.aux[1], _dense(net.aux[0], h, "tanh"))}


def numpy_nested(net, x):
    h = _dense(net.trunk, x, "relu")
    g = _dense(net.heads.trunk, h, "tanh")
    return {"digit": _dense(net.digit, h), "parity": _dense(net.heads.parity, g),
            "aux": _dense(net.heads.aux, g)}


def batch(n, seed=0, ctx=mx.cpu(0)):
    rng = np.random.RandomState(seed)
    return mx.nd.array(rng.uniform(-1, 1, (n, IN_UNITS)), ctx=ctx)


def flat(outputs):
    if isinstance(outputs, tuple):
        return [leaf for out in outputs for leaf in flat(out)]
    return [outputs]


def saved(net, tmp_path, name="net.params"):
    """Structural name -> numpy array, as save_parameters writes them."""
    path = str(tmp_path / name)
    net.save_parameters(path)
    return {k: v.asnumpy() for k, v in mx.nd.load(path).items()}


def all_replicas(block):
    """Every parameter's value on every context (raises if one is not initialized)."""
    return {(p.name, str(ctx)): p.data(ctx).asnumpy()
            for p in block.collect_params().values() for ctx in p.list_ctx()}


def ready(hybridize):
    """An initialized ThreeHeads on cpu(0) that has run once."""
    net = ThreeHeads()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    net(batch(2))
    return net


def test_outputs_and_routes_match_numpy(hybridize):
    net = ready(hybridize)
    x = batch(5, seed=1)
    ref = numpy_three_heads(net, x.asnumpy())
    outputs = net(x)
    assert isinstance(outputs, tuple) and len(outputs) == 3
    for name, out in zip(NAMES, outputs):
        assert_allclose(out.asnumpy(), ref[name], rtol=1e-5, atol=1e-6, err_msg=name)
    single = net.route("aux")(x)
    assert isinstance(single, mx.nd.NDArray)
    assert_allclose(single.asnumpy(), ref["aux"], rtol=1e-5, atol=1e-6)
    pair = net.route("aux", "digit")(x)
    assert isinstance(pair, tuple) and len(pair) == 2
    assert_allclose(pair[0].asnumpy(), ref["aux"], rtol=1e-5, atol=1e-6)
    assert_allclose(pair[1].asnumpy(), ref["digit"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flags", [{}, {"static_alloc": True, "static_shape": True}],
                         ids=["default", "static"])
def test_switching_routes_after_hybridize_matches_imperative(flags):
    hybrid = ThreeHeads()
    hybrid.initialize(mx.init.Xavier())
    hybrid.hybridize(**flags)
    hybrid(batch(2))
    imperative = ThreeHeads()
    imperative.initialize(ctx=mx.cpu(0))
    imperative(batch(1))
    for p_imp, p_hyb in zip(imperative.collect_params().values(),
                            hybrid.collect_params().values()):
        p_imp.set_data(p_hyb.data())
    schedule = [("digit",), ("parity",), None, ("aux", "digit"), ("digit",), ("aux",), None]
    for step, names in enumerate(schedule):
        x = batch(3 + step, seed=step)
        got = hybrid(x) if names is None else hybrid.route(*names)(x)
        want = imperative(x) if names is None else imperative.route(*names)(x)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_allclose(g.asnumpy(), w.asnumpy(), rtol=1e-5, atol=1e-6, err_msg=str(names))


def test_any_route_any_batch_matches_numpy(hybridize):
    net = ready(hybridize)

    @settings(max_examples=15, deadline=None)
    @given(order=st.permutations(NAMES), count=st.integers(1, 3), size=st.integers(1, 7),
           seed=st.integers(0, 2 ** 16))
    def check(order, count, size, seed):
        names = tuple(order[:count])
        x = batch(size, seed=seed)
        ref = numpy_three_heads(net, x.asnumpy())
        out = net.route(*names)(x)
        out = out if count > 1 else (out,)
        for name, got in zip(names, out):
            assert got.shape == ref[name].shape
            assert_allclose(got.asnumpy(), ref[name], rtol=1e-5, atol=1e-6, err_msg=name)

    check()


def test_same_names_give_same_view():
    net = ThreeHeads()
    assert net.names == NAMES
    assert net.route("digit") is net.route("digit")
    assert net.route("digit", "aux") is net.route("digit", "aux")
    assert net.route("aux", "digit") is not net.route("digit", "aux")
    assert isinstance(net.route("parity"), mx.gluon.HybridBlock)


def test_route_shares_parameters_and_their_names(tmp_path):
    net = ready(False)
    route = net.route("parity")
    assert set(route.collect_params().keys()) <= set(net.collect_params().keys())
    route_saved = saved(route, tmp_path, "route.params")
    net_saved = saved(net, tmp_path)
    assert sorted(route_saved) == ["parity.bias", "parity.weight", "trunk.0.bias",
                                   "trunk.0.weight", "trunk.1.bias", "trunk.1.weight"]
    for name, value in route_saved.items():
        np.testing.assert_array_equal(value, net_saved[name], err_msg=name)


def test_hybridize_reaches_existing_and_future_routes(tmp_path):
    net = ThreeHeads()
    net.initialize()
    early = net.route("digit")
    net.hybridize()
    late = net.route("parity")
    x = batch(4)
    for name, route in [("early", early), ("late", late)]:
        route(x)
        route.export(str(tmp_path / name))  # only a hybridized, called block can export
    net.hybridize(active=False)
    early(x)
    net.route("aux")(x)
    for route in (early, net.route("aux")):
        with pytest.raises(RuntimeError):
            route.export(str(tmp_path / "imperative"))


@pytest.mark.filterwarnings("ignore:Skipping")
@pytest.mark.parametrize("names", [("digit",), ("aux",), ("parity", "aux")])
def test_one_route_initializes_every_branch(names, ctx_list, hybridize, tmp_path):
    reference = ready(False)  # every branch ran: the shapes every parameter must have
    net = ThreeHeads()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    if hybridize:
        net.hybridize()
    x = batch(5, ctx=ctx_list[-1])
    with autograd.record():
        out = net.route(*names)(x)
        loss = sum(o.sum() for o in (out if isinstance(out, tuple) else (out,)))
    loss.backward()
    replicas = all_replicas(net)  # raises DeferredInitializationError if one is pending
    assert len(replicas) == 12 * len(ctx_list)
    for p in net.collect_params().values():
        first = p.data(ctx_list[0]).asnumpy()
        assert np.all(np.isfinite(first)), p.name
        for ctx in ctx_list[1:]:
            np.testing.assert_array_equal(p.data(ctx).asnumpy(), first, err_msg=p.name)
    values = saved(net, tmp_path)
    assert {k: v.shape for k, v in values.items()} == \
        {k: v.shape for k, v in saved(reference, tmp_path, "ref.params").items()}

    twin = ThreeHeads()
    twin.load_parameters(str(tmp_path / "net.params"), ctx=ctx_list)
    for name, value in saved(twin, tmp_path, "twin.params").items():
        np.testing.assert_array_equal(value, values[name], err_msg=name)
    for name, got in zip(NAMES, twin(x.as_in_context(ctx_list[0]))):
        assert_allclose(got.asnumpy(), numpy_three_heads(net, x.asnumpy())[name],
                        rtol=1e-5, atol=1e-6, err_msg=name)

    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    assert trainer.step(5) is True


def test_inactive_branches_never_run_on_data():
    seen = []
    net = ThreeHeads()
    for name in ("digit", "aux"):
        getattr(net, name).register_forward_hook(
            lambda block, inputs, _, name=name: seen.append((name, type(inputs[0]).__name__)))
    net.initialize()
    net.route("parity")(batch(4))
    assert net.digit.weight.data().shape == (10, 12)
    assert net.aux[0].weight.data().shape == (8, 12)
    assert ("digit", "NDArray") not in seen and ("aux", "NDArray") not in seen
    assert ("digit", "Symbol") in seen  # shapes came from symbolic inference


@pytest.mark.filterwarnings("ignore:Skipping")
@pytest.mark.parametrize("optimizer", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-2}),
    ("adam", {"learning_rate": 0.01, "wd": 1e-2}),
], ids=["sgd-momentum-wd", "adam-wd"])
def test_training_one_route_leaves_other_branches_bit_identical(optimizer, ctx_list,
                                                                hybridize):
    net = ThreeHeads()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    if hybridize:
        net.hybridize()
    route = net.route("digit")
    route(batch(1, ctx=ctx_list[0]))  # finishes deferred init, so the twin can copy values

    # plain Gluon, the long way: the trunk and the head as one sequential twin
    twin = nn.HybridSequential()
    twin.add(nn.Dense(16, activation="tanh", in_units=IN_UNITS),
             nn.Dense(12, activation="relu", in_units=16), nn.Dense(10, in_units=12))
    twin.initialize(ctx=ctx_list)
    for dst, src in zip(twin, [net.trunk[0], net.trunk[1], net.digit]):
        dst.weight.set_data(src.weight.data())
        dst.bias.set_data(src.bias.data())
    name, params = optimizer
    trainer = gluonkit.Trainer(net.collect_params(), name, dict(params))
    twin_trainer = mx.gluon.Trainer(twin.collect_params(), name, dict(params))

    others = {**all_replicas(net.parity), **all_replicas(net.aux)}
    assert len(others) == 6 * len(ctx_list)
    initial_digit = net.digit.weight.data().asnumpy()
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(3)
    for step in range(6):
        size = 7 + step
        data = rng.uniform(-1, 1, (size, IN_UNITS)).astype(np.float32)
        label = rng.randint(0, 10, size).astype(np.float32)
        for model, opt in ((route, trainer), (twin, twin_trainer)):
            xs = gluonkit.split_and_load(data, ctx_list)
            ys = gluonkit.split_and_load(label, ctx_list)
            with autograd.record():
                losses = [loss_fn(model(x), y) for x, y in zip(xs, ys)]
            autograd.backward(losses)
            opt.step(size)

    after = all_replicas(net)
    for key, value in others.items():
        np.testing.assert_array_equal(after[key], value, err_msg=str(key))
    for dst, src in zip(twin, [net.trunk[0], net.trunk[1], net.digit]):
        for ctx in ctx_list:
            assert_allclose(src.weight.data(ctx).asnumpy(), dst.weight.data(ctx).asnumpy(),
                            rtol=1e-5, atol=1e-6)
            assert_allclose(src.bias.data(ctx).asnumpy(), dst.bias.data(ctx).asnumpy(),
                            rtol=1e-5, atol=1e-6)
    assert np.abs(net.digit.weight.data().asnumpy() - initial_digit).max() > 1e-3


@pytest.mark.filterwarnings("ignore:Cannot decide type")  # SymbolBlock.imports' own note
@pytest.mark.parametrize("net_cls", [ThreeHeads, Nested])
def test_export_writes_every_branch(net_cls, tmp_path):
    net = net_cls()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = batch(4)
    net.route("digit")(x)
    with pytest.raises(RuntimeError, match=r"net\(x\)"):
        net.export(str(tmp_path / "early"))
    want = [o.asnumpy() for o in flat(net(x))]
    net.export(str(tmp_path / "net"))
    loaded = mx.gluon.SymbolBlock.imports(str(tmp_path / "net-symbol.json"), ["data"],
                                          str(tmp_path / "net-0000.params"))
    got = loaded(x)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert_allclose(g.asnumpy(), w, rtol=1e-5, atol=1e-6)

    route = net.route("digit")
    route.export(str(tmp_path / "digit"))
    only = mx.gluon.SymbolBlock.imports(str(tmp_path / "digit-symbol.json"), ["data"],
                                        str(tmp_path / "digit-0000.params"))
    assert_allclose(only(x).asnumpy(), want[0], rtol=1e-5, atol=1e-6)


def test_nested_branches(hybridize, tmp_path):
    net = Nested()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    x = batch(3)
    digit = net.route("digit")(x)
    assert sorted(saved(net, tmp_path)) == sorted(
        ["trunk.weight", "trunk.bias", "digit.weight", "digit.bias", "heads.trunk.weight",
         "heads.trunk.bias", "heads.parity.weight", "heads.parity.bias", "heads.aux.weight",
         "heads.aux.bias"])
    ref = numpy_nested(net, x.asnumpy())
    assert_allclose(digit.asnumpy(), ref["digit"], rtol=1e-5, atol=1e-6)
    out = net(x)
    assert isinstance(out[1], tuple) and len(out[1]) == 2
    for got, name in [(out[0], "digit"), (out[1][0], "parity"), (out[1][1], "aux")]:
        assert_allclose(got.asnumpy(), ref[name], rtol=1e-5, atol=1e-6, err_msg=name)
    parity, aux = net.route("heads")(x)
    assert_allclose(aux.asnumpy(), ref["aux"], rtol=1e-5, atol=1e-6)
    inner = net.heads.route("aux")(net.trunk(x))
    assert_allclose(inner.asnumpy(), ref["aux"], rtol=1e-5, atol=1e-6)


def test_gluoncv_trunk(hybridize):
    gluoncv = pytest.importorskip("gluoncv")
    features = gluoncv.model_zoo.get_model("cifar_resnet20_v1", pretrained=False).features
    net = Branches(trunk=features)
    with net.name_scope():
        net.add("digit", nn.Dense(10))
        net.add("parity", nn.Dense(2))
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    x = mx.nd.random.uniform(shape=(2, 3, 32, 32))
    parity = net.route("parity")(x)
    all_replicas(net)
    assert net.digit.weight.shape == (10, 64)
    h = net.trunk(x)
    assert_allclose(parity.asnumpy(), net.parity(h).asnumpy(), rtol=1e-4, atol=1e-5)
    digit, parity = net(x)
    assert_allclose(digit.asnumpy(), net.digit(h).asnumpy(), rtol=1e-4, atol=1e-5)


def test_trunk_assigned_after_a_route_is_used_by_it():
    net = Branches()
    net.add("head", nn.Dense(3, in_units=5))
    route = net.route("head")
    net.trunk = nn.Dense(5, activation="relu", in_units=IN_UNITS)
    net.initialize()
    x = batch(4)
    h = np.maximum(_dense(net.trunk, x.asnumpy()), 0)
    assert_allclose(route(x).asnumpy(), _dense(net.head, h), rtol=1e-5, atol=1e-6)


def test_branch_replaced_after_a_route_is_used_by_it(hybridize):
    """A new head for fine-tuning (``net.digit = nn.Dense(classes)``) reaches every route."""
    net = ready(hybridize)
    route, both = net.route("digit"), net.route("parity", "digit")
    x = batch(4)
    route(x), both(x)                                # graphs cached with the old head
    with net.name_scope():
        net.digit = nn.Dense(7)
    net.digit.initialize()
    net.route("parity")(x)                           # completes the new head's deferred init
    expected = numpy_three_heads(net, x.asnumpy())
    assert route(x).shape == (4, 7)
    assert_allclose(route(x).asnumpy(), expected["digit"], rtol=1e-5, atol=1e-6)
    parity, digit = both(x)
    assert_allclose(digit.asnumpy(), expected["digit"], rtol=1e-5, atol=1e-6)
    assert_allclose(parity.asnumpy(), expected["parity"], rtol=1e-5, atol=1e-6)
    assert set(gluonkit.params.select(route)) == {
        "trunk.0.weight", "trunk.0.bias", "trunk.1.weight", "trunk.1.bias",
        "digit.weight", "digit.bias"}
    assert route.digit is net.digit


class _SumAndProduct(nn.HybridBlock):
    def hybrid_forward(self, F, a, b):
        return a + b, a * b


class _DenseOnBoth(nn.HybridBlock):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = nn.Dense(units)

    def hybrid_forward(self, F, a, b):
        return self.dense(F.concat(a, b, dim=1))


def test_several_inputs_and_trunk_outputs(hybridize):
    net = Branches(trunk=_SumAndProduct())
    net.add("left", _DenseOnBoth(3))
    net.add("right", _DenseOnBoth(2))
    net.initialize()
    if hybridize:
        net.hybridize()
    a, b = batch(4, seed=1), batch(4, seed=2)
    right = net.route("right")(a, b)
    both = np.concatenate([(a + b).asnumpy(), (a * b).asnumpy()], axis=1)
    assert_allclose(right.asnumpy(), _dense(net.right.dense, both), rtol=1e-5, atol=1e-6)
    assert net.left.dense.weight.data().shape == (3, 2 * IN_UNITS)
    left, _ = net(a, b)
    assert_allclose(left.asnumpy(), _dense(net.left.dense, both), rtol=1e-5, atol=1e-6)


class _PlainBlock(nn.Block):
    def forward(self, x):
        return x


@pytest.mark.parametrize("name, error, match", [
    ("digit", ValueError, "already exists"),
    ("1st", ValueError, "identifier"),
    ("two words", ValueError, "identifier"),
    ("class", ValueError, "identifier"),
    ("_hidden", ValueError, "identifier"),
    ("", ValueError, "identifier"),
    (3, ValueError, "identifier"),
    ("trunk", ValueError, "clashes"),
    ("route", ValueError, "clashes"),
    ("names", ValueError, "clashes"),
])
def test_add_rejects_bad_names(name, error, match):
    net = ThreeHeads()
    with pytest.raises(error, match=match):
        net.add(name, nn.Dense(2))
    assert net.names == NAMES


@pytest.mark.parametrize("block", [_PlainBlock(), lambda x: x, "dense"])
def test_add_rejects_what_is_not_a_hybrid_block(block):
    net = ThreeHeads()
    with pytest.raises(TypeError, match="HybridBlock"):
        net.add("extra", block)
    assert net.names == NAMES
    with pytest.raises(TypeError, match="HybridBlock"):
        Branches(trunk=block)


def test_route_rejects_bad_names():
    net = ThreeHeads()
    with pytest.raises(KeyError, match=r"'digits'.*\('digit', 'parity', 'aux'\)"):
        net.route("digits")
    with pytest.raises(ValueError, match="at least one"):
        net.route()
    with pytest.raises(ValueError, match="twice"):
        net.route("aux", "aux")
    with pytest.raises(TypeError, match=r"got \['digit', 'aux'\].*route\('digit', 'aux'\)"):
        net.route(["digit", "aux"])
    with pytest.raises(TypeError, match=r"got 0; the branches are \('digit'"):
        net.route(0)


def test_branch_that_cannot_take_the_trunk_output_is_named(hybridize):
    net = Branches(trunk=nn.Dense(12))
    bad = nn.HybridSequential()
    bad.add(nn.Dense(4), nn.Dense(3, in_units=5))
    net.add("good", nn.Dense(3))
    net.add("bad", bad)
    net.initialize()
    if hybridize:
        net.hybridize()
    with pytest.raises(ValueError, match=r"branch 'bad' from its input shapes \[\(2, 12\)\]"):
        net.route("good")(batch(2))


def test_calling_without_branches_says_what_to_do():
    net = Branches(trunk=nn.Dense(3))
    net.initialize()
    with pytest.raises(RuntimeError, match="add"):
        net(batch(2))


class _DigitOnly(nn.HybridBlock):
    """One's own hybridized block that calls a route."""

    def __init__(self, net, **kwargs):
        super().__init__(**kwargs)
        self.net = net

    def hybrid_forward(self, F, x):
        return self.net.route("digit")(x)


def test_a_route_traced_in_ones_own_block_points_to_the_fix():
    # Gluon failed with its bare "Deferred initialization failed because shape cannot be
    # inferred", naming an internal parameter name of a branch the route leaves out
    outer = _DigitOnly(ThreeHeads())
    outer.initialize(mx.init.Xavier())
    outer.hybridize()
    x = batch(3)
    with pytest.raises(RuntimeError, match=r"'parity', 'aux'.*call the network \(or the route\) "
                                           r"once on a batch before"):
        outer(x)
    outer.net(x)                                    # the documented fix
    assert_allclose(outer(x).asnumpy(), numpy_three_heads(outer.net, x.asnumpy())["digit"],
                    rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hybridize", [False, True])
def test_a_route_reaches_nested_heads_by_dotted_names(hybridize, tmp_path):
    # route("heads.aux") was a KeyError, and route("heads") runs every inner head
    net = Nested()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    x = batch(3)
    aux = net.route("heads.aux")(x)                 # first call: every branch initialized
    assert len(saved(net, tmp_path)) == 10
    ref = numpy_nested(net, x.asnumpy())
    assert_allclose(aux.asnumpy(), ref["aux"], rtol=1e-5, atol=1e-6)
    aux, digit, parity = net.route("heads.aux", "digit", "heads.parity")(x)
    for got, name in [(aux, "aux"), (digit, "digit"), (parity, "parity")]:
        assert_allclose(got.asnumpy(), ref[name], rtol=1e-5, atol=1e-6, err_msg=name)
    with autograd.record():
        out = net.route("heads.aux")(x)
    out.backward()
    assert net.heads.parity.weight.grad().abs().sum().asscalar() == 0
    assert net.heads.aux.weight.grad().abs().sum().asscalar() > 0
    with pytest.raises(KeyError, match="'heads.nope'.*'parity', 'aux'"):
        net.route("heads.nope")
    with pytest.raises(KeyError, match="'digit' has no branches of its own"):
        net.route("digit.x")
    with pytest.raises(ValueError, match="'heads' and 'heads.aux'"):
        net.route("heads", "heads.aux")


def _triplet_loss(name, out):
    return mx.nd.relu(out + 1) if name == "distance" else mx.nd.square(out).sum(axis=1)


@pytest.mark.filterwarnings("ignore:Skipping")
@pytest.mark.parametrize("first", ["distance", "embedding"])
def test_heads_reading_some_trunk_outputs_train_on_every_route(first, hybridize, tmp_path):
    # the first route call used to fail for the head that reads only the anchor: the shape
    # inference passed every trunk output to its graph, which does not have them all
    a, p, n = batch(5, seed=1), batch(5, seed=2), batch(5, seed=3)
    net = Triplet()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    for name in (first, ({"distance", "embedding"} - {first}).pop()):
        # the reference: a twin with the same values, the trunk and the head called by hand
        with autograd.record():
            loss = _triplet_loss(name, net.route(name)(a, p, n))
        loss.backward()
        net.save_parameters(str(tmp_path / "net.params"))   # every head has its shapes
        twin = Triplet()
        twin.load_parameters(str(tmp_path / "net.params"))
        untouched = {k: v for k, v in params_of(twin).items() if not k.startswith(("trunk", name))}
        with autograd.record():
            ref = _triplet_loss(name, getattr(twin, name)(*twin.trunk(a, p, n)))
        ref.backward()
        assert_allclose(loss.asnumpy(), ref.asnumpy(), rtol=1e-5, atol=1e-6)
        used = {k: v for k, v in select(twin).items() if k.startswith(("trunk", name))}
        mx.gluon.Trainer(list(used.values()), "sgd", {"learning_rate": 0.1}).step(5)
        assert trainer.step(5) is True
        got, want = params_of(net), params_of(twin)
        assert set(got) == {"trunk.embed.weight", "trunk.embed.bias", "distance.proj.weight",
                            "distance.proj.bias", "embedding.out.weight", "embedding.out.bias"}
        for key in got:
            assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
        for key, value in untouched.items():
            np.testing.assert_array_equal(got[key], value, err_msg=key)
    distance, embedding = net(a, p, n)
    feats = net.trunk(a, p, n)
    assert_allclose(distance.asnumpy(), net.distance(*feats).asnumpy(), rtol=1e-5, atol=1e-6)
    assert_allclose(embedding.asnumpy(), net.embedding(*feats).asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call", ["route", "network"])
def test_a_call_before_initialize_names_the_parameters_and_branches(call, hybridize):
    # Gluon's message named 'threeheads0_dense0_weight' and spoke of collect_params
    net = ThreeHeads()
    if hybridize:
        net.hybridize()
    with pytest.raises(RuntimeError, match=r"'trunk\.0\.weight'.*the trunk.*branch 'digit'.*"
                                           r"net\.initialize\(\)"):
        if call == "route":
            net.route("digit")(batch(2))
        else:
            net(batch(2))
    net.initialize()
    assert net.route("digit")(batch(2)).shape == (2, 10)


def test_a_head_left_uninitialized_is_named_alone():
    net = ThreeHeads()
    net.trunk.initialize()
    net.digit.initialize()
    # 'aux', which the route leaves out, is named too: save_parameters would fail on it
    with pytest.raises(RuntimeError, match=r"initialized in part: parameters 'parity\.weight', "
                                           r"'parity\.bias' and 4 more \(of branch 'parity' and "
                                           r"branch 'aux'\) have no value"):
        net.route("digit", "parity")(batch(2))


class _Scaled(Branches):
    """A subclass that scales its input in its own hybrid_forward, as the docs' users do."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.Dense(4)
            self.add("a", nn.Dense(2))
            self.add("b", nn.Dense(3))

    def hybrid_forward(self, F, x):
        return super().hybrid_forward(F, x * 100)


class _Widened(_Scaled):
    """Changes the input's shape before the trunk: deferred shapes come through it too."""

    def hybrid_forward(self, F, x):
        return Branches.hybrid_forward(self, F, F.concat(x, x * 100, dim=1))


class _ScaledForward(_Scaled):
    """Overrides forward rather than hybrid_forward."""

    def hybrid_forward(self, F, x):
        return Branches.hybrid_forward(self, F, x)

    def forward(self, x):
        return super().forward(x * 100)


class _OwnScale(_Scaled):
    """A parameter of the subclass itself, read in its hybrid_forward."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scale = self.params.get("scale", shape=(1,), init=mx.init.Constant(100))

    def hybrid_forward(self, F, x, scale):
        return Branches.hybrid_forward(self, F, F.broadcast_mul(x, scale))


@pytest.mark.parametrize("net_cls, prepare", [
    (_Scaled, lambda x: x * 100), (_Widened, lambda x: mx.nd.concat(x, x * 100, dim=1)),
    (_ScaledForward, lambda x: x * 100), (_OwnScale, lambda x: x * 100)])
@pytest.mark.parametrize("first", ["route", "network"])
def test_routes_run_a_subclass_own_forward(net_cls, prepare, first, hybridize):
    # route() skipped the subclass's hybrid_forward: its outputs were 100 times too small
    net = net_cls()
    net.initialize()
    if hybridize:
        net.hybridize()
    x = batch(3)
    if first == "route":
        a = net.route("a")(x)
    outputs = net(x)
    if first == "network":
        a = net.route("a")(x)
    b, both = net.route("b")(x), net.route("b", "a")(x)
    features = net.trunk(prepare(x))   # plain Gluon, the long way
    for got, want in [(outputs[0], net.a(features)), (outputs[1], net.b(features)),
                      (a, net.a(features)), (b, net.b(features)),
                      (both[0], net.b(features)), (both[1], net.a(features))]:
        assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-5)


class _ExtraOutput(_Scaled):
    def hybrid_forward(self, F, x):
        return super().hybrid_forward(F, x) + (x,)


class _ForwardAround(_Scaled):
    def forward(self, x):
        return Branches.hybrid_forward(self, mx.nd, x)


@pytest.mark.parametrize("net_cls, match", [
    (_ExtraOutput, r"_ExtraOutput\.hybrid_forward must return the outputs of "
                   r"super\(\)\.hybrid_forward, one per branch"),
    (_ForwardAround, r"_ForwardAround\.forward did not call super\(\)\.forward")])
def test_a_subclass_forward_a_route_cannot_run_through_is_named(net_cls, match):
    net = net_cls()
    net.initialize()
    with pytest.raises(TypeError, match=match):
        net.route("a", "b")(batch(2))


def test_unequal_inputs_through_one_layer_are_named():
    # said "the input sizes its layers were given do not fit", though none were given
    net = Triplet()
    net.initialize()
    a, p, n = batch(4), batch(4, seed=1), mx.nd.ones((4, 7))
    with pytest.raises(ValueError, match=r"the trunk: its inputs of shapes \(4, 6\), \(4, 6\), "
                                         r"\(4, 7\) cannot all feed its layers"):
        net.route("embedding")(a, p, n)
    assert net.trunk.embed.weight.shape == (8, 0)   # nothing changed


class _ParameterFreeDistance(nn.HybridBlock):
    def hybrid_forward(self, F, anchor, positive, negative):
        return F.sum(F.square(anchor - positive) - F.square(anchor - negative), axis=1)


class _DocsTriplet(Branches):
    """docs/branches.md's triplet: its distance head has no parameters."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = TripletTrunk()
            self.add("distance", _ParameterFreeDistance())
            self.add("embedding", Embedding())


def test_a_route_on_a_network_initialized_in_part_names_what_is_missing(hybridize, tmp_path):
    # ran, and the next save_parameters failed naming Gluon's internal parameter name
    net = _DocsTriplet()
    net.trunk.initialize()
    if hybridize:
        net.hybridize()
    a, p, n = batch(4), batch(4, seed=1), batch(4, seed=2)
    with pytest.raises(RuntimeError, match=r"route\('distance'\) was called on a network "
                                           r"initialized in part: parameters "
                                           r"'embedding\.out\.weight', 'embedding\.out\.bias' "
                                           r"\(of branch 'embedding'\).*net\.initialize\(\)"):
        net.route("distance")(a, p, n)
    net.initialize()
    distance = net.route("distance")(a, p, n)
    net.save_parameters(str(tmp_path / "triplet.params"))
    want = net.distance(*net.trunk(a, p, n))
    assert_allclose(distance.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-6)


class _Zeros(nn.HybridBlock):
    def hybrid_forward(self, F, x):
        return F.zeros((1, 2))


def test_a_hybridized_route_whose_graph_reads_nothing_says_so():
    # MXNet said "There are no inputs in computation graph that require gradients"
    net = Branches(trunk=nn.Dense(4))
    net.add("zeros", _Zeros())
    net.add("digit", nn.Dense(2))
    net.initialize()
    assert_allclose(net.route("zeros")(batch(2)).asnumpy(), np.zeros((1, 2)))
    net.hybridize()
    with pytest.raises(RuntimeError, match=r"reads neither its inputs nor any parameter.*"
                                           r"F\.zeros_like"):
        net.route("zeros")(batch(2))
