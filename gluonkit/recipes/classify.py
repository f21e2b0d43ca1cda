"""Train an image classifier with gluonkit; by default the embedded digits, in seconds on a CPU.

    gluonkit-classify                                        # digits, built-in CNN, CPU
    gluonkit-classify --epochs 5 --ctx cpu:0,cpu:1 --accumulate 2
    gluonkit-classify --dataset imagefolder:photos --model resnet18_v1b --image-size 224 \\
        --pretrained --ctx gpu:0,1 --hybridize --out runs/photos
    gluonkit-classify --out runs/photos --resume             # continue after a stop
    gluonkit-classify --out runs/photos --resume --epochs 30 # train it further
    gluonkit-classify --out runs/photos --export             # export its best checkpoint again
    gluonkit-classify --config runs/photos/args.json --out runs/again   # replay it

(or ``python -m gluonkit.recipes.classify ...``). The data comes as three splits: training,
validation (DIR/val, else --val-fraction of every class carved from the training data), which
chooses the checkpoint to export, and test, evaluated once at the end on the exported model.
Outputs in --out, a run folder (``gluonkit.recipes.runs``): checkpoints/ (the last few and the
best by validation accuracy), history.csv (``val_*`` on the validation split), curves.png,
args.json (the resolved arguments, which --resume and --export reuse) and the best model
exported for inference: model-symbol.json, model-0000.params and model.json (see
``gluonkit-predict``). A folder that holds a run is refused without --resume
or --overwrite, and so is a folder another live process uses. Ctrl-C or SIGTERM stop after
the current step and save a checkpoint that --resume continues from exactly.
"""
import argparse
import functools
import logging
import os
import time

import mxnet as mx
from mxnet import gluon

from gluonkit.data import DataLoader, bucket_loader, multiscale_loader, seeded_loader
from gluonkit.deploy.inference import load_model
from gluonkit.nn import ShapeCache
from gluonkit.train.evaluate import evaluate
from gluonkit.train.loop import fit
from gluonkit.train.resume import seed_all
from gluonkit.trainer import Trainer, amp
from gluonkit.recipes import common, global_batch
from gluonkit.recipes.datasets import VAL_FRACTION, load_dataset
from gluonkit.recipes.models import build_model, check_input_shape, check_model_name
from gluonkit.recipes.runs import RunFolder
from gluonkit.recipes.workers import choose_num_workers

__all__ = ["parse_args", "train", "export_checkpoint", "main", "make_loaders", "no_wd_on_bias"]

log = logging.getLogger("gluonkit")

_SCHEDULES = ("none", "step", "cosine", "poly")
_MODULE = "gluonkit.recipes.classify"
_MONITOR = "val_accuracy"
#: Options that build the network or choose the data: a resumed run must keep them.
_FIXED = ("dataset", "val_fraction", "image_size", "max_size", "buckets", "multiscale",
          "multiscale_interval", "limit", "model", "pretrained", "pretrained_file", "seed")


