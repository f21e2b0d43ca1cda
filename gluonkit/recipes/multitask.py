"""Multi-task digits: one shared trunk, three heads, built on gluonkit.nn.Branches.

The heads read the embedded UCI digits (8x8): ``digit`` (which of 10), ``parity`` (odd or
even) and ``aux``, an auxiliary head (is the digit 5 or more?) trained only on every
``--aux-every``-th update of an epoch. The other batches go through
``net.route('digit', 'parity')``: the auxiliary head does not run, gets no gradient, and
``gluonkit.Trainer`` leaves it untouched (no weight decay, no momentum). The first batch skips
it too, and Branches still initializes it, so it is saved and trained like the others.

    gluonkit-multitask --epochs 10 --ctx cpu:0,cpu:1 --out runs/multitask
    gluonkit-launch -n 2 -s 1 -- gluonkit-multitask --kvstore dist_sync --micro-batch 16   # the same model
    gluonkit-multitask --out runs/multitask --resume         # continue after a stop
    gluonkit-multitask --out runs/multitask --export         # export its best checkpoint again

(or ``python -m gluonkit.recipes.multitask``). Training runs in ``gluonkit.fit``; the history
holds each head's accuracy (``digit_accuracy``, ..., and ``val_`` ones on the validation
split: --val-fraction of every digit of the training images, carved with --seed). The test
split (the digits' 359 test images) is evaluated once, at the end, on the exported model.
Outputs in --out, a run folder as for ``gluonkit-classify`` (``--resume`` and ``--export``
with only ``--out`` reuse its args.json; a folder that holds a run needs ``--resume`` or
``--overwrite``): checkpoints/ (the last few and the best by validation digit accuracy),
history.csv, curves.png, args.json and the best checkpoint exported for inference
(``model-symbol.json``, ``model-0000.params``, ``model.json``: three outputs, one per head). Ctrl-C or SIGTERM stop after the current batch and save a checkpoint that --resume
continues from exactly. Run as a command, MXNet gets one OpenMP thread per core unless
``OMP_NUM_THREADS`` is set; this network is so small that one thread is faster, several times
so when other programs share the cores: ``OMP_NUM_THREADS=1 gluonkit-multitask``.
"""
import logging
import os
import time
import warnings

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn

from gluonkit.data import digits
from gluonkit.deploy.inference import load_model
from gluonkit.nn import Branches
from gluonkit.train.evaluate import evaluate
from gluonkit.train.loop import fit
from gluonkit.train.resume import seed_all
from gluonkit.trainer import Trainer
from gluonkit.split import split_and_load, split_sizes
from gluonkit.recipes import common, global_batch
from gluonkit.recipes.datasets import VAL_FRACTION, load_dataset, split_off
from gluonkit.recipes.runs import RunFolder

__all__ = ["HEADS", "HEAD_CLASSES", "MultiTaskNet", "HeadSchedule", "LabelledHeads", "MissingLabels", "eval_batch",
           "main", "parse_args", "train"]

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
_INPUT_SHAPE = (1, 8, 8)
_MONITOR = "val_digit_accuracy"
_MODULE = "gluonkit.recipes.multitask"
_FIXED = ("train_size", "val_fraction", "seed")    # they choose the data: a resumed run keeps them
# The Trainer's warning about parameters without a gradient, for the auxiliary head that the
# schedule leaves out by design (said once per run as an INFO line instead).
_AUX_SKIPPED = r"Skipping 2 parameter\(s\) that got no gradient .*: aux\.bias, aux\.weight\."

log = logging.getLogger("gluonkit")


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


def _forward(route, names, data, label, ctx_list):
    """Per device: ({head: output}, {head: target}) for the heads of ``route``."""
    results = []
    for x, y in zip(split_and_load(data, ctx_list), split_and_load(label, ctx_list)):
        targets = {name: HEADS[name](y).astype("float32") for name in names}
        results.append((dict(zip(names, route(x))), targets))
    return results


