"""The program the distributed tests launch: every role runs it (servers stop at `import mxnet`).

``python dist_job.py OUT_DIR train [ARG...]`` trains with uneven shards and accumulation, and
records the extra arguments, its task id, working directory and ``GLUONKIT_JOB_NOTE``;
``python dist_job.py OUT_DIR split`` trains the same by ``allreduce_grads(); update(n)``, then
steps an NDArray count of 0 without a backward (see ``split``);
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
ZERO_UPDATES = 2


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


def split(out_dir):
    """``train``'s updates taken apart (``allreduce_grads(); update(n)``, each worker its own
    count, worker 1 as an NDArray), into ``worker{rank}.params``; then ``ZERO_UPDATES`` of two
    micro-batches ``x[4u:4u+4]`` each, but worker 1 gets no sample in its second and steps
    ``mx.nd.array([0])`` without a backward, into ``zero{rank}.params``."""
    kv = mx.kv.create("dist_sync")
    x, y = dataset()
    mx.random.seed(1000 + kv.rank)
    net = make_net()
    net.initialize(mx.init.Xavier())
    if kv.rank == 0:
        net.save_parameters(os.path.join(out_dir, "initial.params"))
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv,
                               accumulate=ACCUMULATE)
    for update in range(len(SIZES)):
        rows = [i for u, rank, begin, end in micro_batches() if u == update and rank == kv.rank
                for i in range(begin, end)]
        with autograd.record():
            loss = loss_fn(net(nd.array(x[rows])), nd.array(y[rows]))
        loss.backward()
        trainer.allreduce_grads()
        trainer.update(nd.array([len(rows)]) if kv.rank == 1 else len(rows))
    net.save_parameters(os.path.join(out_dir, f"worker{kv.rank}.params"))
    for update in range(ZERO_UPDATES):
        for second in (False, True):
            if second and kv.rank == 1:
                trainer.step(nd.array([0]))
                continue
            with autograd.record():
                loss = loss_fn(net(nd.array(x[4 * update:4 * update + 4])), nd.array(y[4 * update:4 * update + 4]))
            loss.backward()
            trainer.step(4)
    net.save_parameters(os.path.join(out_dir, f"zero{kv.rank}.params"))


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
    modes = {"train": train, "split": split, "slow": slow, "raise": lambda out: slow(out, fail_at=3),
             "exit": lambda out: slow(out, fail_at=3, how="exit"),
             "deaf": deaf,
             "first-step": lambda out: first_step(out, sys.argv[3])}
    modes[sys.argv[2]](sys.argv[1])
