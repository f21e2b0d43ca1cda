"""Train an image classifier with gluonkit; by default the embedded digits, in seconds on a CPU.

    python recipes/classify.py                                   # digits, built-in CNN, CPU
    python recipes/classify.py --epochs 5 --ctx cpu:0,cpu:1 --accumulate 2
    python recipes/classify.py --dataset cifar10 --model cifar_resnet20_v1 --ctx gpu:0,1 \\
        --epochs 200 --lr-schedule cosine --warmup-epochs 5 --hybridize --out runs/cifar
    python recipes/classify.py --out runs/cifar --resume          # continue after a stop

Outputs in --out: checkpoints/ (the last few and the best by test accuracy), history.csv,
curves.png and args.json (the resolved arguments). Ctrl-C or SIGTERM stop after the current
step and save a checkpoint that --resume continues from exactly.
"""
import os

# MXNet reads these once, at import. By default it runs one OpenMP thread per two cores; and
# with spinning OpenMP threads, training slowed 15-35x whenever other processes kept the
# cores busy (OMP_WAIT_POLICY=PASSIVE: unaffected).
os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import difflib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import gluon  # noqa: E402
from mxnet.gluon import nn  # noqa: E402
from mxnet.gluon.data.vision import transforms  # noqa: E402

from gluonkit.data import bucket_loader, digits, multiscale_loader  # noqa: E402
from gluonkit.nn import ShapeCache  # noqa: E402
from gluonkit.train.callbacks import (HistoryLogger, LRSchedule, ModelCheckpoint,  # noqa: E402
                                      PlotCurves)
from gluonkit.train.loop import evaluate, fit  # noqa: E402
from gluonkit.train.trainer import Trainer  # noqa: E402

log = logging.getLogger("gluonkit")

_CIFAR_MEAN, _CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
_SCHEDULES = ("none", "step", "cosine", "poly")


def _build_parser():
    parser = argparse.ArgumentParser(
        description="Train an image classifier with gluonkit (digits by default).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--config", metavar="FILE",
                        help="JSON or YAML file of option defaults (keys as in --help, e.g. "
                             "batch_size); options on the command line override it")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="digits",
                      help="digits | cifar10 | imagefolder:DIR (DIR/train and DIR/val or DIR/test "
                           "class folders) | rec:TRAIN.rec[,TEST.rec]")
    data.add_argument("--data-dir", default=os.path.join("~", ".mxnet", "datasets", "cifar10"),
                      help="where CIFAR-10 is stored (downloaded if missing)")
    data.add_argument("--image-size", type=int, default=32,
                      help="images of imagefolder and rec datasets are resized to this; 0 keeps "
                           "their own sizes and batches them in --buckets shapes")
    data.add_argument("--buckets", type=int, default=4, help="shapes for --image-size 0")
    data.add_argument("--multiscale", type=_sizes, metavar="SIZES",
                      help="train each batch at a size drawn from these, e.g. 16,20,24,28 "
                           "(test at the largest)")
    data.add_argument("--multiscale-interval", type=int, default=1, metavar="N",
                      help="batches per drawn size")
    data.add_argument("--limit", type=int, metavar="N",
                      help="use only the first N training and N test images")
    data.add_argument("--num-workers", type=int, default=0, help="data loading processes")
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="cnn",
                       help="'cnn' (built in) or a GluonCV model-zoo name, e.g. cifar_resnet20_v1")
    model.add_argument("--hybridize", action="store_true", help="compile the network's graph")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=12, help="epochs to train (to reach, with --resume)")
    train.add_argument("--batch-size", type=int, default=64, help="samples per batch, split over --ctx")
    train.add_argument("--accumulate", type=int, default=1,
                       help="batches per update (the update equals one batch of them all)")
    train.add_argument("--optimizer", default="sgd", help="any mx.optimizer name: sgd, adam, ...")
    train.add_argument("--lr", type=float, default=0.1, help="learning rate")
    train.add_argument("--momentum", type=float, default=0.9, help="for sgd and nag")
    train.add_argument("--wd", type=float, default=1e-4, help="weight decay")
    train.add_argument("--lr-schedule", choices=_SCHEDULES, default="cosine",
                       help="GluonCV schedule over the updates after the warm-up")
    train.add_argument("--warmup-epochs", type=float, default=1.0,
                       help="linear learning-rate warm-up, per update")
    train.add_argument("--seed", type=int, default=0, help="seeds Python, NumPy and MXNet")
    devices = parser.add_argument_group("devices")
    devices.add_argument("--ctx", default="cpu:0", help="devices, e.g. cpu:0,cpu:1 or gpu:0,1")
    devices.add_argument("--kvstore", default="device",
                         help="how gradients are reduced: device, local, or dist_sync under "
                              "python -m gluonkit.launch")
    output = parser.add_argument_group("output")
    output.add_argument("--out", default=os.path.join("runs", "classify"), metavar="DIR",
                        help="checkpoints, history.csv, curves.png, args.json ('' for none)")
    output.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in --out, if there is one")
    output.add_argument("--no-progress", dest="progress", action="store_false",
                        help="hide the progress bars (shown: %(default)s)")
    return parser


