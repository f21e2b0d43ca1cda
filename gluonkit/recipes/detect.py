"""Train a GluonCV detector (YOLOv3, SSD or Faster R-CNN) on images of every size; by default
the embedded shapes.

    gluonkit-detect                                  # shapes set, YOLOv3, CPU
    python -m gluonkit.recipes.detect                # the same
    gluonkit-detect --model faster_rcnn_mobilenet0.25_custom --batch-size 4   # 1 image per step
    gluonkit-detect --multiscale 128,160,192 --multiscale-interval 2
    gluonkit-detect --image-size 0 --buckets 3       # the images' own sizes, 3 padded shapes
    gluonkit-detect --ctx cpu:0,cpu:1 --batch-size 8 --per-device 1 --clip-global-norm 10
    gluonkit-launch -n 2 -s 1 -- gluonkit-detect --kvstore dist_sync --micro-batch 4   # 2 workers, the
                                                     # model of gluonkit-detect --micro-batch 4
    gluonkit-detect --model ssd_300_mobilenet0.25_custom --dataset voc:DIR --image-size 300
    gluonkit-detect --dataset rec:train.rec,val.rec --classes cat,dog   # GluonCV's im2rec files
    gluonkit-detect --dataset coco:annotations/train.json,annotations/val.json   # COCO JSON
    gluonkit-detect --dataset coco:train.json,val.json --images photos/train,photos/val
    gluonkit-detect --dataset coco:train.json,val.json --skip-bad-annotations   # drop bad records
    gluonkit-detect --out runs/detect --resume       # continue after a stop (its own options)

Outputs in --out, a run folder as for ``gluonkit-classify``: checkpoints/, history.csv (loss,
VOC07 AP of every class and mAP, COCO's AP figures per epoch), curves.png (loss, mAP, COCO AP
and per-class AP, lr),
args.json, the best model exported as model-symbol.json, model-0000.params and model.json,
and predictions.png (validation images with the ground truth and the detections over the
score threshold of the best F1).
Ctrl-C or SIGTERM stop after the current step and save a checkpoint --resume continues from.
"""
import argparse
import logging
import os
import time
import warnings

import mxnet as mx
import numpy as np

from gluonkit.recipes import common, global_batch
from gluonkit.recipes import detection as det
from gluonkit.recipes import detection_serving as serving
from gluonkit.recipes import rcnn
from gluonkit.recipes.coco_metric import COCOBatchMetric, COCOMetric, coco_ground_truth
from gluonkit.recipes.detection_plots import (DetectionCurves, best_f1_threshold, draw_detections,
                                              draw_predictions)
from gluonkit.recipes.runs import RunFolder
from gluonkit.recipes.workers import choose_num_workers
from gluonkit.data import Buckets, MultiScaleDataset, MultiScaleSampler, ShapesDetection, detection_labels, \
    load_coco, load_voc
from gluonkit.data.badrecords import LeftOutWarning, summary
from gluonkit.data.images import MAX_ASPECT, MAX_PIXELS, DetectionRecordDataset
from gluonkit.train.checkpoint import Checkpoint
from gluonkit.train.evaluate import evaluate
from gluonkit.train.loop import fit
from gluonkit.train.resume import seed_all
from gluonkit.trainer import Trainer, amp

__all__ = ["parse_args", "load_detection", "make_loaders", "train",
           "draw_predictions", "main"]

log = logging.getLogger("gluonkit")
_MODULE = "gluonkit.recipes.detect"
#: Options that build the network or choose the data: a resumed run must keep them.
_FIXED = ("dataset", "classes", "image_size", "max_size", "buckets", "multiscale",
          "multiscale_interval", "limit", "model", "pretrained_base", "batchnorm", "seed", "metric",
          "exif_orientation", "skip_bad_annotations")


def _class_names(text):
    """``--classes``: 'a,b,c', or a text file with one class name per line (names may then hold
    commas)."""
    if not os.path.isfile(text):
        if text.lower().endswith((".txt", ".names", ".csv")):
            raise argparse.ArgumentTypeError(f"{text}: no such file (a text file of one class "
                                             "name per line, or pass the names as a,b,c).")
        return text.split(",")
    with open(text, encoding="utf-8") as f:
        names = [line.strip() for line in f if line.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text} names no class (one per line).")
    return names


