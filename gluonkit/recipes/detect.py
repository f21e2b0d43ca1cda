"""Train a GluonCV detector (YOLOv3, SSD or Faster R-CNN) on images of every size; by default
the embedded shapes.

    gluonkit-detect                                  # shapes set, YOLOv3, CPU
    python -m gluonkit.recipes.detect                # the same
    gluonkit-detect --model faster_rcnn_mobilenet0.25_custom --accumulate 4   # 1 image per step
    gluonkit-detect --multiscale 128,160,192 --multiscale-interval 2
    gluonkit-detect --image-size 0 --buckets 3       # the images' own sizes, 3 padded shapes
    gluonkit-detect --ctx cpu:0,cpu:1 --per-device 1 --accumulate 4 --clip-global-norm 10
    gluonkit-detect --model ssd_300_mobilenet0.25_custom --dataset voc:DIR --image-size 300
    gluonkit-detect --dataset rec:train.rec,val.rec --classes cat,dog   # GluonCV's im2rec files
    gluonkit-detect --out runs/detect --resume       # continue after a stop (its own options)

Outputs in --out, a run folder as for ``gluonkit-classify``: checkpoints/, history.csv (loss,
VOC07 AP of every class and mAP per epoch), curves.png (loss, mAP and per-class AP, lr),
args.json, the best model exported as model-symbol.json, model-0000.params and model.json,
and predictions.png (validation images with the ground truth and the detections over the
score threshold of the best F1).
Ctrl-C or SIGTERM stop after the current step and save a checkpoint --resume continues from.
"""
import logging
import math
import os
import time

import mxnet as mx
import numpy as np

from gluonkit.recipes import common
from gluonkit.recipes import detection as det
from gluonkit.recipes import rcnn
from gluonkit.recipes.detection_plots import DetectionCurves, best_threshold, draw_predictions
from gluonkit.recipes.runs import RunFolder
from gluonkit.data import Buckets, MultiScaleSampler, ShapesDetection, detection_labels, load_voc
from gluonkit.data.images import DetectionRecordDataset
from gluonkit.train.checkpoint import Checkpoint
from gluonkit.train.loop import evaluate, fit
from gluonkit.train.resume import seed_all
from gluonkit.trainer import Trainer, amp

__all__ = ["parse_args", "load_detection", "make_loaders", "train",
           "draw_predictions", "main"]

log = logging.getLogger("gluonkit")
_MODULE = "gluonkit.recipes.detect"
#: Options that build the network or choose the data: a resumed run must keep them.
_FIXED = ("dataset", "classes", "image_size", "max_size", "buckets", "multiscale",
          "multiscale_interval", "limit", "model", "pretrained_base", "batchnorm", "seed")


