"""Multi-task digits: one shared trunk, three heads, built on gluonkit.nn.Branches.

The heads read the embedded UCI digits (8x8): ``digit`` (which of 10), ``parity`` (odd or
even) and ``aux``, an auxiliary head (is the digit 5 or more?) trained only on every
``--aux-every``-th batch. The other batches go through ``net.route('digit', 'parity')``: the
auxiliary head does not run, gets no gradient, and ``gluonkit.Trainer`` leaves it untouched
(no weight decay, no momentum). The first batch skips it too, and Branches still initializes
it, so it is saved and trained like the others.

Run::

    gluonkit-multitask --epochs 10 --ctx cpu:0,cpu:1 --out runs/multitask

(or ``python -m gluonkit.recipes.multitask``). With ``--out``, the trained network is exported
for inference (``model-symbol.json``, ``model-0000.params``, ``model.json``: three outputs, one
per head). Run as a command, MXNet gets one OpenMP thread per core unless ``OMP_NUM_THREADS``
is set; this network is so small that one thread is faster, several times so when other
programs share the cores: ``OMP_NUM_THREADS=1 gluonkit-multitask``.
"""
import json
import os

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn
from tqdm import tqdm

from ..data import digits
from ..export import export_model
from ..nn import Branches
from ..train.split import split_and_load
from ..train.trainer import Trainer
from . import _cli
from .datasets import load_dataset

__all__ = ["HEADS", "HEAD_CLASSES", "MultiTaskNet", "evaluate", "main", "parse_args", "train",
           "train_epoch"]

#: Each head's target, computed from the digit label.
HEADS = {
    "digit": lambda label: label,
    "parity": lambda label: label % 2,
    "aux": lambda label: label >= 5,
}
#: The class names of each head, as the exported model.json lists them.
HEAD_CLASSES = {
    "digit": [str(d) for d in range(10)],
    "parity": ["even", "odd"],
    "aux": ["below 5", "5 or more"],
}
_EVERY_BATCH = ("digit", "parity")
_MODULE = "gluonkit.recipes.multitask"


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


def _build_parser():
    parser = _cli.build_parser(__doc__.split("\n\n")[0], prog="gluonkit-multitask")
    data = parser.add_argument_group("data")
    data.add_argument("--batch-size", type=_cli.positive_int, default=64)
    data.add_argument("--train-size", type=_cli.positive_int, default=None,
                      help="use only the first N training images (default: all 1,438)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=_cli.positive_int, default=10)
    train.add_argument("--lr", type=float, default=0.1)
    train.add_argument("--momentum", type=float, default=0.9)
    train.add_argument("--wd", type=float, default=1e-4)
    train.add_argument("--aux-every", type=_cli.positive_int, default=3,
                       help="train the auxiliary head on every N-th batch only")
    train.add_argument("--ctx", type=_cli.ctx_type, default="cpu:0",
                       help="devices, e.g. cpu:0,cpu:1 or gpu:0,1")
    train.add_argument("--hybridize", dest="hybridize", action="store_true", default=True)
    train.add_argument("--no-hybridize", dest="hybridize", action="store_false")
    train.add_argument("--seed", type=int, default=0)
    out = parser.add_argument_group("output")
    out.add_argument("--out", help="directory for args.json, metrics.json, the parameters and "
                                   "the exported model")
    out.add_argument("--progress", dest="progress", action="store_true", default=True)
    out.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def parse_args(argv=None):
    """Parse the command line; ``--config FILE`` (JSON or YAML) supplies defaults that flags
    override."""
    return _cli.parse_with_config(_build_parser(), argv)


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
        xs = split_and_load(data, ctx_list)
        ys = split_and_load(label, ctx_list)
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
        for x, y in zip(split_and_load(data, ctx_list), split_and_load(label, ctx_list)):
            targets = _targets(y)
            for name, out in zip(net.names, net(x)):
                correct[name] += int((out.argmax(axis=1) == targets[name]).sum().asscalar())
            count += x.shape[0]
    return {name: hits / count for name, hits in correct.items()}


def train(args):
    """Train and evaluate as ``args`` (from ``parse_args``) says; returns the final test
    accuracy of every head (a dict). With ``--out``, also writes args.json, metrics.json,
    multitask.params and the exported model."""
    _cli.seed_all(args.seed)
    ctx_list = _cli.parse_ctx(args.ctx)
    if args.out:
        _cli.save_args(args, args.out)

    train_set = digits(train=True)
    if args.train_size:
        train_set = train_set.take(args.train_size)
    train_loader = gluon.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = gluon.data.DataLoader(digits(train=False), batch_size=args.batch_size)

    net = MultiTaskNet()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    if args.hybridize:
        net.hybridize()
    trainer = Trainer(net.collect_params(), "sgd", {
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
        preprocessing = load_dataset("digits")[3]
        export_model(net, os.path.join(args.out, "model"), (1, 8, 8), outputs=HEAD_CLASSES,
                     preprocessing=preprocessing, task="multitask")
    return accuracy


def main(argv=None):
    """The ``gluonkit-multitask`` command: parse ``argv`` (default: the command line), train.

    Run as a command (``argv`` None), it first gives MXNet one OpenMP thread per core and
    passive waiting unless ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` are set.
    """
    if argv is None:
        _cli.apply_threads(_MODULE)
    train(parse_args(argv))


if __name__ == "__main__":
    main()