def _build_parser():
    parser = common.build_parser("Train a GluonCV detector with gluonkit (embedded shapes by default).",
                               prog="gluonkit-detect",
                               formatter_class=common.DefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", type=common.dataset_type, default="shapes",
                      help="shapes (embedded, no download) | voc:DIR (Pascal VOC layout: DIR/"
                           "Annotations, DIR/JPEGImages, DIR/ImageSets/Main/{train,val}.txt) | "
                           "rec:TRAIN.rec,VAL.rec (GluonCV detection RecordIO, each with its .idx) | "
                           "coco:TRAIN.json,VAL.json (COCO JSON as CVAT, Label Studio, Roboflow or "
                           "FiftyOne export it)")
    data.add_argument("--images", metavar="DIR",
                      help="coco: the folder that the files' file_name entries are relative to, "
                           "or TRAIN_DIR,VAL_DIR, one per file (default: for instances_SPLIT.json "
                           "images/SPLIT/ or SPLIT/ beside or in its folder, as datumaro and COCO "
                           "2017 lay them out, then the JSON file's folder, then an images/ "
                           "folder in it or beside it)")
    data.add_argument("--exif-orientation", type=common.one_of("apply", "ignore"),
                      help="voc, coco, rec: apply (the default): read photos upright by their EXIF "
                           "orientation, as labelling tools (Label Studio, CVAT) show them and "
                           "draw the boxes; ignore: the pixels as stored, for boxes placed on "
                           "those (GluonCV's habit). Recorded in model.json: gluonkit-predict and "
                           "gluonkit-serve read images the same way. Not for the shapes set, "
                           "which holds no EXIF tag")
    data.add_argument("--skip-bad-annotations", action="store_true",
                      help="coco, voc: leave out the records that cannot be used (an empty box, a "
                           "box more than a pixel past the border, an unknown image or category, "
                           "a repeated id or image file), clip boxes within a pixel of the border, "
                           "and say how many of which kind (default: refuse the file at the first)")
    data.add_argument("--classes", type=_class_names, metavar="NAMES",
                      help="class names in label order, comma-separated or a text file of one "
                           "per line (default: rec: the ids; voc: the names in the training "
                           "annotations, sorted; coco: always the categories' names in id order)")
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
    common.add_num_workers(data)
    common.add_image_limits(data)
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="yolo3_mobilenet0.25_custom",
                       help="a GluonCV YOLOv3 or SSD model-zoo name, e.g. yolo3_mobilenet1.0_custom, "
                            "ssd_512_mobilenet1.0_custom, or a Faster R-CNN: "
                            "faster_rcnn_mobilenet0.25_custom, faster_rcnn_resnet18_v1b_custom")
    model.add_argument("--pretrained-base", action="store_true",
                       help="start the backbone from GluonCV's ImageNet weights (downloaded if missing)")
    model.add_argument("--pretrained-file", type=common.path_type, metavar="PATH",
                       help="Faster R-CNN: start the backbone from this .params file of the same "
                            "GluonCV network (e.g. mobilenet0.25 or resnet18_v1b ImageNet weights)")
    model.add_argument("--batchnorm", type=common.one_of("plain", "frozen", "sync"), default="plain",
                       help="frozen: running statistics only (tiny batches, pretrained backbone); "
                            "sync: SyncBatchNorm over the GPUs of --ctx (MXNet's hangs on several CPUs)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=common.non_negative_int, default=24,
                       help="epochs to train (to reach, with --resume)")
    train.add_argument("--batch-size", type=common.positive_int,
                       help="images per update over every worker, the global batch, split over "
                            "--ctx (default 8; Faster R-CNN: --per-device x devices); with "
                            "--per-worker-batch or --image-size 0: images per worker and step")
    train.add_argument("--per-device", type=common.positive_int, metavar="N",
                       help="images per device in one forward: the --micro-batch, and --batch-size "
                            "N x devices unless given (Faster R-CNN: default 1, each image a forward "
                            "pass of its own); with --per-worker-batch or --image-size 0 it sets "
                            "--batch-size to N x devices")
    global_batch.add_global_batch_options(train)
    train.add_argument("--accumulate", type=common.positive_int, default=1,
                       help="with --per-worker-batch or --image-size 0: steps per update (the "
                            "update equals one batch of them all, except that BatchNorm normalizes "
                            "each batch by its own statistics)")
    train.add_argument("--optimizer", default="sgd", help="any mx.optimizer name: sgd, nag, adam, ...")
    train.add_argument("--lr", type=common.non_negative_float, default=0.01, help="learning rate")
    train.add_argument("--momentum", type=common.non_negative_float, default=0.9, help="for sgd and nag")
    train.add_argument("--wd", type=common.non_negative_float, default=5e-4, help="weight decay")
    train.add_argument("--warmup-epochs", type=common.non_negative_float, default=1.0,
                       help="linear learning-rate warm-up, then a cosine decay to 0")
    train.add_argument("--clip-global-norm", type=float, metavar="NORM",
                       help="clip the update's whole gradient to this norm")
    train.add_argument("--metric", type=common.one_of("voc", "coco"),
                       help="the validation figure that chooses the exported checkpoint: voc "
                            "(VOC07 mAP at IoU 0.5) or coco (COCO's AP over IoU 0.50:0.95); "
                            "default coco for --dataset coco:, else voc")
    train.add_argument("--seed", type=int, default=0, help="seeds Python, NumPy and MXNet")
    train.add_argument("--amp", action="store_true",
                       help="mixed precision (float16) with dynamic loss scaling; GPUs only")
    common.add_device_options(parser)
    common.add_output_options(parser, os.path.join("runs", "detect"), export=False)
    return parser


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``), after any --config file."""
    parser = _build_parser()
    args = common.parse_with_config(parser, argv, fixed=_FIXED,
                                    without={"micro_batch": global_batch.micro_batches_trained})
    common.check_output_options(parser, args)
    common.check_multiscale_interval(parser, args)
    global_batch.keep_earlier_meaning(args)    # a run of an earlier version goes on as it was trained
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
        if args.per_device is None and args.micro_batch is None and \
                (args.batch_size is None or not args.per_worker_batch):
            args.per_device = 1      # one image per device in a forward
        if args.max_size is None:
            args.max_size = round(1.5 * args.image_size)
        if args.max_size < args.image_size:
            parser.error(f"--max-size {args.max_size} is smaller than the shorter side "
                         f"--image-size {args.image_size}.")
    elif args.pretrained_file:
        parser.error("--pretrained-file loads a Faster R-CNN backbone; for YOLOv3 and SSD use "
                     "--pretrained-base.")
    if family == "ssd" and args.batchnorm == "frozen":
        parser.error(f"--batchnorm frozen: {det.nothing_to_freeze(args.model)}; use --batchnorm plain or sync, "
                     "or a YOLOv3 or Faster R-CNN model.")
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
    if args.image_size == 0 and args.micro_batch is not None:
        parser.error("--micro-batch cuts batches of one image size; --image-size 0 trains on batches of each "
                     "worker's own (--batch-size per worker and step): drop --micro-batch.")
    if _per_worker(args):
        if args.per_device:
            if args.batch_size is not None and args.batch_size != args.per_device * len(ctx):
                parser.error(f"--per-device {args.per_device} on {len(ctx)} device(s) makes --batch-size "
                             f"{args.per_device * len(ctx)} per worker and step, not {args.batch_size}; pass one.")
            args.batch_size = args.per_device * len(ctx)
    elif args.per_device:
        if args.micro_batch is not None and args.micro_batch != args.per_device:
            parser.error(f"--per-device {args.per_device} and --micro-batch {args.micro_batch} both set the "
                         "images per device in one forward; pass one.")
        args.micro_batch = args.per_device
        if args.batch_size is None:
            args.batch_size = args.per_device * len(ctx)
    if args.batch_size is None:
        args.batch_size = 8
    if args.image_size != 0:
        global_batch.check_global_batch(parser, args)
    if args.images and not args.dataset.startswith("coco:"):
        parser.error(f"--images applies to --dataset coco:TRAIN.json,VAL.json, not to --dataset "
                     f"{args.dataset}; leave it out.")
    if args.dataset == "shapes" and args.exif_orientation:
        parser.error(f"--exif-orientation {args.exif_orientation} applies to photos read from "
                     "files (--dataset voc:, coco:, rec:); the shapes set is drawn in memory and "
                     "holds no EXIF tag: leave it out.")
    if args.dataset != "shapes" and not args.exif_orientation:
        args.exif_orientation = "apply"
    if args.skip_bad_annotations and not args.dataset.startswith(("coco:", "voc:")):
        parser.error(f"--skip-bad-annotations applies to --dataset coco: and voc:, not to "
                     f"--dataset {args.dataset}; leave it out.")
    args.metric = _metric(args)        # recorded resolved, so a resume compares like with like
    return args


def _per_worker(args):
    """Whether the run trains on batches per worker (``--per-worker-batch``, or the images'
    own sizes in buckets) rather than cut from global batches."""
    return args.per_worker_batch or args.image_size == 0


def _with_difficult(image, label):
    """A RecordIO label (N, 5+) given the VOC 'difficult' column (0) when it has none."""
    if label.shape[1] == 5:
        label = np.concatenate([label, np.zeros((len(label), 1), label.dtype)], axis=1)
    return image, label


def _load_rec(where, names=None, limits=None, upright=True):
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
    train, val = (DetectionRecordDataset(f, upright=upright, **(limits or {}))
                  .transform(_with_difficult) for f in files)
    return train, val, list(names)


def _images_dirs(images_dir):
    """``--images``: None, one folder for both files, or TRAIN_DIR,VAL_DIR (a folder whose
    name holds a comma is taken whole when it exists)."""
    if not images_dir or os.path.isdir(images_dir) or "," not in images_dir:
        return images_dir or None
    dirs = images_dir.split(",")
    if len(dirs) != 2 or not all(dirs):
        raise common.OptionError(f"--images {images_dir}: pass one folder, or two "
                                 "(TRAIN_DIR,VAL_DIR: one per file of --dataset coco:).")
    return dirs


def _load_coco(where, images_dir, options):
    """``(train, val, classes)`` of 'TRAIN.json,VAL.json' (:func:`gluonkit.data.load_coco`)."""
    files = where.split(",")
    if len(files) != 2 or not all(files):
        raise common.OptionError(f"--dataset coco:{where}: pass two files, "
                                 "coco:TRAIN.json,VAL.json.")
    (train, val), classes = load_coco(files, _images_dirs(images_dir), **options)
    if not any(not a["iscrowd"] for a in val.ground_truth()["annotations"]):
        raise common.OptionError(f"--dataset coco:{where}: {files[1]} holds no object to "
                                 "score; validate on a file with annotated images.")
    return train, val, classes


def load_detection(dataset, limit=None, classes=None, *, images_dir=None, upright=True,
                   skip_bad=False, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(train, val, class names)`` for a --dataset value; samples as GluonCV's VOCDetection.

    ``classes`` names the ids of 'rec:' data (default: the ids as strings) and orders the
    names of 'voc:' data (default: the names in the training annotations, sorted); 'coco:'
    data names its classes itself (``classes`` must be None), its images found under
    ``images_dir`` if given (one folder, or 'TRAIN_DIR,VAL_DIR'). Images are read turned by
    their EXIF orientation unless ``upright`` is False; ``skip_bad`` leaves out the bad records
    of 'voc:' and 'coco:' data (see :mod:`gluonkit.data.badrecords`). ``max_pixels`` and
    ``max_aspect`` limit the images read (``gluonkit.data.images``); a VOC folder's and a COCO
    file's images are all checked here, from their headers.
    """
    limits = {"max_pixels": max_pixels, "max_aspect": max_aspect}
    options = dict(limits, upright=upright, skip_bad=skip_bad)
    kind, _, where = dataset.partition(":")
    if kind == "shapes" and not where:
        train, val = ShapesDetection("train"), ShapesDetection("val")
        classes = list(train.classes)
    elif kind == "voc" and where:
        if os.path.isfile(where):
            raise NotADirectoryError(f"--dataset {dataset}: {where} is a file, not a folder; "
                                     "pass the VOC folder (Annotations/, JPEGImages/, "
                                     "ImageSets/Main/).")
        lists = [os.path.join(where, "ImageSets", "Main", f"{s}.txt") for s in ("train", "val")]
        missing = [p for p in lists + [os.path.join(where, "Annotations")] if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"--dataset {dataset}: missing {', '.join(missing)} (Pascal "
                                    "VOC layout: Annotations/, JPEGImages/, ImageSets/Main/).")
        (train, val), classes = load_voc(where, ("train", "val"), classes, **options)
    elif kind == "rec" and where:
        train, val, classes = _load_rec(where, classes, limits, upright)
    elif kind == "coco" and where:
        if classes is not None:
            raise common.OptionError(f"--classes does not apply to --dataset {dataset}: a COCO "
                                     "file names its categories; leave --classes out.")
        train, val, classes = _load_coco(where, images_dir, options)
    else:
        raise common.OptionError(f"--dataset {dataset!r} is not 'shapes', 'voc:DIR', "
                                 "'rec:TRAIN.rec,VAL.rec' or 'coco:TRAIN.json,VAL.json'.")
    if limit:
        train, val = train.take(limit), val.take(limit)
    if kind == "voc" and not any(len(label) for label in val.labels):
        raise common.OptionError(f"--dataset {dataset}: none of the {len(val.labels)} validation images (val.txt"
                                 + (f", --limit {limit}" if limit else "") + ") holds an object, so validation "
                                 "could not score the detector; annotate objects in them, or list images with "
                                 "objects in ImageSets/Main/val.txt.")
    _warn_shared_images(train, val)
    return train, val, classes