class HeadSchedule:
    """``fit``'s ``batch_fn`` that trains the auxiliary head on every ``every``-th update only.

    Update ``i`` of an epoch (counted from 0) trains every head when ``i % every == every - 1``,
    else the route ``'digit', 'parity'``; its batches are this worker's steps ``i * accumulate``
    to ``(i + 1) * accumulate - 1`` (the Trainer's ``accumulate``; on global batches, the
    sampler's: every worker then picks the same heads for an update). ``fit`` hands it the
    run's ``state``, so a run resumed in mid-epoch picks the same heads as one never stopped.

    Example::

        fit(net, None, trainer, loader, epochs=5, batch_fn=HeadSchedule(every=3))
    """

    def __init__(self, every, accumulate=1):
        self.every = common.check_positive_int(every, "every", "the auxiliary head's update interval")
        self.accumulate = common.check_positive_int(accumulate, "accumulate", "the steps of an update")
        self._loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def heads(self, index):
        """The heads that update ``index`` of an epoch trains."""
        return tuple(HEADS) if index % self.every == self.every - 1 else _EVERY_BATCH

    def __call__(self, net, batch, ctx_list, *, state):
        names = self.heads(state.batch // self.accumulate)
        data, label = batch
        losses, outputs, labels = [], [], []
        for out, target in _forward(net.route(*names), names, data, label, ctx_list):
            losses.append(mx.nd.add_n(*(self._loss(out[name], target[name]).sum()
                                        for name in names)))
            outputs.append(out)
            labels.append(target)
        return losses, data.shape[0], outputs, labels


class MissingLabels(gluon.data.Dataset):
    """``dataset``'s (image, digit) samples with two 0/1 flags, ``(image, digit, has_parity,
    has_aux)``: a ``fraction`` of the samples (drawn with ``seed``) lack the parity or the aux
    label, each the one or the other with even odds; the digit label is always there.

    Example::

        MissingLabels(digits(), 0.5, seed=0)[0]   # (image, digit, 1.0, 0.0): no aux label
    """

    def __init__(self, dataset, fraction, seed):
        self._dataset = dataset
        rng = np.random.RandomState(seed)
        missing = rng.rand(len(dataset)) < fraction
        lacks_aux = rng.rand(len(dataset)) < 0.5
        self.has_parity = (~(missing & ~lacks_aux)).astype("float32")
        self.has_aux = (~(missing & lacks_aux)).astype("float32")

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, index):
        image, digit = self._dataset[index]
        return image, digit, self.has_parity[index], self.has_aux[index]


class LabelledHeads:
    """``fit``'s ``batch_fn`` with counts by head for :class:`MissingLabels` batches: every
    head runs on every batch and each head's loss is normalized by the samples that carry its
    label (``head_counts`` counts them), over the whole accumulation window. The outputs and
    labels it returns for the metrics hold, head by head, only the samples that carry the
    head's label (a device with none of them gives that head nothing).

    Example::

        fit(net, None, trainer, loader, epochs=5, batch_fn=LabelledHeads(),
            head_counts=LabelledHeads.head_counts)
    """

    def __init__(self):
        self._loss = gluon.loss.SoftmaxCrossEntropyLoss()

    @staticmethod
    def head_counts(batch):
        """The batch's labelled samples by head."""
        data, _, has_parity, has_aux = batch
        return {"digit": data.shape[0], "parity": float(has_parity.sum().asscalar()),
                "aux": float(has_aux.sum().asscalar())}

    def __call__(self, net, batch, ctx_list):
        data, label, has_parity, has_aux = batch
        flags = {"parity": has_parity, "aux": has_aux}
        masks = {name: split_and_load(flag, ctx_list) for name, flag in flags.items()}
        labelled = {name: flag.asnumpy() for name, flag in flags.items()}   # the loader's: no device wait
        ends = np.cumsum([0] + split_sizes(data.shape[0], len(ctx_list)))   # each device's samples
        losses, outputs, labels = [], [], []
        for i, (out, target) in enumerate(_forward(net, tuple(HEADS), data, label, ctx_list)):
            by_head = {name: self._loss(out[name], target[name]) for name in HEADS}
            losses.append({name: loss * masks[name][i] if name in masks else loss
                           for name, loss in by_head.items()})
            rows = {name: np.flatnonzero(flag[ends[i]:ends[i + 1]]) for name, flag in labelled.items()}
            outputs.append(_labelled(out, rows))
            labels.append(_labelled(target, rows))
        return losses, self.head_counts(batch), outputs, labels


def _labelled(arrays, rows):
    """One device's arrays by head, those of a head in ``rows`` cut to its rows (the samples
    that carry its label; a head of no row left out), out of the recorded graph."""
    kept = {}
    for name, array in arrays.items():
        picked = rows.get(name)
        if picked is None or len(picked) == array.shape[0]:
            kept[name] = array.detach()
        elif len(picked):
            kept[name] = array.detach().take(mx.nd.array(picked, ctx=array.context))
    return kept


def eval_batch(net, batch, ctx_list):
    """``eval_fn`` for ``fit`` and ``evaluate``: every head's outputs and targets, per device,
    of a ``MultiTaskNet`` or of its exported model (one output per head, in :data:`HEADS`'
    order)."""
    data, label = batch
    pairs = _forward(net, tuple(HEADS), data, label, ctx_list)
    return [out for out, _ in pairs], [target for _, target in pairs]


