"""Clipping under 'ignore' folds the clip factor, computed on the device, into the update.

The reference is plain Gluon clipping the long way: the gradients summed over the devices,
their norm read on the host, each gradient multiplied by min(1, clip / norm), then
``gluon.Trainer.update``. SGD takes the factor into its multi-tensor kernels' learning rates
and weight decays; other optimizers, ``clip_gradient`` and float64 weights scale the gradients
first. Every case must give Gluon's parameters to float32 (float16) rounding.
"""
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

import gluonkit

RNG = np.random.RandomState(7)
X = RNG.randn(6, 5)
Y = RNG.randn(6)
CLIP = 0.05   # below every gradient norm met here: each update is clipped
TWO = [mx.cpu(0), mx.cpu(1)]


class Elementwise(gluon.HybridBlock):
    """sum(tanh(x * a) * b) + c per sample: no matrix product, so it also runs in float16 on CPU."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.a = self.params.get("a_weight", shape=(1, 5), init=mx.init.Uniform(1.0))
            self.b = self.params.get("b_weight", shape=(1, 5), init=mx.init.Uniform(1.0))
            self.c = self.params.get("c_bias", shape=(1,), init=mx.init.Constant(0.3))

    def hybrid_forward(self, F, x, a, b, c):
        return F.broadcast_add(F.sum(F.broadcast_mul(F.tanh(F.broadcast_mul(x, a)), b), axis=1), c)


def _twins(ctx, dtype, mults):
    nets = []
    for _ in range(2):
        net = Elementwise()
        net.initialize(ctx=ctx)
        net.cast(dtype)
        nets.append(net)
    for a, b in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        b.set_data(a.data(ctx[0]))
        if mults:
            for p in (a, b):
                p.lr_mult, p.wd_mult = {"a_weight": (0.5, 2.0), "c_bias": (2.0, 1.0)}.get(p.name[-8:], (1.0, 1.0))
    return nets


def _backward(net, ctx, lo, hi, dtype):
    xs = gluonkit.split_and_load(nd.array(X[lo:hi], dtype=dtype), ctx)
    ys = gluonkit.split_and_load(nd.array(Y[lo:hi], dtype=dtype), ctx)
    with autograd.record():
        losses = [((net(x) - y) ** 2) * 10 for x, y in zip(xs, ys)]
    autograd.backward(losses)


def _gluon_clipped_update(trainer, params, count, clip):
    """Gluon's way: sum over devices, read the norm, scale every copy, update by the count."""
    trainer.allreduce_grads()
    copies = [p.list_grad() for p in params]
    norm = math.sqrt(sum(float((g[0].astype("float64") ** 2).sum().asscalar()) for g in copies)) / count
    if norm > clip:
        for grads in copies:
            for g in grads:
                g *= clip / norm
    trainer.update(count)
    return norm


def _optimizer(name, options, scheduled):
    options = dict(options)
    if scheduled:
        options["lr_scheduler"] = mx.lr_scheduler.FactorScheduler(step=1, factor=0.7, base_lr=options["learning_rate"])
    return name, options


SGD = {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-2}
# case: (optimizer, options, lr scheduler, lr_mult/wd_mult, dtype, contexts, accumulate, NDArray count)
CASES = {
    "momentum+wd, 1ctx": ("sgd", SGD, False, False, "float32", [mx.cpu(0)], 1, False),
    "momentum+wd+mults, 2ctx": ("sgd", SGD, False, True, "float32", TWO, 1, False),
    "no momentum, scheduler, accumulate 3": ("sgd", {"learning_rate": 0.1, "wd": 1e-2}, True, False, "float32",
                                             [mx.cpu(0)], 3, False),
    "scheduler+mults, 2ctx, accumulate 2, NDArray count": ("sgd", SGD, True, True, "float32", TWO, 2, True),
    "float16 master weights, 2ctx, accumulate 2": ("sgd", dict(SGD, multi_precision=True), False, True, "float16",
                                                   TWO, 2, False),
    "float16 master weights, no momentum": ("sgd", {"learning_rate": 0.1, "wd": 1e-2, "multi_precision": True},
                                            True, False, "float16", [mx.cpu(0)], 1, True),
    "float16 weights, no master copy": ("sgd", SGD, False, False, "float16", [mx.cpu(0)], 1, False),
    "clip_gradient (scales each gradient)": ("sgd", dict(SGD, clip_gradient=0.02), False, False, "float32", TWO, 1,
                                             False),
    "float64 (scales each gradient)": ("sgd", SGD, True, True, "float64", [mx.cpu(0)], 2, False),
    "adam (scales each gradient)": ("adam", {"learning_rate": 0.01, "wd": 1e-2}, False, True, "float32", TWO, 1,
                                    True),
}