def _warn_shared_images(train, val):
    """Warn in one line when validation images (of a VOC folder or a COCO file) are also
    training images: their figures then measure what the network saw."""
    if not hasattr(val, "images"):
        return
    seen = {os.path.abspath(image) for image in train.images}
    shared = [image for image in val.images if os.path.abspath(image) in seen]
    if not shared:
        return
    which = ("the validation images are the training images" if len(shared) == len(val.images)
             else f"{len(shared)} of the {len(val.images)} validation images are training "
                  f"images too (the first: {shared[0]})")
    warnings.warn(f"{which}, so the validation figures measure images the network trains on; "
                  "validate on other images (another file, list or --images folder).",
                  stacklevel=3)


def make_loaders(net, family, train_set, val_set, batch_size, *, image_size, multiscale=None,
                 interval=1, buckets=3, seed=0, num_workers=0, augment="full", max_size=None,
                 global_batches=None):
    """Training and validation loaders at one size per batch, with GluonCV's transforms.

    The size is ``image_size``, or drawn from ``multiscale`` every ``interval`` batches (the
    validation at the largest), or (``image_size`` 0) the bucket of each image's own size:
    images are padded at the bottom and right to one of ``buckets`` shapes, so boxes stay
    valid, and validated the same way. Faster R-CNN (``family`` 'faster_rcnn') resizes each
    image's shorter side to ``image_size`` (the longer within ``max_size``) and batches are
    lists of images at their own sizes.

    ``global_batches`` (not for ``image_size`` 0): ``{'micro_batch', 'devices', 'kvstore', 'resume'}``
    (as ``global_batch.global_train_loader`` takes them) for a training loader
    of this worker's micro-batches of global batches of ``batch_size``
    (``global_batch.global_train_loader``), one size per global batch.
    """
    if family == "faster_rcnn":
        sizes = [(image_size, max_size)]      # the one resize rule, as the sampler's "size"
        train_transform = det.SizedTransform({sizes[0]: rcnn.train_transform(net, image_size, max_size)})
        if global_batches:
            train_loader = _global_loader(train_set, train_transform, rcnn.train_batchify, batch_size, sizes, 1,
                                          seed, num_workers, global_batches)
        else:
            train_sampler = MultiScaleSampler(len(train_set), batch_size, sizes, seed=seed)
            train_loader = det.detection_loader(train_set, train_sampler, train_transform, rcnn.train_batchify,
                                                num_workers, seed)
        val_sampler = MultiScaleSampler(len(val_set), batch_size, sizes, shuffle=False, seed=seed)
        val_loader = det.detection_loader(val_set, val_sampler,
                                          det.SizedTransform({sizes[0]: rcnn.val_transform(image_size, max_size)}),
                                          rcnn.val_batchify, num_workers)
        return train_loader, val_loader
    if image_size == 0:
        train_shapes, val_shapes = det.sample_shapes(train_set), det.sample_shapes(val_set)
        shapes = Buckets.from_data(train_shapes + val_shapes, buckets, mode="pad", multiple=32)
        train_sampler = det.bucket_sampler(train_shapes, batch_size, shapes, True, seed)
        val_sampler = det.bucket_sampler(val_shapes, batch_size, shapes, False, seed)
        train_sizes = val_sizes = shapes.shapes
    else:
        train_sizes = [(s, s) for s in (multiscale or [image_size])]
        val_sizes = [max(train_sizes)]
        train_sampler = None if global_batches else MultiScaleSampler(len(train_set), batch_size, train_sizes,
                                                                      interval, seed=seed)
        val_sampler = MultiScaleSampler(len(val_set), batch_size, val_sizes, shuffle=False, seed=seed)
    pad = image_size == 0
    train_transform = det.SizedTransform(det.train_transforms(net, family, train_sizes, augment), pad)
    if global_batches:
        train_loader = _global_loader(train_set, train_transform, det.train_batchify(family), batch_size,
                                      train_sizes, interval, seed, num_workers, global_batches)
    else:
        train_loader = det.detection_loader(train_set, train_sampler, train_transform, det.train_batchify(family),
                                            num_workers, seed)
    val_loader = det.detection_loader(
        val_set, val_sampler, det.SizedTransform(det.val_transforms(family, val_sizes), pad),
        det.val_batchify(), num_workers)
    return train_loader, val_loader