def _config_argv(path, parser):
    """The options a --config file sets, as command-line tokens (so they are checked alike)."""
    with open(path) as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            parser.error(f"--config {path}: reading YAML needs PyYAML (pip install pyyaml), "
                         "or write the file as JSON.")
        config = yaml.safe_load(text)
    else:
        config = json.loads(text)
    if not isinstance(config, dict):
        parser.error(f"--config {path} must hold a mapping of option names to values.")
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    argv = []
    for key, value in config.items():
        dest = key.replace("-", "_")
        if dest not in actions:
            close = difflib.get_close_matches(dest, actions, n=3)
            parser.error(f"--config {path}: unknown option {key!r}"
                         + (f" (did you mean {', '.join(close)}?)" if close else "")
                         + f"; valid: {', '.join(sorted(actions))}.")
        action = actions[dest]
        if action.nargs == 0:   # a flag: true sets it, false leaves the default
            if value != action.default:
                argv.append(action.option_strings[0])
        elif value is not None:
            argv += [action.option_strings[0], str(value)]
    return argv


def _sizes(text):
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 16,20,24,28, got {text!r}") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``), after any --config file."""
    parser = _build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    known, _ = parser.parse_known_args(argv)
    if known.config:
        argv = _config_argv(known.config, parser) + argv
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "accumulate", "image_size", "buckets", "multiscale_interval"):
        if getattr(args, name) < (0 if name in ("epochs", "image_size") else 1):
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}.")
    if args.resume and not args.out:
        parser.error("--resume continues from the checkpoints in --out; pass --out DIR.")
    return args


def parse_ctx(spec):
    """Contexts from 'cpu:0,cpu:1', 'gpu:0,1', 'cpu' or 'gpu:2'.

    Example::

        >>> parse_ctx("gpu:0,1")
        [gpu(0), gpu(1)]
    """
    contexts, kind = [], None
    for token in spec.replace(" ", "").split(","):
        name, _, index = token.partition(":")
        if name.isdigit() and not index and kind:   # the '1' of 'gpu:0,1'
            name, index = kind, name
        index = index or "0"                        # 'cpu' means cpu:0
        if name not in ("cpu", "gpu") or not index.isdigit():
            raise ValueError(f"--ctx {spec!r}: cannot read {token!r}; write devices as "
                             "cpu:0,cpu:1 or gpu:0,1.")
        kind = name
        contexts.append(mx.Context(name, int(index)))
    if len(set(contexts)) != len(contexts):
        raise ValueError(f"--ctx {spec!r} names a device twice.")
    gpus = [c for c in contexts if c.device_type == "gpu"]
    if gpus and max(c.device_id for c in gpus) >= mx.context.num_gpus():
        raise ValueError(f"--ctx {spec!r} asks for GPUs but {mx.context.num_gpus()} are visible "
                         "(this MXNet build may be CPU-only: pip install mxnet-cu112==1.9.1).")
    return contexts


class _Subset(gluon.data.Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset, indices):
        self._dataset, self._indices = dataset, list(indices)

    def __len__(self):
        return len(self._indices)

    def __getitem__(self, idx):
        return self._dataset[self._indices[idx]]


def _holdout(dataset, fraction=0.1, seed=0):
    """A fixed split of one dataset into (train, test)."""
    order = np.random.RandomState(seed).permutation(len(dataset))
    cut = max(1, int(len(dataset) * fraction))
    return _Subset(dataset, sorted(order[cut:])), _Subset(dataset, sorted(order[:cut]))


def _image_transforms(image_size, train):
    steps = [transforms.Resize(image_size)] if image_size else []
    if train:
        steps.append(transforms.RandomFlipLeftRight())
    steps.append(transforms.ToTensor())
    return transforms.Compose(steps)


def _rec_classes(path):
    """Number of classes of a RecordIO file: one more than its largest label."""
    record = mx.recordio.MXIndexedRecordIO(os.path.splitext(path)[0] + ".idx", path, "r")
    try:
        labels = [np.max(mx.recordio.unpack(record.read_idx(k))[0].label) for k in record.keys]
    finally:
        record.close()
    return int(max(labels)) + 1


def _cifar10(data_dir):
    root = os.path.expanduser(data_dir)
    try:
        return (gluon.data.vision.CIFAR10(root=root, train=True),
                gluon.data.vision.CIFAR10(root=root, train=False))
    except OSError as err:   # requests' ConnectionError is an OSError
        raise RuntimeError(f"CIFAR-10 is not in {root} and downloading it failed ({err}). Connect "
                           "to the internet, or copy cifar-10-binary.tar.gz there, or use "
                           "--dataset digits (embedded, no download).") from err


