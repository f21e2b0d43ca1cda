"""Counts by head against one large batch done the long way in Gluon: the loss
L = sum over heads of (sum of the head's per-sample losses) / (the head's count)."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

import gluonkit
from conftest import params_of
from gluonkit.nn import Branches

HEADS = ("main", "aux", "parity")
SGD = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
ADAM = ("adam", {"learning_rate": 0.01, "wd": 0.001})


class ThreeHeads(Branches):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential()
            self.trunk.add(gluon.nn.Dense(8, in_units=5, activation="tanh"))
            self.add("main", gluon.nn.Dense(4, in_units=8))
            self.add("aux", gluon.nn.Dense(3, in_units=8))
            self.add("parity", gluon.nn.Dense(2, in_units=8))


def _twins(ctx_list):
    ref, net = ThreeHeads(), ThreeHeads()
    ref.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net.initialize(ctx=ctx_list)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        b.set_data(a.data())
    return ref, net


def _data(n, seed, absent=()):
    """Inputs, labels by head and 0/1 masks by head (a head in ``absent`` has no label at all)."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 5).astype("float32")
    labels = {"main": rng.randint(0, 4, n), "aux": rng.randint(0, 3, n), "parity": rng.randint(0, 2, n)}
    masks = {"main": np.ones(n), "aux": (rng.rand(n) < 0.6) * 1.0, "parity": (rng.rand(n) < 0.3) * 1.0}
    for head in absent:
        masks[head] = np.zeros(n)
    return x, labels, masks


_CE = gluon.loss.SoftmaxCrossEntropyLoss()


def _losses(net, x, labels, masks):
    """Per-sample losses by head, times the head's mask (a sample without the label adds 0)."""
    outputs = dict(zip(HEADS, net(nd.array(x, ctx=_ctx(net)))))
    return {h: _CE(outputs[h], nd.array(labels[h], ctx=_ctx(net))) * nd.array(masks[h], ctx=_ctx(net))
            for h in HEADS}


def _ctx(net):
    return next(iter(net.collect_params().values())).list_ctx()[0]


def _big_batch(ref, trainer, batches):
    """The reference: one large batch of every micro-batch, the loss L, plain gluon.Trainer.step(1)."""
    x = np.concatenate([b[0] for b in batches])
    labels = {h: np.concatenate([b[1][h] for b in batches]) for h in HEADS}
    masks = {h: np.concatenate([b[2][h] for b in batches]) for h in HEADS}
    with autograd.record():
        losses = _losses(ref, x, labels, masks)
        loss = nd.add_n(*(losses[h].sum() / masks[h].sum() for h in HEADS if masks[h].sum() > 0))
    loss.backward()
    trainer.step(1, ignore_stale_grad=True)   # a head of count 0 got no gradient: no update at all


def _slice(batch, ctx_list):
    """One micro-batch split over the devices (unevenly when it does not divide)."""
    x, labels, masks = batch
    bounds = np.linspace(0, len(x), len(ctx_list) + 1).astype(int)
    return [(x[a:b], {h: labels[h][a:b] for h in HEADS}, {h: masks[h][a:b] for h in HEADS})
            for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _window(net, trainer, batches, ctx_list):
    """Run one window micro-batch by micro-batch with counts by head; the results of step."""
    trainer.begin_window({h: sum(b[2][h].sum() for b in batches) for h in HEADS})
    applied = []
    for batch in batches:
        parts = _slice(batch, ctx_list)
        with autograd.record():
            losses = [trainer.window_loss(_losses_on(net, part, ctx)) for part, ctx in zip(parts, ctx_list)]
        autograd.backward(losses)
        applied.append(trainer.step({h: batch[2][h].sum() for h in HEADS}))
    return applied


def _losses_on(net, part, ctx):
    x, labels, masks = part
    outputs = dict(zip(HEADS, net(nd.array(x, ctx=ctx))))
    return {h: _CE(outputs[h], nd.array(labels[h], ctx=ctx)) * nd.array(masks[h], ctx=ctx) for h in HEADS}


def _assert_same(ref, net):
    expected, actual = params_of(ref), params_of(net)
    for name in expected:
        assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("optimizer", [SGD, ADAM], ids=["sgd-momentum-wd", "adam"])
def test_counts_by_head_equal_one_large_batch(ctx_list, optimizer):
    ref, net = _twins(ctx_list)
    ref_trainer = gluon.Trainer(ref.collect_params(), *optimizer)
    trainer = gluonkit.Trainer(net.collect_params(), *optimizer, accumulate=3)
    for window in range(2):   # two updates: the optimizer states carry over
        # three heads of different counts, 'parity' absent from the second micro-batch
        batches = [_data(7, 10 * window), _data(4, 10 * window + 1, absent=("parity",)), _data(9, 10 * window + 2)]
        assert _window(net, trainer, batches, ctx_list) == [False, False, True]
        _big_batch(ref, ref_trainer, batches)
        _assert_same(ref, net)