def _global_loader(train_set, transform, batchify, batch_size, sizes, interval, seed, num_workers, plan):
    """This worker's micro-batches of the global batches of ``train_set`` (see ``make_loaders``)."""
    return global_batch.global_train_loader(MultiScaleDataset(train_set, transform), batch_size, plan["micro_batch"],
                                            plan["devices"], plan["kvstore"], seed, num_workers,
                                            resume=plan["resume"], sizes=sizes, interval=interval,
                                            batchify_fn=batchify)


def _load_best(net, trainer, checkpoints):
    """Load the best checkpoint (by validation mAP; else the latest) into ``net``: the network
    the export holds and the final validation measures."""
    ckpt = Checkpoint(checkpoints)
    if ckpt.best is None and ckpt.latest is None:
        ckpt.save(net, trainer, 0)                  # --epochs 0 and nothing to resume
    ckpt.load(net, best=ckpt.best is not None)


def _metric(args):
    """The --metric that chooses the exported checkpoint: given, or coco for COCO data."""
    return args.metric or ("coco" if args.dataset.startswith("coco:") else "voc")


def _coco_figures(val_set, detections, labels):
    """COCO's AP figures (dict) of ``detections`` in the images' own pixels: against a COCO
    file's ground truth (crowd regions, areas), or one built from the labels."""
    if hasattr(val_set, "ground_truth"):
        metric = COCOMetric(val_set.ground_truth(), val_set.category_ids)
        image_ids = val_set.image_ids
    else:
        sizes = [tuple(val_set[i][0].shape[1::-1]) for i in range(len(val_set))]
        metric, image_ids = COCOMetric(coco_ground_truth(labels, sizes)), range(len(labels))
    for image_id, (ids, scores, boxes) in zip(image_ids, detections):
        metric.update(image_id, boxes, ids, scores)
    return dict(zip(*metric.get()))