def _build_parser():
    parser = common.build_parser(__doc__.split("\n\n")[0], prog="gluonkit-multitask")
    data = parser.add_argument_group("data")
    data.add_argument("--val-fraction", type=common.fraction, default=VAL_FRACTION, metavar="F",
                      help="the share of every digit of the 1,438 training images carved "
                           "(seeded by --seed) as the validation split, which chooses the "
                           "checkpoint to export; 0: none, the last epoch is exported")
    data.add_argument("--train-size", type=common.positive_int, default=None,
                      help="train on only the first N training images left after the "
                           "validation split (default: all)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=common.non_negative_int, default=10,
                       help="epochs to train (to reach, with --resume); 0 evaluates and exports")
    train.add_argument("--batch-size", type=common.positive_int, default=64,
                       help="samples per update over every worker (the global batch; with "
                            "--per-worker-batch: per worker and step), split over --ctx")
    global_batch.add_global_batch_options(train)
    train.add_argument("--accumulate", type=common.positive_int, default=1,
                       help="with --per-worker-batch: batches per update")
    train.add_argument("--lr", type=common.non_negative_float, default=0.1)
    train.add_argument("--momentum", type=common.non_negative_float, default=0.9)
    train.add_argument("--wd", type=common.non_negative_float, default=1e-4)
    train.add_argument("--aux-every", type=common.positive_int, default=3,
                       help="train the auxiliary head on every N-th update only")
    train.add_argument("--missing-labels", type=common.fraction, default=None, metavar="F",
                       help="a fraction F of the training samples (seeded by --seed) lack the parity "
                            "or the aux label; every head then trains on every batch, each normalized "
                            "by the samples that carry its label (counts by head; --aux-every unused)")
    train.add_argument("--hybridize", dest="hybridize", action="store_true", default=True)
    train.add_argument("--no-hybridize", dest="hybridize", action="store_false")
    train.add_argument("--seed", type=int, default=0)
    common.add_device_options(parser)
    common.add_output_options(parser, os.path.join("runs", "multitask"))
    return parser


def parse_args(argv=None):
    """Parse the command line; ``--config FILE`` (JSON or YAML) supplies defaults that flags
    override."""
    parser = _build_parser()
    args = common.parse_with_config(parser, argv, fixed=_FIXED,
                                    without={"micro_batch": global_batch.micro_batches_trained})
    common.check_output_options(parser, args)
    global_batch.keep_earlier_meaning(args)    # a run of an earlier version goes on as it was trained
    global_batch.check_global_batch(parser, args)
    return args


def _export(checkpoints, prefix):
    """Export the best (else the latest) checkpoint of a MultiTaskNet."""
    net = MultiTaskNet()
    net.initialize(ctx=mx.cpu())
    return common.export_best(net, checkpoints, prefix, _INPUT_SHAPE, outputs=HEAD_CLASSES,
                            preprocessing=load_dataset("digits").preprocessing, task="multitask")


def train(args, callbacks=()):
    """Train and evaluate as ``args`` (from ``parse_args``) says; with ``--out``, write the
    checkpoints, history.csv, curves.png, args.json and export the best model. With
    ``args.export``, only export the checkpoint in ``--out``.

    Parameters
    ----------
    args : argparse.Namespace
    callbacks : list of Callback
        More ``fit`` callbacks, e.g. ``EarlyStopping(monitor='val_digit_accuracy')``.

    Returns
    -------
    dict
        'test_accuracy' (head -> fraction correct on the test split, measured once on the
        exported model, or without ``--out`` the final network; None on a distributed
        worker other than rank 0), 'history' (from ``fit``; ``val_*`` on the validation
        split), 'out', the trained 'net' and 'export' (the exported model's metadata, or None).
    """
    with RunFolder(args.out) as folder:     # held by this process until training ends
        return _train(args, callbacks, folder)


