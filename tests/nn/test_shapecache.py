"""ShapeCache against the plain network: same outputs, gradients and parameter files."""
import gc

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from numpy.testing import assert_allclose

from gluonkit.nn import Branches
from gluonkit.nn.shapecache import ShapeCache
from gluonkit.params import select

SHAPES = [(2, 3, 6, 6), (3, 3, 9, 5), (2, 3, 6, 6), (1, 3, 4, 7), (3, 3, 9, 5)]
FLAGS = [{}, {"static_alloc": True, "static_shape": True}]


def _net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, padding=1), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
            gluon.nn.Conv2D(5, 3, strides=2, padding=1), gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(3))
    return net


def _twins(ctx, **flags):
    """A plain network and a ShapeCache around an identical one, both initialized alike."""
    ref = _net()
    ref.initialize(mx.init.Xavier(), ctx=ctx)
    ref(mx.nd.zeros((1, 3, 4, 4), ctx=ctx))
    cached = ShapeCache(_net())
    cached.initialize(ctx=ctx)
    cached(mx.nd.zeros((1, 3, 4, 4), ctx=ctx))
    for a, b in zip(ref.collect_params().values(), cached.collect_params().values()):
        b.set_data(a.data(ctx))
    cached.hybridize(**flags)
    return ref, cached


def _forward_backward(net, x, train):
    with autograd.record(train_mode=train):
        out = net(x)
        loss = (out * out).sum()
    loss.backward()
    return out.asnumpy(), {k: p.grad(x.context).asnumpy() for k, p in select(net).items()
                           if p.grad_req != "null"}