def _export(net, family, checkpoints, prefix, shape, preprocessing, classes, score_threshold,
            category_ids=None):
    """Export the best checkpoint, run on inputs of ``shape`` to check it, with
    ``preprocessing`` and GluonCV's evaluation NMS; the run's best-F1 ``score_threshold`` is
    recorded for ``gluonkit-predict``, and a COCO file's ``category_ids`` (one per class)."""
    det.nms_for_eval(net, family)
    return common.export_best(net, checkpoints, prefix, shape,
                              outputs={"ids": classes, "scores": None, "bboxes": None},
                              preprocessing=preprocessing, kind="detector", task="detect",
                              score_threshold=score_threshold,
                              images_per_call=1 if family == "faster_rcnn" else None,
                              **({} if category_ids is None else {"category_ids": category_ids}))


def train(args):
    """Train and validate as ``args`` (from ``parse_args``) says; with ``--out``, export the best
    model and draw its predictions.

    Returns
    -------
    dict
        'map': the VOC07 mAP on the validation set with the boxes in the images' own pixels, of
        the exported network (with ``--out``; else the final one), as ``gluonkit.predict``
        finds them; 'transform_map': the same network's mAP in the validation transform's
        pixels (GluonCV's figure); 'detections': per validation image ``(ids, scores, boxes)``
        in its pixels; 'score_threshold': the best F1's; 'history', 'seconds', 'out', the
        trained 'net' and 'export' (the exported model's metadata, or None).
    """
    with RunFolder(args.out) as folder:     # held by this process until training ends
        return _train(args, folder)


