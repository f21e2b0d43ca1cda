"""Multi-task digits: one shared trunk, three heads, built on gluonkit.nn.Branches.

The heads read the embedded UCI digits (8x8): ``digit`` (which of 10), ``parity`` (odd or
even) and ``aux``, an auxiliary head (is the digit 5 or more?) trained only on every
``--aux-every``-th batch. The other batches go through ``net.route('digit', 'parity')``: the
auxiliary head does not run, gets no gradient, and ``gluonkit.Trainer`` leaves it untouched
(no weight decay, no momentum). The first batch skips it too, and Branches still initializes
it, so it is saved and trained like the others.

Run::

    python recipes/multitask.py --epochs 10 --ctx cpu:0,cpu:1 --out runs/multitask

Unless ``OMP_NUM_THREADS`` is set, MXNet is given one thread per core. This network is so
small that one thread is faster, several times so when other programs share the cores:
``OMP_NUM_THREADS=1 python recipes/multitask.py``.
"""
import os

# MXNet reads the thread count once, when imported; left unset it runs one thread on 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
from mxnet.gluon import nn  # noqa: E402
from tqdm import tqdm  # noqa: E402

import gluonkit  # noqa: E402
import gluonkit.data  # noqa: E402
from gluonkit.nn import Branches  # noqa: E402

__all__ = ["HEADS", "MultiTaskNet", "evaluate", "main", "parse_args", "train_epoch"]

#: Each head's target, computed from the digit label.
HEADS = {
    "digit": lambda label: label,
    "parity": lambda label: label % 2,
    "aux": lambda label: label >= 5,
}
_EVERY_BATCH = ("digit", "parity")