def _build_parser():
    parser = common.build_parser("Train an image classifier with gluonkit (digits by default).",
                               prog="gluonkit-classify",
                               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", type=common.dataset_type, default="digits",
                      help="digits | cifar10 | imagefolder:DIR (class folders in DIR/train, "
                           "and in DIR/val and DIR/test where there are) | "
                           "rec:TRAIN.rec[,TEST.rec]; a test split the data lacks is 10%% of "
                           "every class carved from the training data")
    data.add_argument("--val-fraction", type=common.fraction, default=VAL_FRACTION, metavar="F",
                      help="the share of every class carved from the training data (seeded by "
                           "--seed) as the validation split, which chooses the checkpoint to "
                           "export; DIR/val replaces it; 0: none, the last epoch is exported")
    data.add_argument("--data-dir", type=common.path_type,
                      default=os.path.join("~", ".mxnet", "datasets", "cifar10"),
                      help="where CIFAR-10 is stored (downloaded if missing)")
    data.add_argument("--image-size", type=common.non_negative_int, default=32,
                      help="imagefolder and rec images: random-resized crops of this size for "
                           "training, center crops for testing; 0 keeps their own sizes "
                           "(capped by --max-size) and batches them in --buckets shapes")
    data.add_argument("--max-size", type=common.positive_int, default=512,
                      help="with --image-size 0, longer image sides are shrunk to this")
    data.add_argument("--buckets", type=common.positive_int, default=4, help="shapes for --image-size 0")
    data.add_argument("--multiscale", type=common.sizes_type, metavar="SIZES",
                      help="train each batch at a size drawn from these, e.g. 16,20,24,28 "
                           "(test at the largest)")
    data.add_argument("--multiscale-interval", type=common.positive_int, default=1, metavar="N",
                      help="batches per drawn size")
    data.add_argument("--limit", type=common.positive_int, metavar="N",
                      help="use only N training, N validation and N test images, every class "
                           "in proportion (drawn with --seed)")
    common.add_num_workers(data)
    common.add_image_limits(data)
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="cnn",
                       help="'cnn' (built in) or a GluonCV model-zoo name, e.g. cifar_resnet20_v1")
    model.add_argument("--pretrained", action="store_true",
                       help="start a model-zoo network from its pretrained weights (downloaded "
                            "once to ~/.mxnet/models); a new output layer fits the classes")
    model.add_argument("--pretrained-file", type=common.path_type, metavar="PATH",
                       help="the pretrained weights as a .params file (offline --pretrained)")
    model.add_argument("--hybridize", action="store_true", help="compile the network's graph")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=common.non_negative_int, default=12,
                       help="epochs to train (to reach, with --resume); 0 evaluates and exports")
    train.add_argument("--batch-size", type=common.positive_int, default=64,
                       help="samples per update over every worker (the global batch; with "
                            "--per-worker-batch: per worker and step), split over --ctx")
    global_batch.add_global_batch_options(train)
    train.add_argument("--accumulate", type=common.positive_int, default=1,
                       help="with --per-worker-batch: batches per update (the update equals one batch "
                            "of them all, except that BatchNorm normalizes each batch by its own "
                            "statistics)")
    train.add_argument("--optimizer", default="sgd", help="any mx.optimizer name: sgd, adam, ...")
    train.add_argument("--lr", type=common.non_negative_float, default=0.1, help="learning rate")
    train.add_argument("--momentum", type=common.non_negative_float, default=0.9, help="for sgd and nag")
    train.add_argument("--wd", type=common.non_negative_float, default=1e-4, help="weight decay")
    train.add_argument("--no-wd-on-bias", action="store_true",
                       help="no weight decay on biases and BatchNorm's beta and gamma")
    train.add_argument("--label-smoothing", type=float, default=0.0, metavar="EPS",
                       help="train on targets 1 - EPS for the class and EPS / (classes - 1) "
                            "for the others")
    train.add_argument("--lr-schedule", type=common.one_of(*_SCHEDULES), default="cosine",
                       help="GluonCV schedule over the updates after the warm-up: "
                            + ", ".join(_SCHEDULES))
    train.add_argument("--warmup-epochs", type=common.non_negative_float, default=1.0,
                       help="linear learning-rate warm-up, per update")
    train.add_argument("--seed", type=int, default=0, help="seeds Python, NumPy and MXNet")
    train.add_argument("--amp", action="store_true",
                       help="mixed precision (float16) with dynamic loss scaling; GPUs only")
    common.add_device_options(parser)
    common.add_output_options(parser, os.path.join("runs", "classify"))
    return parser


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``), after any --config file."""
    parser = _build_parser()
    args = common.parse_with_config(parser, argv, fixed=_FIXED,
                                    without={"micro_batch": global_batch.micro_batches_trained})
    common.check_output_options(parser, args)
    common.check_multiscale_interval(parser, args)
    if _variable_sizes(args) and args.micro_batch is not None:
        parser.error("--micro-batch cuts batches of one image size; --multiscale and --image-size 0 train on "
                     "batches of each worker's own (--batch-size per worker and step): drop --micro-batch.")
    global_batch.keep_earlier_meaning(args)    # a run of an earlier version goes on as it was trained
    if not _variable_sizes(args):
        global_batch.check_global_batch(parser, args)
    if not 0 <= args.label_smoothing < 1:
        parser.error(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}.")
    try:
        check_model_name(args.model)
    except ValueError as err:
        parser.error(str(err))
    if args.amp and not args.export:
        try:
            amp.check_available(common.parse_ctx(args.ctx))
        except (ValueError, RuntimeError) as err:
            parser.error(f"--amp: {err}")
    if (args.pretrained or args.pretrained_file) and args.model == "cnn":
        parser.error("--pretrained needs a GluonCV model-zoo --model; 'cnn' has no pretrained "
                     "weights.")
    return args


def _variable_sizes(args):
    """Whether the training batches come in several image sizes (multi-scale or buckets): those
    are per worker, not cut from global batches."""
    return bool(args.multiscale) or args.image_size == 0


def no_wd_on_bias(net):
    """Turn weight decay off for biases and BatchNorm's ``beta``/``gamma`` (GluonCV's
    ``--no-wd``); returns the parameter names changed."""
    params = net.collect_params(".*beta|.*gamma|.*bias")
    for param in params.values():
        param.wd_mult = 0.0
    return sorted(params.keys())


def make_loaders(train_set, eval_sets, batch_size, multiscale, interval, image_size, buckets,
                 seed, num_workers):
    """The training loader and a list of evaluation loaders, one per dataset of ``eval_sets``
    (None for None): fixed size, one size per training batch drawn from ``multiscale``
    (evaluation at the largest), or (``image_size`` 0) images of their own sizes batched in
    ``buckets`` shapes. Every training sample is augmented from a seed of its own
    (``gluonkit.data.seeded_loader``): the same batches with any ``num_workers``. With
    ``train_set`` None (fixed size only) the training loader is None: the caller makes its own."""
    if multiscale:
        train = multiscale_loader(train_set, batch_size, multiscale, interval, seed=seed,
                                  num_workers=num_workers, sample_seeds=True)
        evaluation = functools.partial(multiscale_loader, batch_size=batch_size,
                                       sizes=[max(multiscale)], shuffle=False,
                                       num_workers=num_workers)
    elif image_size == 0:
        train = bucket_loader(train_set, batch_size, buckets, mode="resize", multiple=4, seed=seed,
                              num_workers=num_workers, sample_seeds=True)
        shapes = train.batch_sampler.sampler.buckets
        log.info("Batches in %d shapes: %s.", len(shapes), ", ".join("x".join(map(str, s)) for s in shapes.shapes))
        evaluation = functools.partial(bucket_loader, batch_size=batch_size, buckets=shapes, shuffle=False,
                                       num_workers=num_workers)
    else:
        train = None
        if train_set is not None:
            order = gluon.data.BatchSampler(gluon.data.RandomSampler(len(train_set)), batch_size, "keep")
            train = seeded_loader(train_set, order, seed, num_workers=num_workers)
        evaluation = functools.partial(DataLoader, batch_size=batch_size,
                                       num_workers=num_workers)
    return train, [None if data is None else evaluation(data) for data in eval_sets]


def _input_shape(loader):
    """One sample's shape, from the first batch of ``loader`` (the largest shape for buckets)."""
    return tuple(next(iter(loader))[0].shape[1:])


