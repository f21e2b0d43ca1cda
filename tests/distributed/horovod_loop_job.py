"""A loop of one's own on Horovod ranks: ``python horovod_loop_job.py OUT_DIR``.

``gluonkit.Trainer(kvstore='horovod', accumulate=2)``, 9 steps of uneven micro-batches (rank 1
gets no sample in every third one and calls ``step(0)`` without a backward), ``flush()``, which
applies the last, partial window, then rank 0 reads its parameters and saves them while the
other ranks leave at once.
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit

ACCUMULATE = 2
STEPS = 9
OPTIMIZER = ("sgd", {"learning_rate": 0.05, "momentum": 0.9})


def size(rank, step):
    """Samples of ``rank`` in micro-batch ``step``: rank 1 gets none in every third."""
    return 0 if rank == 1 and step % 3 == 2 else 3 + (step + rank) % 4


def batch(rank, step):
    """That micro-batch's samples, the same wherever it is made."""
    rng = np.random.RandomState(100 * rank + step)
    n = size(rank, step)
    return rng.randn(n, 16).astype("float32"), rng.randn(n, 4).astype("float32")


def make_net():
    mx.random.seed(5)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, in_units=16, activation="relu"), gluon.nn.Dense(64, in_units=64, activation="relu"),
            gluon.nn.Dense(4, in_units=64))
    net.initialize(mx.init.Xavier())
    return net


def loss_fn(out, y):
    return ((out - y) ** 2).sum()


def main(out_dir):
    net = make_net()
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore="horovod",
                               accumulate=ACCUMULATE)
    rank = trainer.rank
    for step in range(STEPS):
        x, y = batch(rank, step)
        if len(x):
            with autograd.record():
                loss = loss_fn(net(nd.array(x)), nd.array(y))
            loss.backward()
        trainer.step(len(x))
    trainer.flush()
    if rank == 0:
        net.save_parameters(os.path.join(out_dir, "rank0.params"))


if __name__ == "__main__":
    main(sys.argv[1])