class MultiTaskNet(Branches):
    """A small convolutional trunk for 8x8 digits and one dense head per task.

    Example::

        net = MultiTaskNet()
        net.initialize()
        digit, parity, aux = net(mx.nd.zeros((4, 1, 8, 8)))
    """

    def __init__(self, channels=32, hidden=64, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.HybridSequential()
            self.trunk.add(nn.Conv2D(channels, 3, padding=1, activation="relu"),
                           nn.MaxPool2D(2),
                           nn.Flatten(),
                           nn.Dense(hidden, activation="relu"))
            self.add("digit", nn.Dense(10))
            self.add("parity", nn.Dense(2))
            self.add("aux", nn.Dense(2))


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _contexts(spec):
    """``'cpu:0,cpu:1'`` -> ``[mx.cpu(0), mx.cpu(1)]``."""
    contexts = []
    for item in spec.split(","):
        kind, _, index = item.strip().partition(":")
        if kind not in ("cpu", "gpu") or not index.isdigit():
            raise argparse.ArgumentTypeError(
                f"bad context {item!r} in {spec!r}: write devices as cpu:0,cpu:1 or gpu:0")
        contexts.append(mx.Context(kind, int(index)))
    return contexts


def _ctx_spec(text):
    _contexts(text)
    return text


def _build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="JSON file of option defaults (keys as in args.json)")
    data = parser.add_argument_group("data")
    data.add_argument("--batch-size", type=_positive_int, default=64)
    data.add_argument("--train-size", type=_positive_int, default=None,
                      help="use only the first N training images (default: all 1,438)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=_positive_int, default=10)
    train.add_argument("--lr", type=float, default=0.1)
    train.add_argument("--momentum", type=float, default=0.9)
    train.add_argument("--wd", type=float, default=1e-4)
    train.add_argument("--aux-every", type=_positive_int, default=3,
                       help="train the auxiliary head on every N-th batch only")
    train.add_argument("--ctx", type=_ctx_spec, default="cpu:0",
                       help="devices, comma-separated, e.g. cpu:0,cpu:1")
    train.add_argument("--hybridize", dest="hybridize", action="store_true", default=True)
    train.add_argument("--no-hybridize", dest="hybridize", action="store_false")
    train.add_argument("--seed", type=int, default=0)
    out = parser.add_argument_group("output")
    out.add_argument("--out", help="directory for args.json, metrics.json and the parameters")
    out.add_argument("--progress", dest="progress", action="store_true", default=True)
    out.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def parse_args(argv=None):
    """Parse the command line; ``--config FILE`` supplies defaults that flags override."""
    parser = _build_parser()
    config_file = parser.parse_known_args(argv)[0].config
    if config_file:
        with open(config_file) as f:
            config = json.load(f)
        unknown = sorted(set(config) - set(vars(parser.parse_args([]))))
        if unknown:
            parser.error(f"{config_file} has unknown options {unknown}; use the keys of a "
                         "saved args.json")
        parser.set_defaults(**config)
    return parser.parse_args(argv)


def _targets(label):
    return {name: target(label).astype("float32") for name, target in HEADS.items()}


def train_epoch(net, trainer, loader, ctx_list, aux_every, progress=True):
    """One pass over ``loader``; the auxiliary head joins on every ``aux_every``-th batch."""
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    total, count = 0.0, 0
    bar = tqdm(loader, desc="train", leave=False, disable=not progress)
    for i, (data, label) in enumerate(bar):
        names = tuple(HEADS) if i % aux_every == aux_every - 1 else _EVERY_BATCH
        route = net.route(*names)
        xs = gluonkit.split_and_load(data, ctx_list)
        ys = gluonkit.split_and_load(label, ctx_list)
        with autograd.record():
            losses = []
            for x, y in zip(xs, ys):
                targets = _targets(y)
                outputs = route(x)
                losses.append(sum(loss_fn(out, targets[name]).sum()
                                  for name, out in zip(names, outputs)))
        autograd.backward(losses)
        trainer.step(data.shape[0])
        total += sum(loss.asscalar() for loss in losses)
        count += data.shape[0]
        bar.set_postfix(loss=f"{total / count:.3f}")
    return total / count


def evaluate(net, loader, ctx_list):
    """Accuracy of every head over ``loader``: a dict head -> fraction correct."""
    correct = dict.fromkeys(HEADS, 0)
    count = 0
    for data, label in loader:
        for x, y in zip(gluonkit.split_and_load(data, ctx_list),
                        gluonkit.split_and_load(label, ctx_list)):
            targets = _targets(y)
            for name, out in zip(net.names, net(x)):
                correct[name] += int((out.argmax(axis=1) == targets[name]).sum().asscalar())
            count += x.shape[0]
    return {name: hits / count for name, hits in correct.items()}


def main(args):
    """Train and evaluate; returns the final test accuracy of every head."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    mx.random.seed(args.seed)
    ctx_list = _contexts(args.ctx)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "args.json"), "w") as f:
            json.dump(vars(args), f, indent=2)

    train_set = gluonkit.data.digits(train=True)
    if args.train_size:
        train_set = train_set.take(args.train_size)
    train_loader = gluon.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = gluon.data.DataLoader(gluonkit.data.digits(train=False),
                                        batch_size=args.batch_size)

    net = MultiTaskNet()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    if args.hybridize:
        net.hybridize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {
        "learning_rate": args.lr, "momentum": args.momentum, "wd": args.wd})

    history = []
    epochs = tqdm(range(1, args.epochs + 1), desc="epochs", disable=not args.progress)
    for epoch in epochs:
        loss = train_epoch(net, trainer, train_loader, ctx_list, args.aux_every, args.progress)
        accuracy = evaluate(net, test_loader, ctx_list)
        history.append({"epoch": epoch, "loss": loss, **accuracy})
        epochs.set_postfix(loss=f"{loss:.3f}", **{k: f"{v:.3f}" for k, v in accuracy.items()})

    print("test accuracy: " + ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items()))
    if args.out:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump(history, f, indent=2)
        net.save_parameters(os.path.join(args.out, "multitask.params"))
    return accuracy


if __name__ == "__main__":
    main(parse_args())
