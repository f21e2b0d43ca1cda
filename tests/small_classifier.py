"""A small classifier, its batches and a plain training loop: the twin runs that the
checkpoint, resume and trainer-state tests compare."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from gluonkit.split import split_and_load
from gluonkit.trainer import Trainer

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def make_net(ctx, hidden=8, extra=False, init_seed=1):
    mx.random.seed(init_seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(hidden, in_units=4, activation="relu"), gluon.nn.Dense(3, in_units=hidden))
    if extra:
        net.add(gluon.nn.Dense(3, in_units=3))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def make_trainer(net, accumulate=1, optimizer="sgd"):
    params = {"learning_rate": 0.1, "wd": 1e-3}
    if optimizer == "sgd":
        params["momentum"] = 0.9
    return Trainer(net.collect_params(), optimizer, params, accumulate=accumulate)


def batches(sizes, seed=7):
    rng = np.random.RandomState(seed)
    return [(rng.randn(n, 4).astype("float32"), rng.randint(0, 3, n).astype("int32")) for n in sizes]


def train(net, trainer, data, ctx):
    for x, y in data:
        xs, ys = split_and_load(x, ctx), split_and_load(y, ctx)
        with autograd.record():
            losses = [LOSS(net(a), b) for a, b in zip(xs, ys)]
        autograd.backward(losses)
        trainer.step(x.shape[0])


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