def load_dataset(dataset, data_dir, image_size, limit=None):
    """``(train, test, num_classes)`` for a --dataset value."""
    kind, _, where = dataset.partition(":")
    if kind == "digits" and not where:
        train, test, classes = digits(train=True), digits(train=False), 10
    elif kind == "cifar10" and not where:
        train, test = _cifar10(data_dir)
        normalize = transforms.Normalize(_CIFAR_MEAN, _CIFAR_STD)
        train = train.transform_first(transforms.Compose(
            [transforms.RandomFlipLeftRight(), transforms.ToTensor(), normalize]))
        test = test.transform_first(transforms.Compose([transforms.ToTensor(), normalize]))
        classes = 10
    elif kind == "imagefolder" and where:
        if not os.path.isdir(os.path.join(where, "train")):
            raise FileNotFoundError(f"--dataset {dataset}: expected class folders in "
                                    f"{os.path.join(where, 'train')}.")
        train = gluon.data.vision.ImageFolderDataset(os.path.join(where, "train"))
        classes = len(train.synsets)
        held = [os.path.join(where, d) for d in ("val", "test")
                if os.path.isdir(os.path.join(where, d))]
        if held:
            test = gluon.data.vision.ImageFolderDataset(held[0])
            if test.synsets != train.synsets:
                raise ValueError(f"--dataset {dataset}: {held[0]} has classes {test.synsets} but "
                                 f"train has {train.synsets}.")
        else:   # no held-out folder: a fixed 10% of train
            train, test = _holdout(train)
        train = train.transform_first(_image_transforms(image_size, train=True))
        test = test.transform_first(_image_transforms(image_size, train=False))
    elif kind == "rec" and where:
        files = where.split(",")
        for path in files:
            if not (os.path.isfile(path) and os.path.isfile(os.path.splitext(path)[0] + ".idx")):
                raise FileNotFoundError(f"--dataset {dataset}: need {path} and its .idx index "
                                        "(made by im2rec.py).")
        train = gluon.data.vision.ImageRecordDataset(files[0])
        classes = _rec_classes(files[0])
        if len(files) > 1:
            test = gluon.data.vision.ImageRecordDataset(files[1])
        else:
            train, test = _holdout(train)
        train = train.transform_first(_image_transforms(image_size, train=True))
        test = test.transform_first(_image_transforms(image_size, train=False))
    else:
        raise ValueError(f"--dataset {dataset!r} is not one of digits, cifar10, imagefolder:DIR, "
                         "rec:FILE.rec.")
    if limit:
        train, test = train.take(limit), test.take(limit)
    return train, test, classes


