"""The cost of ``gluonkit.Checkpoint.save`` for a ResNet-18 (GluonCV's ``resnet18_v1b``), against
gluon's own ``save_parameters`` + ``Trainer.save_states`` in the same process.

    python -m benchmarks.checkpoint              # 7 rounds (about a minute on 2 cores)
    python benchmarks/checkpoint.py --rounds 3   # as a file: the gluonkit installed, e.g. another version's

The network (11.7M parameters, 1000 classes) is initialized by one forward pass and trained one
step with SGD and momentum, so that the checkpoint holds every parameter and every momentum
array. Each round saves a checkpoint and then gluon's two files (parameters, then optimizer
states), each into a fresh directory, reading the clock after ``mx.nd.waitall()``; the median
and the range over the rounds are printed as one JSON line with the checkpoint's size in bytes
and the median ratio of the two times. Run with another gluonkit on the path, the script
measures that one: compare the two ratios (absolute times on a shared machine are noise).
"""
import argparse
import json
import os
import statistics
import tempfile

import mxnet as mx
from gluoncv import model_zoo
from mxnet import autograd, gluon

import gluonkit

from ._common import timed

__all__ = ["build", "measure", "main"]


def build():
    """A resnet18_v1b after one SGD step with momentum, and its trainer."""
    mx.random.seed(0)
    net = model_zoo.get_model("resnet18_v1b", pretrained=False)
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    x, y = mx.nd.random.uniform(shape=(2, 3, 64, 64)), mx.nd.array([1, 2])
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(2)
    mx.nd.waitall()
    return net, trainer


def measure(net, trainer, rounds):
    """{'checkpoint_s': [...], 'gluon_s': [...], 'bytes': int} over ``rounds`` rounds (after a warm-up)."""
    times = {"checkpoint_s": [], "gluon_s": []}
    size = None
    with tempfile.TemporaryDirectory() as root:
        for i in range(rounds + 1):
            ckpt = gluonkit.Checkpoint(os.path.join(root, f"ckpt{i}"), keep=1)
            folder = os.path.join(root, f"gluon{i}")
            os.makedirs(folder)
            spent = timed(lambda: ckpt.save(net, trainer, 1))

            def gluon_save():
                net.save_parameters(os.path.join(folder, "net.params"))
                trainer.save_states(os.path.join(folder, "trainer.states"))

            gluon_spent = timed(gluon_save)
            size = os.path.getsize(ckpt.latest)
            if i:   # the first round warms up
                times["checkpoint_s"].append(spent)
                times["gluon_s"].append(gluon_spent)
    return {**times, "bytes": size}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (after one warm-up)")
    args = parser.parse_args(argv)
    net, trainer = build()
    result = measure(net, trainer, args.rounds)
    ratios = [a / b for a, b in zip(result["checkpoint_s"], result["gluon_s"])]
    row = {"gluonkit": os.path.dirname(gluonkit.__file__), "bytes": result["bytes"],
           "checkpoint_median_s": statistics.median(result["checkpoint_s"]),
           "checkpoint_range_s": [min(result["checkpoint_s"]), max(result["checkpoint_s"])],
           "gluon_median_s": statistics.median(result["gluon_s"]),
           "ratio_to_gluon_median": statistics.median(ratios)}
    print(json.dumps(row))
    return row


if __name__ == "__main__":
    main()