def _prepare(net, ctx, hybridize, variable_shapes, pretrained):
    """Initialize ``net`` on ``ctx`` (deferred: shapes come with the first batch, as a
    distributed Trainer expects) and hybridize it; returns the network to train."""
    if hybridize and variable_shapes:
        net = ShapeCache(net)      # one cached graph per input shape; parameter names unchanged
    if pretrained:
        net.collect_params().reset_ctx(ctx)
    else:
        net.initialize(mx.init.Xavier(), ctx=ctx)
    if hybridize:
        net.hybridize(**({"static_alloc": True, "static_shape": True} if variable_shapes else {}))
    return net


def export_checkpoint(model, class_names, checkpoints, prefix, input_shape, preprocessing, ctx=None):
    """Export the best (else the latest) checkpoint in the directory ``checkpoints`` of a
    ``model`` network as ``prefix``-symbol.json/-0000.params/.json, built on ``ctx`` (default
    the CPU; a GPU after ``amp.init``, whose float16 layers have no CPU kernels); returns the
    metadata."""
    net = build_model(model, len(class_names))
    net.initialize(ctx=ctx or mx.cpu())
    return common.export_best(net, checkpoints, prefix, input_shape, outputs=class_names,
                            preprocessing=preprocessing, task="classify", model=model)