def _conv_bn_relu(channels):
    return [nn.Conv2D(channels, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu")]


def small_cnn(classes):
    """The built-in CNN: 3x3 conv/BN/ReLU stages, one max-pool, global pooling, a dense layer."""
    net = nn.HybridSequential()
    net.add(*_conv_bn_relu(32), *_conv_bn_relu(32), nn.MaxPool2D(2, ceil_mode=True),
            *_conv_bn_relu(64), *_conv_bn_relu(64), nn.GlobalAvgPool2D(), nn.Dense(classes))
    return net


def build_model(name, classes):
    """'cnn' or a GluonCV model-zoo name (pretrained=False) with ``classes`` outputs."""
    if name == "cnn":
        return small_cnn(classes)
    from gluoncv import model_zoo

    names = list(model_zoo.get_model_list())
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5)
        raise ValueError(f"--model {name!r} is neither 'cnn' nor a GluonCV model-zoo name"
                         + (f" (close: {', '.join(close)})" if close else "")
                         + ". List them with: python -c \"import gluoncv; "
                         "print(sorted(gluoncv.model_zoo.get_model_list()))\"")
    return model_zoo.get_model(name, pretrained=False, classes=classes)


def optimizer_params(optimizer, lr, momentum, wd):
    """The optimizer's keyword arguments (momentum only for the optimizers that take it)."""
    params = {"learning_rate": lr, "wd": wd}
    if optimizer in ("sgd", "nag"):
        params["momentum"] = momentum
    return params


def lr_schedule(kind, lr, epochs, warmup_epochs, updates_per_epoch):
    """An ``LRSchedule`` callback (GluonCV schedulers after a linear warm-up), or None."""
    warmup = int(round(warmup_epochs * updates_per_epoch))
    if kind == "none" and not warmup:
        return None
    if kind == "none":
        return LRSchedule(lr, warmup_steps=warmup)
    from gluoncv.utils import LRScheduler

    steps = max(2, epochs * updates_per_epoch - warmup)     # GluonCV divides by steps - 1
    options = {"step_iter": [int(steps * 0.5), int(steps * 0.75)]} if kind == "step" else {}
    return LRSchedule(LRScheduler(kind, base_lr=lr, target_lr=0.0, niters=steps, **options),
                      warmup_steps=warmup)


def make_loaders(train_set, test_set, batch_size, multiscale, interval, image_size, buckets, seed,
                 num_workers):
    """Training and test loaders: fixed size, one size per batch drawn from ``multiscale``, or
    (``image_size`` 0) images of their own sizes batched in ``buckets`` shapes."""
    if multiscale:
        return (multiscale_loader(train_set, batch_size, multiscale, interval, seed=seed,
                                  num_workers=num_workers),
                multiscale_loader(test_set, batch_size, [max(multiscale)], shuffle=False,
                                  num_workers=num_workers))
    if image_size == 0:
        train = bucket_loader(train_set, batch_size, buckets, mode="resize", multiple=4, seed=seed,
                              num_workers=num_workers)
        return train, bucket_loader(test_set, batch_size, train.batch_sampler.buckets, shuffle=False,
                                    num_workers=num_workers)
    return (gluon.data.DataLoader(train_set, batch_size=batch_size, shuffle=True, last_batch="keep",
                                  num_workers=num_workers),
            gluon.data.DataLoader(test_set, batch_size=batch_size, num_workers=num_workers))


def worker_shard(dataset, kvstore):
    """This worker's contiguous share of ``dataset`` under a distributed kvstore.

    Shards have equal sizes (the last ``len % workers`` samples are left out), so every
    worker runs the same number of steps per epoch, as synchronous training needs.
    """
    usable = len(dataset) - len(dataset) % kvstore.num_workers
    return dataset.take(usable).shard(kvstore.num_workers, kvstore.rank)


def _seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    mx.random.seed(seed)


def main(args):
    """Train and evaluate as ``args`` (from ``parse_args``) says; return the results.

    Returns
    -------
    dict
        'test_accuracy', 'history' (from ``fit``), 'seconds', 'out' and the trained 'net'.
    """
    ctx = parse_ctx(args.ctx)
    _seed(args.seed)
    train_set, test_set, classes = load_dataset(args.dataset, args.data_dir, args.image_size,
                                                args.limit)
    kvstore = mx.kv.create(args.kvstore) if args.kvstore.startswith("dist") else args.kvstore
    if not isinstance(kvstore, str):
        train_set = worker_shard(train_set, kvstore)
    train_loader, test_loader = make_loaders(train_set, test_set, args.batch_size, args.multiscale,
                                             args.multiscale_interval, args.image_size, args.buckets,
                                             args.seed, args.num_workers)
    net = build_model(args.model, classes)
    variable_shapes = bool(args.multiscale) or args.image_size == 0
    if args.hybridize and variable_shapes:
        net = ShapeCache(net)      # one cached graph per input shape; parameter names unchanged
    net.initialize(mx.init.Xavier(), ctx=ctx)
    if args.hybridize:
        net.hybridize(**({"static_alloc": True, "static_shape": True} if variable_shapes else {}))
    trainer = Trainer(net.collect_params(), args.optimizer,
                      optimizer_params(args.optimizer, args.lr, args.momentum, args.wd),
                      kvstore=kvstore, accumulate=args.accumulate)
    main_process = trainer.rank == 0
    callbacks = []
    schedule = lr_schedule(args.lr_schedule, args.lr, args.epochs, args.warmup_epochs,
                           math.ceil(len(train_loader) / args.accumulate))
    if schedule:
        callbacks.append(schedule)
    if args.out:
        if main_process:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "args.json"), "w") as f:
                json.dump(vars(args), f, indent=1)
        callbacks += [ModelCheckpoint(os.path.join(args.out, "checkpoints"), monitor="val_accuracy",
                                      resume=args.resume),
                      HistoryLogger(os.path.join(args.out, "history.csv")),
                      PlotCurves(os.path.join(args.out, "curves.png"))]
    if main_process:
        log.info("Training %s on %s (%d images, %d classes) on %s.", args.model, args.dataset,
                 len(train_set), classes, ctx)
    tic = time.perf_counter()
    history = fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, train_loader,
                  epochs=args.epochs, ctx=ctx, val_data=test_loader, metrics="acc",
                  callbacks=callbacks, progress=args.progress)
    accuracy = evaluate(net, test_loader, ctx=ctx)["accuracy"]
    seconds = time.perf_counter() - tic
    if main_process:
        print(f"test accuracy: {accuracy:.4f} on {len(test_set)} images "
              f"({len(history.get('epoch', []))} epochs, {seconds:.1f} s)")
    return {"test_accuracy": accuracy, "history": history, "seconds": seconds, "out": args.out,
            "net": net}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        main(parse_args())
    except KeyboardInterrupt:
        sys.exit(130)
