"""Jobs whose workers hold shards that make different numbers of updates (every role runs this).

``python resume_job.py OUT_DIR uneven`` steps a Trainer through micro-batches of the sizes in
``MICRO_BATCHES[rank]`` (accumulate 2), then flushes, and saves ``worker{rank}.params``;
``uneven-first`` steps the first 3 only and saves a ``Checkpoint`` in mid-window into
``OUT_DIR/rank-{rank}``, which ``uneven-rest`` loads (by rank) before stepping the rest.

``python resume_job.py OUT_DIR fit|fit-dropout [EPOCHS [wait]]`` trains with ``fit`` (dropout in
the network with ``fit-dropout``) on shuffled shards of
``SHARDS`` samples (batch 16, accumulate 2) with ``ModelCheckpoint(OUT_DIR/checkpoints,
resume=True)``, printing ``worker R epoch E batch B`` after each batch (slowly, so that a
test can stop it mid-epoch), and saves ``final{rank}.params`` when training is over. With
``wait``, worker 0 of the launcher's first attempt prints ``worker 0 waits for a signal`` after
its first batch of epoch 2 (0-based epoch 1: inside an accumulation window) and waits there
until a signal asks it to stop (or the launcher ends it), so that a stop or a kill lands at
that point however slowly it comes.
"""
import logging
import os
import random
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit
from gluonkit.callbacks import Callback, ModelCheckpoint

ACCUMULATE = 2
MICRO_BATCHES = {0: [5, 3, 2, 7, 1, 4, 6], 1: [6, 1, 3]}   # rank 1 runs out of data in the second update
SHARDS = (80, 40)      # 5 and 3 batches of 16 per epoch
OPTIMIZER = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})


def data(samples):
    rng = np.random.RandomState(7)
    return rng.randn(samples, 4).astype("float32"), rng.randn(samples, 3).astype("float32")


def make_net(dropout=0.0):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="tanh"))
    if dropout:
        net.add(gluon.nn.Dropout(dropout))
    net.add(gluon.nn.Dense(3, in_units=8))
    return net


def loss_fn(out, y):
    return ((out - y) ** 2).sum(axis=1)


def rows(rank):
    """(begin, end) of each of ``rank``'s micro-batches: rank 0's first, consecutive."""
    begin = sum(sum(MICRO_BATCHES[r]) for r in range(rank))
    for size in MICRO_BATCHES[rank]:
        yield begin, begin + size
        begin += size


def uneven(out_dir, part="all"):
    kv = mx.kv.create("dist_sync")
    mx.random.seed(1000 + kv.rank)   # different initial weights: worker 0's are broadcast
    net = make_net()
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv,
                               accumulate=ACCUMULATE)
    if kv.rank == 0:
        net.save_parameters(os.path.join(out_dir, "initial.params"))
    x, y = data(sum(map(sum, MICRO_BATCHES.values())))
    checkpoint = gluonkit.Checkpoint(os.path.join(out_dir, f"rank-{kv.rank}"))
    batches = {"all": slice(None), "first": slice(3), "rest": slice(3, None)}[part]
    if part == "rest":
        checkpoint.load(net, trainer)        # this rank's parameters, optimizer states and pending window
    for begin, end in list(rows(kv.rank))[batches]:
        with autograd.record():
            loss = loss_fn(net(nd.array(x[begin:end])), nd.array(y[begin:end]))
        loss.backward()
        trainer.step(end - begin)
    if part == "first":
        checkpoint.save(net, trainer, epoch=0)   # one micro-batch pending on each worker
        return
    trainer.flush()   # takes part in rank 0's updates until it is out of data too
    net.save_parameters(os.path.join(out_dir, f"worker{kv.rank}.params"))


class _Slowly(Callback):
    """Print where the worker is after every batch, slowly enough to be stopped mid-epoch;
    with ``wait``, worker 0 of the first attempt waits for a signal (60 s at most) after batch 1
    of epoch 1."""

    def __init__(self, rank, wait=False):
        self.rank = rank
        self.wait = wait and os.environ.get("GLUONKIT_LAUNCH_ATTEMPT", "0") == "0"

    def on_batch_end(self, state):
        print(f"worker {self.rank} epoch {state.epoch} batch {state.batch}", flush=True)
        time.sleep(0.1)
        if self.wait and self.rank == 0 and (state.epoch, state.batch) == (1, 1):
            print("worker 0 waits for a signal", flush=True)
            deadline = time.monotonic() + 60
            while state.interrupted is None and time.monotonic() < deadline:
                time.sleep(0.01)


def fit(out_dir, epochs, dropout=0.0, wait=False):
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kv = mx.kv.create("dist_sync")
    random.seed(10 + kv.rank)        # each worker shuffles its shard in its own order; fit reseeds
    np.random.seed(10 + kv.rank)     # MXNet (dropout) from these two at every epoch
    mx.random.seed(10)
    net = make_net(dropout)
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv,
                               accumulate=ACCUMULATE)
    x, y = data(sum(SHARDS))
    begin = sum(SHARDS[:kv.rank])
    shard = gluon.data.ArrayDataset(x[begin:begin + SHARDS[kv.rank]], y[begin:begin + SHARDS[kv.rank]])
    loader = gluon.data.DataLoader(shard, batch_size=16, shuffle=True)
    checkpoints = ModelCheckpoint(os.path.join(out_dir, "checkpoints"), resume=True)
    gluonkit.fit(net, gluon.loss.L2Loss(), trainer, loader, epochs=epochs,
                 callbacks=[checkpoints, _Slowly(kv.rank, wait)], progress=False)
    net.save_parameters(os.path.join(out_dir, f"final{kv.rank}.params"))


if __name__ == "__main__":
    if sys.argv[2].startswith("uneven"):
        uneven(sys.argv[1], sys.argv[2].partition("-")[2] or "all")
    else:
        fit(sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 3, 0.3 if sys.argv[2] == "fit-dropout" else 0.0,
            sys.argv[4:] == ["wait"])