def _train(args, folder):
    ctx = common.parse_ctx(args.ctx)
    if args.amp:
        amp.init(ctx)     # before anything is loaded, built or written
    args.num_workers = choose_num_workers(args.num_workers, args.dataset)
    seed_all(args.seed)
    family = det.model_family(args.model)
    with common.warnings_logged(leave=LeftOutWarning):     # the last lines say what was left out
        train_set, val_set, classes = load_detection(args.dataset, args.limit, args.classes,
                                                     images_dir=args.images,
                                                     upright=args.exif_orientation != "ignore",
                                                     skip_bad=args.skip_bad_annotations,
                                                     max_pixels=args.max_image_pixels,
                                                     max_aspect=args.max_aspect_ratio)
    left_out = [getattr(dataset, "left_out", None) for dataset in (train_set, val_set)]
    monitor = "val_coco_AP" if _metric(args) == "coco" else "val_mAP"
    rcnn_options = {}
    if family == "faster_rcnn":         # before sharding: the same anchors on every worker
        rcnn_options = {"scales": rcnn.fit_rpn_scales(train_set, args.image_size, args.max_size),
                        "short": args.image_size, "max_size": args.max_size,
                        "pretrained_file": args.pretrained_file}
    kvstore = common.create_kvstore(args.kvstore)
    job_images, per_worker = len(train_set), _per_worker(args)
    if family == "faster_rcnn" and not per_worker and args.micro_batch > 1 and args.batchnorm != "frozen" and \
            global_batch.workers_of(kvstore)[1] > 1:
        # its BatchNorm layers update their statistics once per image, the merge once per micro-batch
        raise common.OptionError(f"{args.micro_batch} images per device in a micro-batch (--micro-batch or "
                                 "--per-device): Faster R-CNN on several workers runs one, so that its BatchNorm "
                                 "statistics merge into one process's; use --micro-batch 1 (the default) and the "
                                 "same --batch-size, or --batchnorm frozen.")
    if not isinstance(kvstore, str) and per_worker:
        train_set = common.worker_shard(train_set, kvstore)
    net = det.build_detector(args.model, classes, pretrained_base=args.pretrained_base,
                             batchnorm=args.batchnorm, num_devices=len(ctx), **rcnn_options)
    det.initialize(net, ctx)
    if family == "faster_rcnn":
        rcnn.place_target_generator(net, ctx)
    plan = None if per_worker else {"micro_batch": args.micro_batch, "devices": len(ctx), "kvstore": kvstore,
                                    "resume": args.resume}
    train_loader, val_loader = make_loaders(
        det.one_image_network(net, args.model, classes, args.batchnorm), family, train_set, val_set,
        args.batch_size, image_size=args.image_size,
        multiscale=args.multiscale, interval=args.multiscale_interval, buckets=args.buckets,
        seed=common.worker_seed(args.seed, kvstore) if per_worker else args.seed, num_workers=args.num_workers,
        augment=args.augment, max_size=args.max_size, global_batches=plan)
    accumulate = args.accumulate if per_worker else train_loader.batch_sampler.sampler.accumulate
    if not per_worker:      # values before the Trainer, which broadcasts them then (not at the first update)
        size = max(val_loader.batch_sampler.sizes)[0]
        inputs = [(3, size, size), (1, 4), (1, 1)] if family == "faster_rcnn" else (3, size, size)   # boxes, labels
        global_batch.initialize_without_forward(net, inputs, ctx[0], mx.init.Uniform(),
                                                train_mode=family == "faster_rcnn")
    det.nms_for_eval(net, family)
    trainer = Trainer(net.collect_params(), args.optimizer,
                      common.optimizer_params(args.optimizer, args.lr, args.momentum, args.wd),
                      kvstore=kvstore, accumulate=accumulate,
                      **({} if args.clip_global_norm is None else {"clip_global_norm": args.clip_global_norm}))
    main_process = trainer.rank == 0
    updates = global_batch.updates_per_epoch(trainer, train_loader, accumulate, per_worker)
    callbacks = [common.lr_schedule("cosine", args.lr, args.epochs, args.warmup_epochs, updates)]
    if not per_worker:      # before the checkpoints, which then hold the statistics of one process
        callbacks += global_batch.merge_callbacks(train_loader)
    checkpoints = os.path.join(args.out, "checkpoints") if args.out else None
    if args.out:
        if main_process:
            folder.take(resume=args.resume, overwrite=args.overwrite)
        callbacks += common.output_callbacks(args.out, monitor, args.resume, args=args,
                                             curves=lambda path: DetectionCurves(path, classes))
    if main_process:
        log.info("Batches: %s", global_batch.describe_per_worker(args.batch_size, accumulate, updates)
                 if per_worker else global_batch.describe(train_loader, len(ctx)))
        shards = f" split over {trainer.num_workers} workers" if trainer.num_workers > 1 and per_worker else ""
        log.info("Training %s on %s (%d images%s, classes %s) on %s; val_* in the history and the "
                 "epoch lines are on the validation split (%d images), whose %s chooses the "
                 "checkpoint to export.", args.model, args.dataset, job_images, shards,
                 ", ".join(classes), ctx, len(val_set), monitor)
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
                  metrics=[det.voc_metric(classes), COCOBatchMetric()], eval_fn=eval_fn)
    seconds = time.perf_counter() - tic
    exporting = args.out and main_process
    if exporting:
        _load_best(net, trainer, checkpoints)
    transform_map = evaluate(net, val_loader, ctx=ctx, metrics=det.voc_metric(classes),
                             eval_fn=eval_fn)["mAP"]
    padded = args.image_size == 0 and family != "faster_rcnn"
    detections = serving.validation_detections(net, val_loader, val_set, padded, ctx[0])
    labels = [val_set[i][1] for i in range(len(val_set))]
    mean_ap = serving.original_pixel_map(detections, labels, classes)["mAP"]
    coco = _coco_figures(val_set, detections, labels)
    thresh = best_f1_threshold([serving.kept(d) for d in detections], labels)
    metadata = None
    if exporting:
        buckets = None if args.image_size else val_loader.batch_sampler.sampler.buckets.shapes
        size = max(val_loader.batch_sampler.sizes) if args.image_size else \
            max(buckets, key=lambda b: b[0] * b[1])
        shape = (3, size[0], size[0]) if family == "faster_rcnn" else (3,) + tuple(size)
        cells = rcnn.proposal_cells(net) if family == "faster_rcnn" else None
        preprocessing = dict(serving.serving_preprocessing(family, size, buckets, cells),
                             exif_orientation=args.exif_orientation or "apply")
        metadata = _export(net, family, checkpoints, os.path.join(args.out, "model"), shape,
                           preprocessing, classes, thresh, getattr(val_set, "category_ids", None))
        log.info("Drawing detections scoring %.2f or more (the best F1 on the validation set).", thresh)
        draw_detections(val_set, detections, classes, os.path.join(args.out, "predictions.png"),
                        thresh=thresh)
    if main_process:
        which = "the exported model" if metadata else "the final network"
        print(f"VOC07 mAP: {mean_ap:.4f} on {len(val_set)} images of the validation split, "
              f"boxes in their own pixels "
              f"({which}; {transform_map:.4f} in the validation transform's pixels; "
              f"{len(history.get('epoch', []))} epochs, {sum(history.get('time', [])):.1f} s of "
              "training over every start of the run)")
        print("COCO AP: {coco_AP:.4f} (AP50 {coco_AP50:.4f}, AP75 {coco_AP75:.4f}, small "
              "{coco_AP_small:.4f}, medium {coco_AP_medium:.4f}, large {coco_AP_large:.4f}; "
              "pycocotools' COCOeval, boxes in their own pixels; -1: no such object)".format(**coco))
    if metadata:
        print(common.export_summary(metadata, history, monitor))
        print(f"score threshold {thresh:.2f} (the best F1 on the validation set), recorded for "
              "gluonkit-predict")
    if main_process:
        for line in _data_notes(left_out, val_set, detections):
            print(line)
    return {"map": mean_ap, "coco": coco, "transform_map": transform_map, "detections": detections,
            "score_threshold": thresh, "history": history, "seconds": seconds, "out": args.out,
            "net": net, "export": metadata}


