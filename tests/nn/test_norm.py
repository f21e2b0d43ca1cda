"""Frozen BatchNorm against the analytic gradient; SyncBatchNorm against one BatchNorm on the
whole batch."""
import mxnet as mx
import numpy as np
import pytest
from gluoncv import model_zoo
from mxnet import autograd, gluon
from numpy.testing import assert_array_equal

import gluonkit
from gluonkit.nn import declare_norm_init, freeze_batchnorm

EPS = 1e-5


def trained_bn(channels=4, seed=0):
    """A BatchNorm whose gamma, beta and running statistics are far from their defaults."""
    rng = np.random.RandomState(seed)
    bn = gluon.nn.BatchNorm(in_channels=channels, epsilon=EPS)
    bn.initialize()
    bn.gamma.set_data(mx.nd.array(rng.uniform(0.5, 2, channels)))
    bn.beta.set_data(mx.nd.array(rng.uniform(-1, 1, channels)))
    bn.running_mean.set_data(mx.nd.array(rng.uniform(-2, 2, channels)))
    bn.running_var.set_data(mx.nd.array(rng.uniform(0.2, 3, channels)))
    return bn, {k: p.data().asnumpy() for k, p in
                zip(("gamma", "beta", "mean", "var"),
                    (bn.gamma, bn.beta, bn.running_mean, bn.running_var))}


def input_grad(block, x, head, predict=False):
    x = mx.nd.array(x)
    x.attach_grad()
    with autograd.record():
        if predict:
            with autograd.predict_mode():
                y = block(x)
        else:
            y = block(x)
    y.backward(mx.nd.array(head))
    return y.asnumpy(), x.grad.asnumpy()


def test_predict_mode_gives_wrong_input_gradients_and_frozen_batchnorm_exact_ones():
    rng = np.random.RandomState(1)
    x, head = rng.randn(3, 4, 5, 5).astype("float32"), rng.randn(3, 4, 5, 5).astype("float32")
    bn, p = trained_bn()
    scale = (p["gamma"] / np.sqrt(p["var"] + EPS)).reshape(1, -1, 1, 1)
    expected_out = (x - p["mean"].reshape(1, -1, 1, 1)) * scale + p["beta"].reshape(1, -1, 1, 1)

    out, grad = input_grad(bn, x, head, predict=True)
    np.testing.assert_allclose(out, expected_out, rtol=1e-5, atol=1e-5)   # the forward is right
    assert np.abs(grad - head * scale).max() > 0.1                       # MXNet 1.9.1: the gradient is not

    assert freeze_batchnorm(bn) == [""]
    out, grad = input_grad(bn, x, head)                                    # training mode, frozen
    np.testing.assert_allclose(out, expected_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, head * scale, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_mean.data().asnumpy(), p["mean"], rtol=1e-6)   # kept, to
    np.testing.assert_allclose(bn.running_var.data().asnumpy(), p["var"], rtol=1e-6)     # rounding

    np.testing.assert_array_equal(input_grad(_as_frozen_twin(bn), x, head)[1], grad)


def test_freezing_a_hybridized_network_takes_effect_and_can_freeze_gamma_and_beta():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=2), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
            gluon.nn.Conv2D(3, 1), gluon.nn.BatchNorm())
    net.initialize()
    net.hybridize()
    x = mx.nd.random.uniform(shape=(2, 2, 6, 6))
    with autograd.record():
        net(x)                                    # traced with batch statistics
    assert freeze_batchnorm(net, affine=True) == ["1", "4"]
    assert net[1].gamma.grad_req == net[4].beta.grad_req == "null"
    with autograd.record():
        y = net(x)
    with autograd.predict_mode():
        expected = net(x)                         # the forward of prediction mode is right
    np.testing.assert_allclose(y.asnumpy(), expected.asnumpy(), rtol=1e-5, atol=1e-6)


class _BatchNormHeads(gluonkit.nn.Branches):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential()
            self.trunk.add(gluon.nn.Conv2D(4, 3, in_channels=2), gluon.nn.BatchNorm(epsilon=EPS))
            self.add("seg", gluon.nn.Conv2D(2, 1))
            self.add("cls", gluon.nn.Dense(3))


def _as_frozen_twin(bn):
    """A BatchNorm of ``bn``'s values built with use_global_stats=True: the reference."""
    ref = gluon.nn.BatchNorm(in_channels=4, epsilon=EPS, use_global_stats=True)
    ref.initialize()
    for name in ("gamma", "beta", "running_mean", "running_var"):
        getattr(ref, name).set_data(getattr(bn, name).data())
    return ref


