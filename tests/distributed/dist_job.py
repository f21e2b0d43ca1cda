"""The program the distributed tests launch: every role runs it (servers stop at `import mxnet`).

``python dist_job.py OUT_DIR train [ARG...]`` trains with uneven shards and accumulation, and
records the extra arguments, its task id, working directory and ``GLUONKIT_JOB_NOTE``;
``python dist_job.py OUT_DIR slow`` steps slowly for a long time (for fault tests);
``python dist_job.py OUT_DIR raise`` steps slowly, and worker 1 raises at its third step
(``exit``: calls ``sys.exit`` with a message there); ``deaf`` steps slowly ignoring SIGTERM;
``python dist_job.py OUT_DIR first-step T0`` takes one step (on kvstore 'local' when not
launched) and records the seconds since the time stamp ``T0``.
"""
import json
import os
import signal
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit

ACCUMULATE = 2
# SIZES[update][rank] = micro-batch sizes of that worker in that update: uneven on purpose
SIZES = [[(5, 3), (2, 7)], [(1, 4), (6, 6)], [(9, 2), (1, 1)]]


def dataset():
    """The same 64 samples on every worker."""
    rng = np.random.RandomState(42)
    return rng.randn(64, 4).astype("float32"), rng.randn(64, 3).astype("float32")


def micro_batches():
    """(update, rank, begin, end) of every micro-batch, consecutive over the data."""
    begin = 0
    for update, per_rank in enumerate(SIZES):
        for rank, sizes in enumerate(per_rank):
            for size in sizes:
                yield update, rank, begin, begin + size
                begin += size


def make_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=8))
    return net


def loss_fn(out, y):
    return ((out - y) ** 2).sum(axis=1)


OPTIMIZER = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})


def train(out_dir):
    kv = mx.kv.create("dist_sync")
    mx.random.seed(1000 + kv.rank)  # different initial weights: the Trainer must broadcast worker 0's
    net = make_net()
    net.initialize(mx.init.Xavier())
    if kv.rank == 0:
        net.save_parameters(os.path.join(out_dir, "initial.params"))
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv,
                               accumulate=ACCUMULATE)
    x, y = dataset()
    for update, rank, begin, end in micro_batches():
        if rank != kv.rank:
            continue
        with autograd.record():
            loss = loss_fn(net(nd.array(x[begin:end])), nd.array(y[begin:end]))
        loss.backward()
        trainer.step(end - begin)
    net.save_parameters(os.path.join(out_dir, f"worker{kv.rank}.params"))
    with open(os.path.join(out_dir, f"worker{kv.rank}.json"), "w") as f:
        json.dump({"argv": sys.argv[3:], "task_id": os.environ.get("DMLC_TASK_ID"), "cwd": os.getcwd(),
                   "note": os.environ.get("GLUONKIT_JOB_NOTE")}, f)


def slow(out_dir, fail_at=None, how="raise"):
    kv = mx.kv.create("dist_sync")
    net = make_net()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", kvstore=kv)
    x, y = dataset()
    for step in range(600):
        with autograd.record():
            loss = loss_fn(net(nd.array(x[:4])), nd.array(y[:4]))
        loss.backward()
        trainer.step(4)
        print(f"worker {kv.rank} step {step}", flush=True)
        if kv.rank == 1 and step == fail_at:
            if how == "raise":
                raise ValueError(f"worker 1 gives up at step {step}")
            try:   # a command's one-line error: the clean-up runs, then the process ends at once
                sys.exit(f"worker 1 gives up at step {step}")
            finally:
                open(os.path.join(out_dir, "cleaned-up"), "w").close()
        time.sleep(0.1)


def deaf(out_dir):
    """``slow``, ignoring SIGTERM."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    slow(out_dir)


def first_step(out_dir, t0):
    kv = mx.kv.create("dist_sync" if "DMLC_ROLE" in os.environ else "local")
    net = make_net()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", kvstore=kv)
    x, y = dataset()
    with autograd.record():
        loss = loss_fn(net(nd.array(x[:4])), nd.array(y[:4]))
    loss.backward()
    trainer.step(4)
    nd.waitall()
    with open(os.path.join(out_dir, f"first-step{kv.rank}.json"), "w") as f:
        json.dump({"seconds": time.time() - float(t0)}, f)


if __name__ == "__main__":
    modes = {"train": train, "slow": slow, "raise": lambda out: slow(out, fail_at=3),
             "exit": lambda out: slow(out, fail_at=3, how="exit"),
             "deaf": deaf,
             "first-step": lambda out: first_step(out, sys.argv[3])}
    modes[sys.argv[2]](sys.argv[1])