@pytest.mark.parametrize("flags", FLAGS, ids=["hybridize", "static"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "predict"])
def test_outputs_and_gradients_equal_the_plain_network(ctx_list, flags, train):
    ctx = ctx_list[-1]
    ref, cached = _twins(ctx, **flags)
    rng = np.random.RandomState(0)
    for shape in SHAPES:
        x = mx.nd.array(rng.randn(*shape), ctx=ctx)
        out_ref, grads_ref = _forward_backward(ref, x, train)
        out, grads = _forward_backward(cached, x, train)
        assert_allclose(out, out_ref, rtol=1e-5, atol=1e-6)
        assert grads.keys() == grads_ref.keys()
        for name in grads:
            assert_allclose(grads[name], grads_ref[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert len(cached.shapes) == 3
    # BatchNorm's running statistics moved alike (or not at all when predicting)
    for (name, a), b in zip(select(ref).items(), select(cached).values()):
        assert_allclose(b.data(ctx).asnumpy(), a.data(ctx).asnumpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_one_graph_per_shape_least_recently_used_dropped():
    cached = ShapeCache(_net(), max_shapes=2)
    cached.initialize()
    cached.hybridize()
    for shape in [(1, 3, 4, 4), (1, 3, 5, 5), (1, 3, 4, 4), (1, 3, 6, 6)]:
        cached(mx.nd.ones(shape))
    assert cached.shapes == [(((1, 3, 4, 4), np.float32),), (((1, 3, 6, 6), np.float32),)]
    assert cached.max_shapes == 2
    cached.hybridize(False)
    out = cached(mx.nd.ones((1, 3, 7, 7)))
    assert out.shape == (1, 3) and cached.shapes == []


def _live_graphs():
    """The compiled graphs alive now, unreachable ones waiting for the cycle collector too."""
    return sum(isinstance(o, mx.nd.CachedOp) for o in gc.get_objects())


@pytest.mark.parametrize("flags", FLAGS, ids=["hybridize", "static"])
def test_an_evicted_graph_is_freed_at_once_without_the_cycle_collector(flags):
    # an evicted graph lived on in a reference cycle until gc ran: with 40 sizes and
    # max_shapes=16 the process grew by 850 MB over 14 epochs
    cached = ShapeCache(_net(), max_shapes=2)
    cached.initialize()
    cached.hybridize(**flags)
    gc.collect()
    before = _live_graphs()
    gc.disable()
    try:
        for size in range(4, 14):
            x = mx.nd.ones((2, 3, size, size))
            with autograd.record():
                out = cached(x)
            out.backward()
            out.wait_to_read()
        assert len(cached.shapes) == 2
        assert _live_graphs() - before == 2
        cached.hybridize(**flags)                   # dropping every graph frees them too
        assert _live_graphs() == before
    finally:
        gc.enable()


@pytest.mark.parametrize("flags", FLAGS, ids=["hybridize", "static"])
def test_graphs_evicted_before_the_backward_still_give_the_plain_gradients(flags):
    ref, cached = _twins(mx.cpu(), **flags)
    cached = ShapeCache(cached.net, max_shapes=1)
    cached.hybridize(**flags)
    rng = np.random.RandomState(1)
    xs = [mx.nd.array(rng.randn(*shape)) for shape in SHAPES[:3]]
    grads = []
    for net in (ref, cached):
        with autograd.record():                     # three shapes: two graphs evicted mid-record
            loss = sum((net(x) ** 2).sum() for x in xs)
        loss.backward()
        grads.append([p.grad().asnumpy() for p in select(net).values() if p.grad_req != "null"])
    for a, b in zip(*grads):
        assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_deferred_initialization_and_several_contexts(ctx_list):
    cached = ShapeCache(_net())
    cached.initialize(ctx=ctx_list)
    cached.hybridize(static_alloc=True, static_shape=True)
    outs = [cached(mx.nd.ones((2, 3, 5, 5), ctx=ctx)).asnumpy() for ctx in ctx_list]
    for out in outs[1:]:
        assert_allclose(out, outs[0], rtol=1e-6)
    assert len(cached.shapes) == 1          # one graph serves every context


def test_a_route_of_branches_still_initializes_every_branch(tmp_path):
    """The route runs as a traced graph here: its other branches are completed all the same."""
    net = Branches()
    with net.name_scope():
        net.trunk = gluon.nn.Dense(6, activation="relu")
        net.add("digit", gluon.nn.Dense(4))
        net.add("parity", gluon.nn.Dense(2))
    net.initialize()
    cached = ShapeCache(net.route("digit"))
    cached.hybridize()
    x = mx.nd.random.uniform(shape=(3, 5))
    digit = cached(x)
    assert net.parity.weight.data().shape == (2, 6)       # initialized without running
    h = np.maximum(x.asnumpy() @ net.trunk.weight.data().asnumpy().T
                   + net.trunk.bias.data().asnumpy(), 0)
    expected = h @ net.digit.weight.data().asnumpy().T + net.digit.bias.data().asnumpy()
    assert_allclose(digit.asnumpy(), expected, rtol=1e-5, atol=1e-6)
    net.save_parameters(str(tmp_path / "net.params"))
    assert sorted(mx.nd.load(str(tmp_path / "net.params"))) == sorted(select(net))


def test_parameters_save_and_load_under_the_networks_names(tmp_path):
    ref, cached = _twins(mx.cpu())
    assert list(select(cached)) == list(select(ref))
    path = str(tmp_path / "cached.params")
    cached.save_parameters(path)
    plain = _net()
    plain.load_parameters(path)
    x = mx.nd.array(np.random.RandomState(1).randn(2, 3, 6, 6))
    assert_allclose(plain(x).asnumpy(), cached(x).asnumpy(), rtol=1e-5, atol=1e-6)
    again = ShapeCache(_net())
    again.load_parameters(path)
    assert_allclose(again(x).asnumpy(), ref(x).asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:Cannot decide type")
def test_export_gives_the_networks_graph(tmp_path):
    ref, cached = _twins(mx.cpu())
    with pytest.raises(RuntimeError, match="run one forward"):
        cached.export(str(tmp_path / "none"))
    x = mx.nd.array(np.random.RandomState(2).randn(2, 3, 6, 6))
    cached(x)
    cached.export(str(tmp_path / "net"))
    imported = gluon.SymbolBlock.imports(str(tmp_path / "net-symbol.json"), ["data"],
                                         str(tmp_path / "net-0000.params"))
    assert_allclose(imported(x).asnumpy(), ref(x).asnumpy(), rtol=1e-5, atol=1e-6)


def test_it_can_sit_inside_a_hybridized_network():
    ref, cached = _twins(mx.cpu())
    outer = gluon.nn.HybridSequential()
    outer.add(cached, gluon.nn.Activation("tanh"))
    outer.hybridize()
    x = mx.nd.array(np.random.RandomState(3).randn(2, 3, 6, 6))
    assert_allclose(outer(x).asnumpy(), np.tanh(ref(x).asnumpy()), rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="HybridBlock"):
        ShapeCache(gluon.nn.Sequential())
    with pytest.raises(ValueError, match="max_shapes"):
        ShapeCache(_net(), max_shapes=0)
