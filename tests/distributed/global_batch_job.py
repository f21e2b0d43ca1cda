"""Training on global batches (every role runs this; servers stop at ``import mxnet``).

``python global_batch_job.py OUT_DIR loop|fit`` trains a network with BatchNorm on the global
batches of ``GlobalBatchSampler`` (global batch 12, micro-batches of 4, 50 samples: the last
global batch holds one micro-batch of 2), each sample jittered from NumPy's generator, and
saves ``final{rank}.params``. ``loop`` is a hand-written loop, ``fit`` uses ``fit`` with
``MergeRunningStatistics``. Run without ``DMLC_ROLE`` it is one process (``train``).
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit
from gluonkit.callbacks import MergeRunningStatistics
from gluonkit.data import global_loader

SAMPLES, BATCH, MICRO = 50, 12, 4
EPOCHS = 2
OPTIMIZER = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})


class Jittered(gluon.data.Dataset):
    """Fixed features plus noise drawn from NumPy's generator (seeded per sample by the loader)."""

    def __init__(self):
        rng = np.random.RandomState(3)
        self.x = rng.randn(SAMPLES, 4).astype("float32")
        self.y = rng.randint(0, 3, SAMPLES).astype("float32")

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return self.x[i] + 0.1 * np.random.randn(4).astype("float32"), self.y[i]


def make_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, use_bias=False), gluon.nn.BatchNorm(in_channels=8, momentum=0.8),
            gluon.nn.Activation("tanh"), gluon.nn.Dense(3, in_units=8))
    return net


def train(out_dir, mode, kvstore="device"):
    """Train; returns the network. ``kvstore`` 'device' is one process."""
    kv = mx.kv.create(kvstore) if kvstore.startswith("dist") else kvstore
    rank, workers = (kv.rank, kv.num_workers) if kvstore.startswith("dist") else (0, 1)
    mx.random.seed(1000 + rank)   # different initial weights: the Trainer broadcasts worker 0's
    net = make_net()
    net.initialize(mx.init.Xavier())
    loader = global_loader(Jittered(), BATCH, MICRO, rank, workers, seed=5)
    sampler = loader.batch_sampler.sampler
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv,
                               accumulate=sampler.accumulate)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if mode == "fit":
        gluonkit.fit(net, loss_fn, trainer, loader, epochs=EPOCHS, progress=False,
                     callbacks=[MergeRunningStatistics(sampler)])
    else:
        for _ in range(EPOCHS):
            for x, y in loader:
                with autograd.record():
                    loss = loss_fn(net(x), y)
                loss.backward()
                trainer.step(x.shape[0])
            trainer.flush()
    if out_dir:
        net.save_parameters(os.path.join(out_dir, f"final{rank}.params"))
    return net


if __name__ == "__main__":
    train(sys.argv[1], sys.argv[2], "dist_sync")