def _train(args, callbacks, folder):
    checkpoints = os.path.join(args.out, "checkpoints") if args.out else None
    model_prefix = os.path.join(args.out, "model") if args.out else None
    if args.export:
        folder.take(resume=True)
        metadata = _export(checkpoints, model_prefix)
        print(f"exported {metadata['files']['symbol']} (epoch {metadata['epoch_trained']})")
        return {"export": metadata, "out": args.out}

    ctx_list = common.parse_ctx(args.ctx)
    seed_all(args.seed)
    train_set, val_set = split_off(digits(train=True), args.val_fraction, args.seed)
    if args.train_size:
        train_set = train_set.take(args.train_size)
    if args.missing_labels is not None:
        train_set = MissingLabels(train_set, args.missing_labels, args.seed)
    kvstore = common.create_kvstore(args.kvstore)
    job_images, per_worker, accumulate = len(train_set), args.per_worker_batch, args.accumulate
    if per_worker:
        if not isinstance(kvstore, str):
            train_set = common.worker_shard(train_set, kvstore)
        train_loader = gluon.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    else:       # every worker reads every sample, and runs its micro-batches of each update
        train_loader = global_batch.global_train_loader(train_set, args.batch_size, args.micro_batch,
                                                        len(ctx_list), kvstore, args.seed, 0, resume=args.resume)
        accumulate = train_loader.batch_sampler.sampler.accumulate
    val_loader = None if val_set is None else gluon.data.DataLoader(val_set,
                                                                    batch_size=args.batch_size)
    test_set = digits(train=False)
    test_loader = gluon.data.DataLoader(test_set, batch_size=args.batch_size)

    net = MultiTaskNet()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    if args.hybridize:
        net.hybridize()
    if not per_worker:      # values before the Trainer, which broadcasts them then (not at the first update)
        global_batch.initialize_without_forward(net, _INPUT_SHAPE, ctx_list[0], mx.init.Xavier())
    if args.epochs == 0:        # no batch will give the layers their shapes before the save
        common.finish_init(net, _INPUT_SHAPE, ctx_list[0])
    trainer = Trainer(net, "sgd", {"learning_rate": args.lr, "momentum": args.momentum,
                                   "wd": args.wd}, kvstore=kvstore, accumulate=accumulate)
    if args.missing_labels is None:
        steps = {"batch_fn": HeadSchedule(args.aux_every, accumulate)}
    else:
        steps = {"batch_fn": LabelledHeads(), "head_counts": LabelledHeads.head_counts}
    updates = global_batch.updates_per_epoch(trainer, train_loader, accumulate, per_worker)
    callbacks = list(callbacks)
    if not per_worker:      # before the checkpoints, which then hold the statistics of one process
        callbacks += global_batch.merge_callbacks(train_loader)
    main_process = trainer.rank == 0
    monitor = _MONITOR if val_set is not None else None
    if args.out:
        if main_process:
            folder.take(resume=args.resume, overwrite=args.overwrite)
        callbacks += common.output_callbacks(args.out, monitor, args.resume, held_out="validation",
                                             args=args)
    metrics = {head: "acc" for head in HEADS}   # per head (dicts by name): digit_accuracy, ...
    if main_process:
        heads = (f"the aux head trains on one update in {args.aux_every}, the Trainer leaves it unchanged "
                 "on the others" if args.missing_labels is None else
                 f"{args.missing_labels:.0%} of them lack the parity or aux label, each head is normalized "
                 "by the samples that carry its label")
        log.info("Batches: %s", global_batch.describe_per_worker(args.batch_size, accumulate, updates)
                 if per_worker else global_batch.describe(train_loader, len(ctx_list)))
        split = trainer.num_workers > 1 and per_worker
        shards = f" split over {trainer.num_workers} workers" if split else ""
        log.info("Training on %d images%s; %s; %s", job_images, shards, heads,
                 common.splits_note(None if val_set is None else len(val_set), len(test_set),
                                    monitor, exported=bool(args.out)))
    tic = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_AUX_SKIPPED, category=UserWarning)
        history = fit(net, None, trainer, train_loader, epochs=args.epochs, ctx=ctx_list,
                      val_data=val_loader, metrics=metrics, callbacks=callbacks,
                      progress=args.progress, eval_fn=eval_batch, **steps)
    if not main_process:        # rank 0 exports the model and reports its test accuracy
        return {"test_accuracy": None, "history": history, "out": args.out, "net": net,
                "export": None}
    metadata = None
    if args.out:
        metadata = _export(checkpoints, model_prefix)
        print(common.export_summary(metadata, history, monitor or _MONITOR))
    tested = load_model(model_prefix, ctx_list[0]).net if metadata else net
    logs = evaluate(tested, test_loader, ctx=ctx_list[:1] if metadata else ctx_list,
                    metrics=metrics, eval_fn=eval_batch)
    accuracy = {head: logs[f"{head}_accuracy"] for head in HEADS}
    figures = "test accuracy: " + ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items())
    print(common.test_summary(figures, len(test_set), metadata, history,
                              time.perf_counter() - tic))
    return {"test_accuracy": accuracy, "history": history, "out": args.out, "net": net,
            "export": metadata}


def main(argv=None):
    """The ``gluonkit-multitask`` command: parse ``argv`` (default: the command line), train.

    As a command, MXNet runs one OpenMP thread per usable CPU, waiting passively, unless
    ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` are set (:mod:`gluonkit.commands`).
    """
    common.run_command(_MODULE, parse_args, train, argv)


if __name__ == "__main__":
    main()