def _build_parser():
    parser = common.build_parser("Train a GluonCV detector with gluonkit (embedded shapes by default).",
                               prog="gluonkit-detect",
                               formatter_class=__import__("argparse").ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="shapes",
                      help="shapes (embedded, no download) | voc:DIR (Pascal VOC layout: DIR/"
                           "Annotations, DIR/JPEGImages, DIR/ImageSets/Main/{train,val}.txt) | "
                           "rec:TRAIN.rec,VAL.rec (GluonCV detection RecordIO, each with its .idx)")
    data.add_argument("--classes", type=lambda text: text.split(","), metavar="NAMES",
                      help="class names in label order (default: rec: the ids; voc: the names "
                           "in the training annotations, sorted)")
    data.add_argument("--image-size", type=common.non_negative_int, default=96,
                      help="train and test at this square size; 0 keeps the images' own sizes, "
                           "padded (bottom and right, boxes unchanged) to --buckets shapes; "
                           "Faster R-CNN: the shorter side (aspect kept, no padding)")
    data.add_argument("--max-size", type=common.positive_int, metavar="PIXELS",
                      help="Faster R-CNN: the longest side at most (default 1.5 x --image-size)")
    data.add_argument("--buckets", type=common.positive_int, default=3, help="shapes for --image-size 0")
    data.add_argument("--multiscale", type=common.sizes_type, metavar="SIZES",
                      help="train each batch at a square size drawn from these, e.g. 96,128,160 "
                           "(test at the largest)")
    data.add_argument("--multiscale-interval", type=common.positive_int, default=1, metavar="N",
                      help="batches per drawn size")
    data.add_argument("--augment", type=common.one_of("full", "flip"), default="flip",
                      help="YOLOv3 training augmentation: full (GluonCV's: colour, zoom-out, crop, "
                           "flip) or flip (colour and flip only: objects keep their sizes)")
    data.add_argument("--limit", type=common.positive_int, metavar="N",
                      help="use only the first N training and N validation images")
    data.add_argument("--num-workers", type=common.non_negative_int, default=0,
                      help="data loading processes")
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="yolo3_mobilenet0.25_custom",
                       help="a GluonCV YOLOv3 or SSD model-zoo name, e.g. yolo3_mobilenet1.0_custom, "
                            "ssd_512_mobilenet1.0_custom, or a Faster R-CNN: "
                            "faster_rcnn_mobilenet0.25_custom, faster_rcnn_resnet18_v1b_custom")
    model.add_argument("--pretrained-base", action="store_true",
                       help="start the backbone from GluonCV's ImageNet weights (downloaded if missing)")
    model.add_argument("--pretrained-file", metavar="PATH",
                       help="Faster R-CNN: start the backbone from this .params file of the same "
                            "GluonCV network (e.g. mobilenet0.25 or resnet18_v1b ImageNet weights)")
    model.add_argument("--batchnorm", type=common.one_of("plain", "frozen", "sync"), default="plain",
                       help="frozen: running statistics only (tiny batches, pretrained backbone); "
                            "sync: SyncBatchNorm over the GPUs of --ctx (MXNet's hangs on several CPUs)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=common.non_negative_int, default=24,
                       help="epochs to train (to reach, with --resume)")
    train.add_argument("--batch-size", type=common.positive_int,
                       help="images per batch, split over --ctx (default 8; Faster R-CNN: "
                            "--per-device x devices)")
    train.add_argument("--per-device", type=common.positive_int, metavar="N",
                       help="images per device per batch (sets --batch-size to N x devices; "
                            "Faster R-CNN: default 1, each image a forward pass of its own)")
    train.add_argument("--accumulate", type=common.positive_int, default=1,
                       help="batches per update (the update equals one batch of them all)")
    train.add_argument("--optimizer", default="sgd", help="any mx.optimizer name: sgd, nag, adam, ...")
    train.add_argument("--lr", type=common.non_negative_float, default=0.01, help="learning rate")
    train.add_argument("--momentum", type=common.non_negative_float, default=0.9, help="for sgd and nag")
    train.add_argument("--wd", type=common.non_negative_float, default=5e-4, help="weight decay")
    train.add_argument("--warmup-epochs", type=common.non_negative_float, default=1.0,
                       help="linear learning-rate warm-up, then a cosine decay to 0")
    train.add_argument("--clip-global-norm", type=float, metavar="NORM",
                       help="clip the update's whole gradient to this norm")
    train.add_argument("--seed", type=int, default=0, help="seeds Python, NumPy and MXNet")
    train.add_argument("--amp", action="store_true",
                       help="mixed precision (float16) with dynamic loss scaling; GPUs only")
    common.add_device_options(parser)
    common.add_output_options(parser, os.path.join("runs", "detect"), export=False)
    return parser


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``), after any --config file."""
    parser = _build_parser()
    args = common.parse_with_config(parser, argv, fixed=_FIXED)
    common.check_output_options(parser, args)
    if args.multiscale and args.image_size == 0:
        parser.error("--multiscale and --image-size 0 both choose the input sizes; pass one.")
    if args.clip_global_norm is not None and not args.clip_global_norm > 0:
        parser.error(f"--clip-global-norm must be positive, got {args.clip_global_norm}.")
    try:
        family = det.model_family(args.model)
    except ValueError as err:
        parser.error(str(err))
    if family == "faster_rcnn":
        if args.multiscale or args.image_size < 64:
            parser.error(f"--model {args.model} trains on each image's own size: --image-size is "
                         "its shorter side (64 or more) and --multiscale does not apply.")
        if args.batchnorm == "sync":
            parser.error("--batchnorm sync: Faster R-CNN sees one image per device; use frozen "
                         "(a pretrained backbone) or plain.")
        if args.per_device is None and args.batch_size is None:
            args.per_device = 1
        if args.max_size is None:
            args.max_size = round(1.5 * args.image_size)
        if args.max_size < args.image_size:
            parser.error(f"--max-size {args.max_size} is smaller than the shorter side "
                         f"--image-size {args.image_size}.")
    elif args.pretrained_file:
        parser.error("--pretrained-file loads a Faster R-CNN backbone; for YOLOv3 and SSD use "
                     "--pretrained-base.")
    if args.pretrained_file and not os.path.isfile(args.pretrained_file):
        parser.error(f"--pretrained-file {args.pretrained_file}: no such file.")
    ctx = common.parse_ctx(args.ctx)
    if args.amp:
        try:
            amp.check_available(ctx)
        except (ValueError, RuntimeError) as err:
            parser.error(f"--amp: {err}")
    if args.batchnorm == "sync" and len(ctx) > 1 and any(c.device_type == "cpu" for c in ctx):
        parser.error(f"--batchnorm sync: MXNet 1.9.1's SyncBatchNorm hangs on several CPU devices "
                     f"(--ctx {args.ctx}); use it with GPUs, or --batchnorm frozen / plain on CPUs.")
    if args.per_device:
        args.batch_size = args.per_device * len(ctx)
    elif args.batch_size is None:
        args.batch_size = 8
    return args


def _with_difficult(image, label):
    """A RecordIO label (N, 5+) given the VOC 'difficult' column (0) when it has none."""
    if label.shape[1] == 5:
        label = np.concatenate([label, np.zeros((len(label), 1), label.dtype)], axis=1)
    return image, label


def _load_rec(where, names=None):
    """``(train, val, classes)`` of 'TRAIN.rec,VAL.rec' (GluonCV's RecordFileDetection)."""
    files = where.split(",")
    if len(files) != 2:
        raise common.OptionError(f"--dataset rec:{where}: pass two files, rec:TRAIN.rec,VAL.rec.")
    missing = [p for f in files for p in (f, os.path.splitext(f)[0] + ".idx") if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"--dataset rec:{where}: missing {', '.join(missing)} (a .rec "
                                "and its .idx, as GluonCV's detection im2rec writes them).")
    checked = files
    if names is None:   # the training file's ids; the validation file may hold no others
        largest = max((int(ids.max()) for ids in detection_labels(files[0]) if ids.size), default=-1)
        names, checked = [str(i) for i in range(largest + 1)], files[1:]
        fix = f"{files[0]} holds no other: relabel it, or add training images of that class"
    else:
        fix = f"--classes names {len(names)} ({','.join(names)}): name every class"
    for path in checked:
        detection_labels(path, len(names), fix)
    train, val = (DetectionRecordDataset(f).transform(_with_difficult) for f in files)
    return train, val, list(names)


def load_detection(dataset, limit=None, classes=None):
    """``(train, val, class names)`` for a --dataset value; samples as GluonCV's VOCDetection.

    ``classes`` names the ids of 'rec:' data (default: the ids as strings) and orders the
    names of 'voc:' data (default: the names in the training annotations, sorted).
    """
    kind, _, where = dataset.partition(":")
    if kind == "shapes" and not where:
        train, val = ShapesDetection("train"), ShapesDetection("val")
        classes = list(train.classes)
    elif kind == "voc" and where:
        lists = [os.path.join(where, "ImageSets", "Main", f"{s}.txt") for s in ("train", "val")]
        missing = [p for p in lists + [os.path.join(where, "Annotations")] if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"--dataset {dataset}: missing {', '.join(missing)} (Pascal "
                                    "VOC layout: Annotations/, JPEGImages/, ImageSets/Main/).")
        (train, val), classes = load_voc(where, ("train", "val"), classes)
    elif kind == "rec" and where:
        train, val, classes = _load_rec(where, classes)
    else:
        raise common.OptionError(f"--dataset {dataset!r} is not 'shapes', 'voc:DIR' or "
                                 "'rec:TRAIN.rec,VAL.rec'.")
    if limit:
        train, val = train.take(limit), val.take(limit)
    return train, val, classes


def make_loaders(net, family, train_set, val_set, batch_size, *, image_size, multiscale=None,
                 interval=1, buckets=3, seed=0, num_workers=0, augment="full", max_size=None):
    """Training and validation loaders at one size per batch, with GluonCV's transforms.

    The size is ``image_size``, or drawn from ``multiscale`` every ``interval`` batches (the
    validation at the largest), or (``image_size`` 0) the bucket of each image's own size:
    images are padded at the bottom and right to one of ``buckets`` shapes, so boxes stay
    valid, and validated the same way. Faster R-CNN (``family`` 'faster_rcnn') resizes each
    image's shorter side to ``image_size`` (the longer within ``max_size``) and batches are
    lists of images at their own sizes.
    """
    if family == "faster_rcnn":
        sizes = [(image_size, max_size)]      # the one resize rule, as the sampler's "size"
        loaders = []
        for dataset, transform, batchify, shuffle in [
                (train_set, rcnn.train_transform(net, image_size, max_size), rcnn.train_batchify, True),
                (val_set, rcnn.val_transform(image_size, max_size), rcnn.val_batchify, False)]:
            sampler = MultiScaleSampler(len(dataset), batch_size, sizes, shuffle=shuffle, seed=seed)
            loaders.append(det.detection_loader(dataset, sampler, det.SizedTransform({sizes[0]: transform}),
                                                batchify, num_workers))
        return tuple(loaders)
    if image_size == 0:
        train_shapes, val_shapes = det.sample_shapes(train_set), det.sample_shapes(val_set)
        shapes = Buckets.from_data(train_shapes + val_shapes, buckets, mode="pad", multiple=32)
        train_sampler = det.bucket_sampler(train_shapes, batch_size, shapes, True, seed)
        val_sampler = det.bucket_sampler(val_shapes, batch_size, shapes, False, seed)
        train_sizes = val_sizes = shapes.shapes
    else:
        train_sizes = [(s, s) for s in (multiscale or [image_size])]
        val_sizes = [max(train_sizes)]
        train_sampler = MultiScaleSampler(len(train_set), batch_size, train_sizes, interval, seed=seed)
        val_sampler = MultiScaleSampler(len(val_set), batch_size, val_sizes, shuffle=False, seed=seed)
    pad = image_size == 0
    train_loader = det.detection_loader(
        train_set, train_sampler,
        det.SizedTransform(det.train_transforms(net, family, train_sizes, augment), pad),
        det.train_batchify(family), num_workers)
    val_loader = det.detection_loader(
        val_set, val_sampler, det.SizedTransform(det.val_transforms(family, val_sizes), pad),
        det.val_batchify(), num_workers)
    return train_loader, val_loader


def _export_best(net, trainer, family, checkpoints, prefix, size, classes):
    """Load the best checkpoint (by validation mAP) into ``net`` and export it for inference,
    with GluonCV's validation preprocessing and NMS settings.

    ``size`` is the input's (height, width), or for Faster R-CNN (shorter side, max size).
    """
    ckpt = Checkpoint(checkpoints)
    if ckpt.best is None and ckpt.latest is None:
        ckpt.save(net, trainer, 0)                  # --epochs 0 and nothing to resume
    det.nms_for_eval(net, family)
    resize = {"resize": list(size), "resize_short": None, "max_size": None}
    shape = (3,) + tuple(size)
    if family == "faster_rcnn":
        resize = {"resize": None, "resize_short": size[0], "max_size": size[1]}
        shape = (3, size[0], size[0])
    preprocessing = {"channels": 3, **resize, "crop": None, "scale": 1 / 255,
                     "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                     "layout": "NCHW"}    # as GluonCV's val transforms
    return common.export_best(net, checkpoints, prefix, shape,
                              outputs={"ids": classes, "scores": None, "bboxes": None},
                              preprocessing=preprocessing, kind="detector", task="detect")


def train(args):
    """Train and validate as ``args`` (from ``parse_args``) says; with ``--out``, export the best
    model and draw its predictions.

    Returns
    -------
    dict
        'map' (VOC07 mAP of the final network on the validation set), 'history', 'seconds',
        'out', the trained 'net' and 'export' (the exported model's metadata, or None).
    """
    with RunFolder(args.out) as folder:     # held by this process until training ends
        return _train(args, folder)


def _train(args, folder):
    ctx = common.parse_ctx(args.ctx)
    if args.amp:
        amp.init(ctx)     # before anything is loaded, built or written
    seed_all(args.seed)
    family = det.model_family(args.model)
    train_set, val_set, classes = load_detection(args.dataset, args.limit, args.classes)
    rcnn_options = {}
    if family == "faster_rcnn":         # before sharding: the same anchors on every worker
        rcnn_options = {"scales": rcnn.fit_rpn_scales(train_set, args.image_size, args.max_size),
                        "short": args.image_size, "max_size": args.max_size,
                        "pretrained_file": args.pretrained_file}
    kvstore = common.create_kvstore(args.kvstore)
    if not isinstance(kvstore, str):
        train_set = common.worker_shard(train_set, kvstore)
    net = det.build_detector(args.model, classes, pretrained_base=args.pretrained_base,
                             batchnorm=args.batchnorm, num_devices=len(ctx), **rcnn_options)
    net.initialize(ctx=ctx)
    if family == "faster_rcnn":
        rcnn.place_target_generator(net, ctx)
    train_loader, val_loader = make_loaders(
        det.one_image_network(net, args.model, classes, args.batchnorm), family, train_set, val_set,
        args.batch_size, image_size=args.image_size,
        multiscale=args.multiscale, interval=args.multiscale_interval, buckets=args.buckets,
        seed=args.seed, num_workers=args.num_workers, augment=args.augment, max_size=args.max_size)
    det.nms_for_eval(net, family)
    trainer = Trainer(net.collect_params(), args.optimizer,
                      common.optimizer_params(args.optimizer, args.lr, args.momentum, args.wd),
                      kvstore=kvstore, accumulate=args.accumulate,
                      **({} if args.clip_global_norm is None else {"clip_global_norm": args.clip_global_norm}))
    main_process = trainer.rank == 0
    callbacks = [common.lr_schedule("cosine", args.lr, args.epochs, args.warmup_epochs,
                                    math.ceil(len(train_loader) / args.accumulate))]
    checkpoints = os.path.join(args.out, "checkpoints") if args.out else None
    if args.out:
        if main_process:
            folder.take(resume=args.resume, overwrite=args.overwrite)
            common.save_args(args, args.out)
        callbacks += common.output_callbacks(args.out, "val_mAP", args.resume,
                                             curves=lambda path: DetectionCurves(path, classes))
    if main_process:
        log.info("Training %s on %s (%d images, classes %s) on %s; val_* in the history and the "
                 "epoch lines are on the validation split (%d images), whose val_mAP chooses the "
                 "checkpoint to export.", args.model, args.dataset, len(train_set),
                 ", ".join(classes), ctx, len(val_set))
    batch_fn = {"yolo3": det.yolo3_batch_fn, "ssd": det.SSDBatch,
                "faster_rcnn": rcnn.FasterRCNNBatch}[family]
    batch_fn = batch_fn if family == "yolo3" else batch_fn()
    eval_fn = rcnn.eval_fn if family == "faster_rcnn" else det.detection_eval_fn
    if args.amp:
        amp.init_trainer(trainer)
        batch_fn = amp.scaled_batch_fn(batch_fn, trainer)
    tic = time.perf_counter()
    history = fit(net, None, trainer, train_loader, epochs=args.epochs, ctx=ctx, callbacks=callbacks,
                  progress=args.progress, batch_fn=batch_fn, val_data=val_loader,
                  metrics=det.voc_metric(classes), eval_fn=eval_fn)
    mean_ap = evaluate(net, val_loader, ctx=ctx, metrics=det.voc_metric(classes),
                       eval_fn=eval_fn)["mAP"]
    seconds = time.perf_counter() - tic
    metadata = None
    if args.out and main_process:
        size = max(val_loader.batch_sampler.sizes) if args.image_size else \
            max(train_loader.batch_sampler.sampler.buckets.shapes)
        metadata = _export_best(net, trainer, family, checkpoints, os.path.join(args.out, "model"),
                                size, classes)
        transform = rcnn.val_transform(*size) if family == "faster_rcnn" else \
            det.val_transforms(family, [size])[size]
        thresh = best_threshold(net, transform, val_set, ctx=ctx[0])
        log.info("Drawing detections scoring %.2f or more (the best F1 on the validation set).", thresh)
        draw_predictions(net, transform, val_set, classes, os.path.join(args.out, "predictions.png"),
                         thresh=thresh, ctx=ctx[0])
    if main_process:
        print(f"VOC07 mAP: {mean_ap:.4f} on {len(val_set)} images of the validation split, by the "
              f"final network ({len(history.get('epoch', []))} epochs, {seconds:.1f} s)")
    if metadata:
        print(common.export_summary(metadata, history, "val_mAP"))
    return {"map": mean_ap, "history": history, "seconds": seconds, "out": args.out, "net": net,
            "export": metadata}


def main(argv=None):
    """The ``gluonkit-detect`` command: parse ``argv`` (default: the command line), train.

    Run as a command (``argv`` None), it first gives MXNet one OpenMP thread per core and
    passive waiting unless ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` are set.
    """
    common.run_command(_MODULE, parse_args, train, argv)


if __name__ == "__main__":
    main()
