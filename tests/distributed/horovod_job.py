"""The program the Horovod tests start under horovodrun: ``python horovod_job.py OUT_DIR``.

Every rank starts from its own seed (rank 0's weights must reach the others), trains with
``accumulate=2``, ``clip_global_norm`` and ``on_nonfinite='skip'`` on micro-batches of uneven
sizes, some of them empty on some ranks (the rank then calls ``step(0)`` without a backward).
Rank 1 holds two devices (its micro-batches split over cpu(0) and cpu(1)). Each sample has a weight; the loss is the weighted sum and the count the sum of the weights:
rank 0 gives it as a float, rank 1 as an NDArray, rank 2 (weights 1) as an int. One
micro-batch of rank 1 holds a NaN in update ``NAN_UPDATE``: every rank must drop that update.
"""
import json
import os
import sys
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit

ACCUMULATE = 2
CLIP = 0.05
NAN_UPDATE = 1
OPTIMIZER = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
# SIZES[ranks][update][rank] = micro-batch sizes of that rank in that update; 0: no sample
SIZES = {2: [[(5, 0), (2, 7)], [(0, 4), (6, 6)], [(9, 2), (1, 0)]],
         3: [[(5, 0), (2, 7), (3, 3)], [(0, 4), (6, 6), (1, 0)], [(9, 2), (1, 0), (0, 5)]]}


def dataset():
    """The same 64 samples on every rank."""
    rng = np.random.RandomState(7)
    return rng.randn(64, 4).astype("float32"), 3 * rng.randn(64, 3).astype("float32")


def weights(rank, begin, end):
    """The samples' weights: 1 on rank 2 (an int count), fractions elsewhere."""
    if rank == 2:
        return np.ones(end - begin, dtype="float32")
    return (0.5 + 0.25 * (np.arange(begin, end) % 4)).astype("float32")


def micro_batches(ranks):
    """(update, rank, begin, end) of every micro-batch, consecutive over the data."""
    begin = 0
    for update, per_rank in enumerate(SIZES[ranks]):
        for rank, sizes in enumerate(per_rank):
            for size in sizes:
                yield update, rank, begin, begin + size
                begin += size


def make_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=8))
    return net


def loss_fn(out, y, w):
    return ((out - y) ** 2).sum(axis=1) * w


def count_of(rank, w):
    """The sum of the weights as rank ``rank`` gives it: a float, an NDArray or an int."""
    if rank == 1:
        return nd.array([w.sum()], dtype="float64")
    return int(w.sum()) if rank == 2 else float(w.sum())


def main(out_dir):
    mx.random.seed(1000 + int(os.environ["HOROVOD_RANK"]))   # rank 0's weights must be broadcast
    ctx = [mx.cpu(0), mx.cpu(1)] if os.environ["HOROVOD_RANK"] == "1" else [mx.cpu(0)]
    net = make_net()
    net.initialize(mx.init.Xavier(), ctx=ctx)
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore="horovod",
                               accumulate=ACCUMULATE, clip_global_norm=CLIP, on_nonfinite="skip")
    rank, ranks = trainer.rank, trainer.num_workers
    if rank == 0:
        net.save_parameters(os.path.join(out_dir, "initial.params"))
    x, y = dataset()
    applied, norms = [], []
    for update, owner, begin, end in micro_batches(ranks):
        if owner != rank:
            continue
        w = weights(rank, begin, end)
        if end > begin:
            data = x[begin:end].copy()
            if update == NAN_UPDATE and rank == 1 and end - begin == 6:
                data[0, 0] = np.nan
            parts = zip(*(gluonkit.split_and_load(a, ctx) for a in (data, y[begin:end], w)))
            with autograd.record():
                losses = [loss_fn(net(xs), ys, ws) for xs, ys, ws in parts]
            autograd.backward(losses)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            updated = trainer.step(count_of(rank, w))
        if trainer.pending[0] == 0:
            applied.append(updated)
            norms.append(trainer.global_norm)
    net.save_parameters(os.path.join(out_dir, f"rank{rank}.params"))
    deferred_step(out_dir, rank, x, y)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"applied": applied, "norms": norms, "skips": trainer.nonfinite_skips, "ranks": ranks}, f)


def deferred_step(out_dir, rank, x, y):
    """One update of a network initialized at its first forward, from each rank's own seed:
    rank 0's weights reach the others at that first update."""
    mx.random.seed(2000 + rank)
    net = gluon.nn.Dense(3)
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="horovod")
    rows = slice(4 * rank, 4 * rank + 4)
    with autograd.record():
        loss = loss_fn(net(nd.array(x[rows])), nd.array(y[rows]), nd.ones(4))
    loss.backward()
    net.save_parameters(os.path.join(out_dir, f"rank{rank}-deferred-initial.params"))
    trainer.step(4)
    net.save_parameters(os.path.join(out_dir, f"rank{rank}-deferred.params"))


if __name__ == "__main__":
    main(sys.argv[1])
