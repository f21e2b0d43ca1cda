"""Saves checkpoints in a loop; the fault tests SIGKILL it mid-write or run two at once.

``python checkpoint_writer_job.py DIRECTORY``: saves until killed; the weights of save ``i``
all equal ``i``.
``python checkpoint_writer_job.py DIRECTORY COUNT TAG``: saves ``COUNT`` times (a small
network) with the weights of save ``i`` all equal to ``1000 * TAG + i``, printing each path.
"""
import sys

import mxnet as mx
from mxnet import gluon

import gluonkit


def make_net(units=512):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(units, in_units=units), gluon.nn.Dense(units, in_units=units))
    return net


def main(directory, count=None, tag=0):
    net = make_net(512 if count is None else 16)
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    checkpoint = gluonkit.Checkpoint(directory, keep=2)
    for i in range(1, 100000 if count is None else count + 1):
        value = 1000 * tag + i
        for param in net.collect_params().values():
            param.set_data(mx.nd.full(param.shape, value))
        path = checkpoint.save(net, trainer, epoch=i, marker=value)
        print(f"saved {i}" if count is None else f"saved {path}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
