"""A job for the counts-by-head tests: ``python heads_job.py OUT_DIR dist_sync|horovod``.

Two workers with uneven shards train a three-headed network with ``accumulate=2`` and counts
by head; worker 1 has no data in the last update (its ``flush`` takes part in worker 0's last
window), gives its counts as NDArrays, and holds its micro-batches on two devices. Every
sample has the 'main' label, some the 'aux' or the 'parity' one (seeded masks).
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit
from gluonkit.nn import Branches

ACCUMULATE = 2
HEADS = ("main", "aux", "parity")
OPTIMIZER = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
# SIZES[update][rank] = micro-batch sizes of that worker in that update: uneven on purpose
SIZES = [[(5, 3), (2, 7)], [(1, 4), (6, 6)], [(9, 2), ()]]
CE = gluon.loss.SoftmaxCrossEntropyLoss()


class ThreeHeads(Branches):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential()
            self.trunk.add(gluon.nn.Dense(8, in_units=5, activation="tanh"))
            self.add("main", gluon.nn.Dense(4, in_units=8))
            self.add("aux", gluon.nn.Dense(3, in_units=8))
            self.add("parity", gluon.nn.Dense(2, in_units=8))


def dataset():
    """The same samples on every worker: inputs, labels and 0/1 masks by head."""
    rng = np.random.RandomState(3)
    n = 64
    x = rng.randn(n, 5).astype("float32")
    labels = {"main": rng.randint(0, 4, n), "aux": rng.randint(0, 3, n), "parity": rng.randint(0, 2, n)}
    masks = {"main": np.ones(n), "aux": (rng.rand(n) < 0.5) * 1.0, "parity": (rng.rand(n) < 0.2) * 1.0}
    return x, labels, masks


def micro_batches():
    """(update, rank, begin, end) of every micro-batch, consecutive over the data."""
    begin = 0
    for update, per_rank in enumerate(SIZES):
        for rank, sizes in enumerate(per_rank):
            for size in sizes:
                yield update, rank, begin, begin + size
                begin += size


def losses(net, x, labels, masks, rows, ctx):
    """The per-sample losses by head of ``rows`` on ``ctx``, times the heads' masks."""
    outputs = dict(zip(HEADS, net(nd.array(x[rows], ctx=ctx))))
    return {h: CE(outputs[h], nd.array(labels[h][rows], ctx=ctx)) * nd.array(masks[h][rows], ctx=ctx) for h in HEADS}


def main(out_dir, engine):
    kvstore = mx.kv.create("dist_sync") if engine == "dist_sync" else "horovod"
    if engine == "horovod":
        import horovod.mxnet as hvd
        hvd.init()
        rank = hvd.rank()
    else:
        rank = kvstore.rank
    ctx = [mx.cpu(0), mx.cpu(1)] if rank == 1 else [mx.cpu(0)]
    mx.random.seed(1000 + rank)   # different initial weights: worker 0's are broadcast
    net = ThreeHeads()
    net.initialize(mx.init.Xavier(), ctx=ctx)
    if rank == 0:
        net.save_parameters(os.path.join(out_dir, "initial.params"))
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kvstore,
                               accumulate=ACCUMULATE)
    x, labels, masks = dataset()
    mine = [(u, b, e) for u, r, b, e in micro_batches() if r == rank]
    for update in sorted({u for u, _, _ in mine}):
        window = [(b, e) for u, b, e in mine if u == update]
        trainer.begin_window({h: masks[h][window[0][0]:window[-1][1]].sum() for h in HEADS})
        for begin, end in window:
            parts = np.array_split(np.arange(begin, end), len(ctx))
            with autograd.record():
                weighed = [trainer.weigh_losses(losses(net, x, labels, masks, rows, c))
                           for rows, c in zip(parts, ctx) if len(rows)]
            autograd.backward(weighed)
            counts = {h: masks[h][begin:end].sum() for h in HEADS}
            trainer.step({h: nd.array([n]) for h, n in counts.items()} if rank == 1 else counts)
    trainer.flush()
    net.save_parameters(os.path.join(out_dir, f"worker{rank}.params"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