def train(args, callbacks=()):
    """Train as ``args`` (from ``parse_args``) says, choosing on the validation split; with
    ``--out``, export the best model; then evaluate the test split once, on the exported
    model (without ``--out``, the final network). With ``args.export``, only export the
    checkpoint in ``--out``. The run folder ``--out`` is held by this process until training
    ends.

    Parameters
    ----------
    args : argparse.Namespace
    callbacks : list of Callback
        More ``fit`` callbacks, e.g. ``EarlyStopping(monitor='val_accuracy')`` (on the
        validation split).

    Parameters
    ----------
    args : argparse.Namespace
        From ``parse_args``.
    callbacks : list of Callback
        More ``fit`` callbacks, e.g. ``EarlyStopping(monitor='val_accuracy')``.

    Returns
    -------
    dict
        'test_accuracy' (None on a distributed worker other than rank 0, which reports it),
        'history' (from ``fit``; ``val_*`` on the validation split), 'seconds', 'out', the
        trained 'net' (its final parameters) and 'export' (the exported model's metadata, or
        None).
    """
    with RunFolder(args.out) as folder:
        return _train(args, callbacks, folder)


def _train(args, callbacks, folder):
    ctx = common.parse_ctx(args.ctx)
    if args.amp and not args.export:
        amp.init(ctx)     # before anything is loaded, built or written
    args.num_workers = choose_num_workers(args.num_workers, args.dataset)
    seed_all(args.seed)
    data = load_dataset(args.dataset, args.data_dir, args.image_size, args.limit, args.max_size,
                        args.seed, val_fraction=args.val_fraction,
                        max_pixels=args.max_image_pixels, max_aspect=args.max_aspect_ratio)
    kvstore = common.create_kvstore(args.kvstore)
    train_set = data.train
    job_images = len(train_set)
    per_worker = args.per_worker_batch or _variable_sizes(args)
    if not isinstance(kvstore, str) and per_worker:
        train_set = common.worker_shard(train_set, kvstore)
    train_loader, (val_loader, test_loader) = make_loaders(
        train_set if per_worker else None, (data.val, data.test), args.batch_size, args.multiscale,
        args.multiscale_interval, args.image_size, args.buckets, common.worker_seed(args.seed, kvstore),
        args.num_workers)
    accumulate = args.accumulate
    if not per_worker:      # every worker reads every sample, and runs its micro-batches of each update
        train_loader = global_batch.global_train_loader(train_set, args.batch_size, args.micro_batch,
                                                        len(ctx), kvstore, args.seed, args.num_workers,
                                                        resume=args.resume)
        accumulate = train_loader.batch_sampler.sampler.accumulate
    input_shape = _input_shape(test_loader)
    model_prefix = os.path.join(args.out, "model") if args.out else None
    checkpoints = os.path.join(args.out, "checkpoints") if args.out else None
    if args.export:
        folder.take(resume=True)
        metadata = export_checkpoint(args.model, data.classes, checkpoints, model_prefix,
                                     input_shape, data.preprocessing)
        print(f"exported {metadata['files']['symbol']} (epoch {metadata['epoch_trained']})")
        return {"export": metadata, "out": args.out}

    classes = len(data.classes)
    pretrained = bool(args.pretrained or args.pretrained_file)
    net = build_model(args.model, classes, args.pretrained, args.pretrained_file)
    check_input_shape(net, args.model, input_shape)
    net = _prepare(net, ctx, args.hybridize,
                   bool(args.multiscale) or args.image_size == 0, pretrained)
    if not per_worker:      # values before the Trainer, which broadcasts them then (not at the first update)
        global_batch.initialize_without_forward(net, input_shape, ctx[0], mx.init.Xavier())
    if args.epochs == 0:        # no batch will give the layers their shapes before the save
        common.finish_init(net, input_shape, ctx[0])
    if args.no_wd_on_bias:
        no_wd_on_bias(net)
    trainer = Trainer(net.collect_params(), args.optimizer,
                      common.optimizer_params(args.optimizer, args.lr, args.momentum, args.wd),
                      kvstore=kvstore, accumulate=accumulate)
    main_process = trainer.rank == 0
    updates = global_batch.updates_per_epoch(trainer, train_loader, accumulate, per_worker)
    schedule = common.lr_schedule(args.lr_schedule, args.lr, args.epochs, args.warmup_epochs, updates)
    callbacks = ([schedule] if schedule else []) + list(callbacks)
    if not per_worker:      # before the checkpoints, which then hold the statistics of one process
        callbacks += global_batch.merge_callbacks(train_loader)
    monitor = _MONITOR if data.val is not None else None
    if args.out:
        if main_process:
            folder.take(resume=args.resume, overwrite=args.overwrite)
        callbacks += common.output_callbacks(args.out, monitor, args.resume, held_out="validation",
                                             args=args)
    if main_process:
        log.info("Batches: %s", global_batch.describe_per_worker(args.batch_size, accumulate, updates)
                 if per_worker else global_batch.describe(train_loader, len(ctx)))
        shards = f" split over {trainer.num_workers} workers" if trainer.num_workers > 1 and per_worker else ""
        log.info("Training %s on %s (%d images%s, %d classes) on %s; %s", args.model, args.dataset,
                 job_images, shards, classes, ctx,
                 common.splits_note(None if data.val is None else len(data.val), len(data.test), monitor,
                                    exported=bool(args.out)))
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    if args.label_smoothing:
        loss = _SmoothedLoss(classes, args.label_smoothing)
    if args.amp:
        amp.init_trainer(trainer)
        loss = amp.ScaledLoss(loss, trainer)
    tic = time.perf_counter()
    history = fit(net, loss, trainer, train_loader, epochs=args.epochs, ctx=ctx,
                  val_data=val_loader, metrics="acc", callbacks=callbacks, progress=args.progress)
    if not main_process:        # rank 0 exports the model and reports its test accuracy
        return {"test_accuracy": None, "history": history, "seconds": time.perf_counter() - tic,
                "out": args.out, "net": net, "export": None}
    metadata = None
    if args.out:
        metadata = export_checkpoint(args.model, data.classes, checkpoints, model_prefix,
                                     input_shape, data.preprocessing, ctx[0] if args.amp else None)
        print(common.export_summary(metadata, history, monitor or _MONITOR))
    tested = load_model(model_prefix, ctx[0]).net if metadata else net
    accuracy = evaluate(tested, test_loader, ctx=ctx[:1] if metadata else ctx)["accuracy"]
    seconds = time.perf_counter() - tic
    print(common.test_summary(f"test accuracy: {accuracy:.4f}", len(data.test), metadata, history,
                              seconds))
    return {"test_accuracy": accuracy, "history": history, "seconds": seconds, "out": args.out,
            "net": net, "export": metadata}


class _SmoothedLoss(gluon.loss.SoftmaxCrossEntropyLoss):
    """Softmax cross-entropy against label-smoothed one-hot targets (sparse labels in)."""

    def __init__(self, classes, epsilon, **kwargs):
        super().__init__(sparse_label=False, **kwargs)
        self._classes, self._epsilon = classes, epsilon

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        off = self._epsilon / (self._classes - 1)
        target = F.one_hot(label, self._classes, on_value=1 - self._epsilon, off_value=off)
        return super().hybrid_forward(F, pred, target, sample_weight)


def main(argv=None):
    """The ``gluonkit-classify`` command: parse ``argv`` (default: the command line), train.

    As a command, MXNet runs one OpenMP thread per usable CPU, waiting passively, unless
    ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` are set (:mod:`gluonkit.commands`).
    """
    common.run_command(_MODULE, parse_args, train, argv)


if __name__ == "__main__":
    main()