@pytest.mark.parametrize("wrap", ["route", "shape_cache", "trunk_then_hybridize"])
def test_freezing_reaches_the_graphs_of_routes_and_shape_cache_views(wrap):
    net = _BatchNormHeads()
    net.initialize()
    bn = net.trunk[1]
    bn.running_mean.set_data(mx.nd.array([1, -2, 3, 0.5]))
    bn.running_var.set_data(mx.nd.array([4, 0.3, 2, 1]))
    call = gluonkit.nn.ShapeCache(net.route("seg")) if wrap == "shape_cache" else net.route("seg")
    (net if wrap == "trunk_then_hybridize" else call).hybridize()
    x = mx.nd.random.uniform(shape=(2, 2, 6, 6))
    with autograd.record():
        call(x)                                   # traced with batch statistics
    if wrap == "trunk_then_hybridize":            # a sub-block: its network is hybridized again
        freeze_batchnorm(net.trunk)
        net.hybridize()
    else:
        freeze_batchnorm(net if wrap == "route" else call)
    with autograd.record():
        y = call(x)
    frozen = _as_frozen_twin(bn)
    with autograd.record():
        expected = net.seg(frozen(net.trunk[0](x)))
    np.testing.assert_allclose(y.asnumpy(), expected.asnumpy(), rtol=1e-5, atol=1e-6)


def test_frozen_gluoncv_model_finds_every_batchnorm():
    net = model_zoo.get_model("resnet18_v1b", pretrained=False)
    names = freeze_batchnorm(net)
    assert len(names) == 20 and "bn1" in names and "layer1.0.bn1" in names
    with pytest.raises(TypeError, match="gluon Block"):
        freeze_batchnorm("net")


def test_sync_batchnorm_over_two_devices_equals_batchnorm_on_the_whole_batch():
    ctx = [mx.cpu(0), mx.cpu(1)]
    rng = np.random.RandomState(2)
    x, head = rng.randn(4, 3, 5, 5).astype("float32"), rng.randn(4, 3, 5, 5).astype("float32")
    sync = gluon.contrib.nn.SyncBatchNorm(in_channels=3, num_devices=2)
    sync.initialize(ctx=ctx)
    parts = gluonkit.split_and_load(x, ctx)
    heads = gluonkit.split_and_load(head, ctx)
    for part in parts:
        part.attach_grad()
    with autograd.record():
        outs = [sync(part) for part in parts]
    autograd.backward(outs, heads)

    ref = gluon.nn.BatchNorm(in_channels=3)
    ref.initialize()
    whole = mx.nd.array(x)
    whole.attach_grad()
    with autograd.record():
        out = ref(whole)
    out.backward(mx.nd.array(head))
    np.testing.assert_allclose(np.concatenate([o.asnumpy() for o in outs]), out.asnumpy(),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([p.grad.asnumpy() for p in parts]),
                               whole.grad.asnumpy(), rtol=1e-4, atol=1e-5)
    for name in ("running_mean", "running_var"):
        for c in ctx:           # every device holds the statistics of the whole batch
            np.testing.assert_allclose(getattr(sync, name).data(c).asnumpy(),
                                       getattr(ref, name).data().asnumpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=name)
    # the batch statistics of the whole batch, not of each device's half
    np.testing.assert_allclose(sync.running_mean.data(ctx[0]).asnumpy(), 0.1 * x.mean(axis=(0, 2, 3)),
                               rtol=1e-4, atol=1e-6)


def test_gluoncv_models_take_sync_batchnorm_as_norm_layer():
    net = model_zoo.get_model("resnet18_v1b", pretrained=False,
                              norm_layer=gluon.contrib.nn.SyncBatchNorm, norm_kwargs={"num_devices": 2})
    assert len(freeze_batchnorm(net)) == 20     # SyncBatchNorm layers are found like BatchNorm
    assert all(type(b).__name__ == "SyncBatchNorm" for b in [net.bn1, net.layer1[0].bn1])


def test_symbol_built_batchnorm_gets_gluons_initializers_whatever_the_default():
    data = mx.sym.var("data")
    symbol = mx.sym.BatchNorm(mx.sym.Convolution(data, num_filter=3, kernel=(1, 1), name="c"), name="bn")
    reference = gluon.nn.BatchNorm(in_channels=3)
    reference.initialize(mx.init.Uniform(5))
    for init in (mx.init.Uniform(), mx.init.Normal(2)):
        block = gluon.SymbolBlock(symbol, data)
        assert declare_norm_init(block) == ["bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"]
        block.initialize(init)
        block(mx.nd.zeros((1, 2, 2, 2)))
        params = block.collect_params()
        for ours, gluons in (("gamma", "gamma"), ("beta", "beta"), ("moving_mean", "running_mean"),
                             ("moving_var", "running_var")):
            assert_array_equal(params[f"bn_{ours}"].data().asnumpy(),
                               getattr(reference, gluons).data().asnumpy())
        assert declare_norm_init(block) == []          # declared once; Gluon layers keep theirs
    with pytest.raises(TypeError, match="takes a gluon Block, got Symbol"):
        declare_norm_init(symbol)