def _data_notes(left_out, val_set, detections):
    """The run's last lines on its data and outputs: the records --skip-bad-annotations left
    out (``left_out``: the training and validation data's), a COCO file that numbers an
    annotation 0 (pycocotools scores it otherwise) and validation images on which the
    network's boxes are not finite."""
    notes = [f"{split} data: {summary(records)}"
             for split, records in zip(("training", "validation"), left_out) if records]
    if getattr(val_set, "zero_annotation_id", False):
        notes.append(f"note: {val_set.path} numbers an annotation 0 (as Label Studio's converter "
                     "does); pycocotools' COCOeval counts a ground-truth annotation of id 0 as "
                     "never matched, so its figures on that file (e.g. of gluonkit-predict --coco "
                     "output) come out lower than the COCO AP above, which numbers the "
                     "annotations from 1: renumber the file's ids from 1 to compare.")
    if detections.nonfinite:
        first = getattr(val_set, "images", None)
        name = f" (the first: {first[detections.nonfinite[0]]})" if first else ""
        notes.append(f"warning: the network gives non-finite box corners (NaN or infinity) on "
                     f"{len(detections.nonfinite)} of {len(val_set)} validation images{name}, "
                     "which gluonkit-predict refuses: the training was too short or diverged; "
                     "train longer (--epochs), at a lower --lr, or with --clip-global-norm.")
    return notes


def main(argv=None):
    """The ``gluonkit-detect`` command: parse ``argv`` (default: the command line), train.

    As a command, MXNet runs one OpenMP thread per usable CPU, waiting passively, unless
    ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` are set (:mod:`gluonkit.commands`).
    """
    common.run_command(_MODULE, parse_args, train, argv)


if __name__ == "__main__":
    main()
