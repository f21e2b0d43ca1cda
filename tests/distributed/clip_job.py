"""A distributed job for the clipping test: ``python clip_job.py OUT_DIR``, run by every role.

Two workers with uneven shards, ``accumulate=2``, ``clip_global_norm`` and ``on_nonfinite='skip'``;
worker 1 gives its counts as NDArrays, and one of its micro-batches in update 1 holds a NaN.
"""
import json
import os
import sys
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, nd

import gluonkit
from dist_job import (ACCUMULATE, OPTIMIZER, SIZES, loss_fn, make_net,  # noqa: F401 (SIZES: for the test)
                      micro_batches)

CLIP = 0.05
NAN_UPDATE = 1   # worker 1 puts a NaN into this update: every worker must drop it


def dataset():
    rng = np.random.RandomState(7)
    return rng.randn(64, 4).astype("float32"), 3 * rng.randn(64, 3).astype("float32")


def main(out_dir):
    kv = mx.kv.create("dist_sync")
    mx.random.seed(1000 + kv.rank)   # different initial weights: worker 0's are broadcast
    net = make_net()
    net.initialize(mx.init.Xavier())
    if kv.rank == 0:
        net.save_parameters(os.path.join(out_dir, "initial.params"))
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv,
                               accumulate=ACCUMULATE, clip_global_norm=CLIP, on_nonfinite="skip")
    x, y = dataset()
    applied, norms = [], []
    for update, rank, begin, end in micro_batches():
        if rank != kv.rank:
            continue
        data = x[begin:end].copy()
        if update == NAN_UPDATE and rank == 1:
            data[0, 0] = np.nan
        with autograd.record():
            loss = loss_fn(net(nd.array(data)), nd.array(y[begin:end]))
        loss.backward()
        count = nd.array([end - begin]) if rank == 1 else end - begin
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            updated = trainer.step(count)
        if trainer.pending[0] == 0:
            applied.append(updated)
            norms.append(trainer.global_norm)
    net.save_parameters(os.path.join(out_dir, f"worker{kv.rank}.params"))
    with open(os.path.join(out_dir, f"worker{kv.rank}.json"), "w") as f:
        json.dump({"applied": applied, "norms": norms, "skips": trainer.nonfinite_skips}, f)


if __name__ == "__main__":
    main(sys.argv[1])