@pytest.mark.filterwarnings("ignore:Accumulating with float16:UserWarning")   # MXNet warns of that case itself
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_clipping_on_the_device_equals_gluon_clipping_on_the_host(case):
    name, options, scheduled, mults, dtype, ctx, accumulate, as_array = case
    ref, net = _twins(ctx, dtype, mults)
    trainer = gluonkit.Trainer(net.collect_params(), *_optimizer(name, options, scheduled), accumulate=accumulate,
                               clip_global_norm=CLIP)
    plain = gluon.Trainer(ref.collect_params(), *_optimizer(name, options, scheduled), update_on_kvstore=False)
    if accumulate > 1:
        for p in ref.collect_params().values():
            p.grad_req = "add"
    bounds = np.linspace(0, len(X), accumulate + 1).astype(int)
    start = {p.name: p.data(ctx[0]).asnumpy() for p in ref.collect_params().values()}
    for _ in range(4):
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            _backward(net, ctx, lo, hi, dtype)
            trainer.step(nd.array([hi - lo], ctx=ctx[-1]) if as_array else hi - lo)
            _backward(ref, ctx, lo, hi, dtype)
        norm = _gluon_clipped_update(plain, list(ref.collect_params().values()), len(X), CLIP)
        ref.collect_params().zero_grad()
        assert norm > CLIP
        assert trainer.global_norm == pytest.approx(norm, rel=1e-3 if dtype == "float16" else 1e-5)
    # float64 weights: the norm's sum of squares is float32 (multi_sum_sq)
    tolerance = {"float16": (2e-3, 1e-3), "float32": (1e-5, 1e-7), "float64": (1e-7, 1e-9)}[dtype]
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        assert not np.array_equal(b.data(ctx[0]).asnumpy(), start[a.name]), a.name
        for c in ctx:
            assert_allclose(b.data(c).asnumpy().astype("float64"), a.data(c).asnumpy().astype("float64"),
                            rtol=tolerance[0], atol=tolerance[1], err_msg=f"{a.name} on {c}")


def test_a_clip_factor_below_1e_30_keeps_weight_decay_and_momentum():
    """A gradient norm 1e45 times the clip: the factor is taken as 1e-30, so the folded weight
    decay wd / factor stays finite and the update is Gluon's (weight decay and momentum only)."""
    ref, net = _twins([mx.cpu(0)], "float32", False)
    clip = 1e-45
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(SGD), clip_global_norm=clip)
    plain = gluon.Trainer(ref.collect_params(), "sgd", dict(SGD), update_on_kvstore=False)
    for _ in range(3):
        _backward(net, [mx.cpu(0)], 0, 6, "float32")
        trainer.step(6)
        _backward(ref, [mx.cpu(0)], 0, 6, "float32")
        _gluon_clipped_update(plain, list(ref.collect_params().values()), 6, clip)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        assert np.isfinite(b.data().asnumpy()).all()
        assert_allclose(b.data().asnumpy(), a.data().asnumpy(), rtol=1e-6, atol=1e-8, err_msg=a.name)


def test_the_norm_is_measured_on_new_gradient_arrays_after_a_reinitialization():
    """The grouping of the gradients is kept between updates; parameters initialized again get
    new gradient arrays, and the next update's norm is theirs (as NumPy computes it)."""
    net = Elementwise()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(SGD), clip_global_norm=CLIP)
    for scale in (1.0, 3.0):
        if scale != 1.0:
            net.initialize(mx.init.Constant(scale), force_reinit=True)
        _backward(net, [mx.cpu(0)], 0, 6, "float32")
        expected = math.sqrt(sum((p.grad().asnumpy().astype("float64") ** 2).sum()
                                 for p in net.collect_params().values())) / 6
        trainer.step(6)
        assert trainer.global_norm == pytest.approx(expected, rel=1e-6)
