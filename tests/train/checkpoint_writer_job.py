"""Saves checkpoints in a loop until killed; the fault tests SIGKILL it mid-write.

``python checkpoint_writer_job.py DIRECTORY``: the weights of save ``i`` all equal ``i``.
"""
import sys

import mxnet as mx
from mxnet import gluon

import gluonkit


def make_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(512, in_units=512), gluon.nn.Dense(512, in_units=512))
    return net


def main(directory):
    net = make_net()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    checkpoint = gluonkit.Checkpoint(directory, keep=2)
    for i in range(1, 100000):
        for param in net.collect_params().values():
            param.set_data(mx.nd.full(param.shape, i))
        checkpoint.save(net, trainer, epoch=i, marker=i)
        print(f"saved {i}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
