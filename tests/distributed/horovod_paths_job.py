"""The program the tests of the Trainer's other Horovod paths start: ``python horovod_paths_job.py OUT_DIR``.

On every rank, from the same initial weights, with uneven local data (rank 1 gets fewer samples):

- ``split-OPT.params``: ``allreduce_grads(); update(n)`` with each rank's own count ``n``;
  ``step-OPT.params``: ``step(n)``, the same loop (OPT: sgd, adam);
- ``nlp-OPT-kit.params`` / ``nlp-OPT-stock.params``: GluonNLP's loop (``allreduce_grads()``,
  ``gluon.utils.clip_global_norm`` on the gradients, ``update(float)``) on ``gluonkit.Trainer``
  and on ``hvd.DistributedTrainer``; ``fp16-OPT-...``: the same with
  ``compression=hvd.Compression.fp16, gradient_predivide_factor=2``;
- ``zero-array.params`` / ``zero-number.params``: ``accumulate=2``, rank 1 gets no sample in
  one micro-batch and steps ``mx.nd.array([0])`` (or ``0``) without a backward;
- ``report-RANK.json``: the warning of a Trainer without kvstore, the refusal of checkpoints
  saved at different updates (rank 0 after 2 updates, the others after 1), and what each rank
  says when rank 1 has no checkpoint to resume from.
"""
import json
import os
import sys
import warnings

import horovod.mxnet as hvd
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd

import gluonkit

UPDATES = 3
SIZES = (7, 3, 5)           # local samples per update, by rank
OPTIMIZERS = {"sgd": {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}, "adam": {"learning_rate": 0.01}}
CLIP = 0.5


def dataset():
    """The same 64 samples on every rank."""
    rng = np.random.RandomState(3)
    return rng.randn(64, 4).astype("float32"), rng.randn(64, 3).astype("float32")


def rows(rank, ranks, update):
    """The rows of ``rank`` in ``update``: consecutive over the data, rank by rank."""
    begin = update * sum(SIZES[:ranks]) + sum(SIZES[:rank])
    return slice(begin, begin + SIZES[rank])


def make_net(ctx=None):
    """The network, with the same initial weights on every rank (seeded)."""
    mx.random.seed(11)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=ctx or mx.cpu())
    return net


def backward(net, x, y):
    with autograd.record():
        loss = ((net(nd.array(x)) - nd.array(y)) ** 2).sum()
    loss.backward()


def split_and_step(out_dir, rank, ranks, optimizer):
    x, y = dataset()
    for path in ("split", "step"):
        net = make_net()
        trainer = gluonkit.Trainer(net.collect_params(), optimizer, dict(OPTIMIZERS[optimizer]), kvstore="horovod")
        for update in range(UPDATES):
            part = rows(rank, ranks, update)
            backward(net, x[part], y[part])
            if path == "split":
                trainer.allreduce_grads()
                trainer.update(SIZES[rank])
            else:
                trainer.step(SIZES[rank])
        net.save_parameters(os.path.join(out_dir, f"{path}-{optimizer}-{rank}.params"))


def gluonnlp_loop(out_dir, rank, ranks, name, optimizer, **options):
    """GluonNLP's update taken apart: the loss normalized by hand, then clip and update(1.0)."""
    x, y = dataset()
    for kind in ("kit", "stock"):
        net = make_net()
        params = net.collect_params()
        settings = dict(OPTIMIZERS[optimizer])
        if kind == "kit":
            trainer = gluonkit.Trainer(params, optimizer, settings, kvstore="horovod", **options)
        else:
            trainer = hvd.DistributedTrainer(params, optimizer, settings, **options)
        for update in range(UPDATES):
            part = rows(rank, ranks, update)
            with autograd.record():
                loss = ((net(nd.array(x[part])) - nd.array(y[part])) ** 2).sum() / sum(SIZES[:ranks])
            loss.backward()
            trainer.allreduce_grads()
            gluon.utils.clip_global_norm([p.grad() for p in params.values()], CLIP * ranks)
            trainer.update(1.0)
        net.save_parameters(os.path.join(out_dir, f"{name}-{kind}-{rank}.params"))


def zero_counts(out_dir, rank, ranks):
    """Rank 1's second micro-batch of each update is empty: it steps 0 without a backward."""
    x, y = dataset()
    for kind, zero in (("array", nd.array([0])), ("number", 0)):
        net = make_net()
        trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPTIMIZERS["sgd"]), kvstore="horovod",
                                   accumulate=2)
        for update in range(UPDATES):
            part = rows(rank, ranks, update)
            backward(net, x[part], y[part])
            trainer.step(SIZES[rank])
            if rank == 1:
                trainer.step(zero)
            else:
                backward(net, x[part][:2], y[part][:2])
                trainer.step(2)
        net.save_parameters(os.path.join(out_dir, f"zero-{kind}-{rank}.params"))


def forgotten_kvstore():
    """The warning a Trainer created without a kvstore gives on a rank."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gluonkit.Trainer(make_net().collect_params(), "sgd")
    return [str(w.message) for w in caught]


def resume_from_different_updates(out_dir, rank):
    """Rank 0 saves after 2 updates, the others after 1; every rank then loads its own."""
    x, y = dataset()
    net = make_net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="horovod")
    checkpoint = gluonkit.Checkpoint(os.path.join(out_dir, f"checkpoints-{rank}"))
    for update in range(2):
        backward(net, x[:4], y[:4])
        trainer.step(4)
        if update == 0 and rank > 0 or update == 1 and rank == 0:
            checkpoint.save(net, trainer, epoch=1)
    before = net[0].weight.data().asnumpy()
    try:
        checkpoint.load(net, trainer)
    except gluonkit.CheckpointError as err:
        return str(err), bool((net[0].weight.data().asnumpy() == before).all())
    return None, None


def resume_with_none_on_rank_1(out_dir, rank):
    """Rank 0 saves a checkpoint, rank 1 none; both load: what each raises."""
    net = make_net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="horovod")
    checkpoint = gluonkit.Checkpoint(os.path.join(out_dir, f"only-rank-0-{rank}"))
    if rank == 0:
        checkpoint.save(net, trainer, epoch=1)
    try:
        checkpoint.load(net, trainer)
    except (FileNotFoundError, gluonkit.CheckpointError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def main(out_dir):
    hvd.init()
    rank, ranks = hvd.rank(), hvd.size()
    for optimizer in OPTIMIZERS:
        split_and_step(out_dir, rank, ranks, optimizer)
    for optimizer in OPTIMIZERS:
        gluonnlp_loop(out_dir, rank, ranks, f"nlp-{optimizer}", optimizer)
        gluonnlp_loop(out_dir, rank, ranks, f"fp16-{optimizer}", optimizer, compression=hvd.Compression.fp16,
                      gradient_predivide_factor=2.0)
    zero_counts(out_dir, rank, ranks)
    refusal, unchanged = resume_from_different_updates(out_dir, rank)
    missing = resume_with_none_on_rank_1(out_dir, rank)
    with open(os.path.join(out_dir, f"report-{rank}.json"), "w") as f:
        json.dump({"warnings": forgotten_kvstore(), "refusal": refusal, "unchanged": unchanged,
                   "missing": missing}, f)


if __name__ == "__main__":
    main(sys.argv[1])
