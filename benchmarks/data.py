"""The detection input pipeline: gluonkit's readers against GluonCV's own on the same JPEG files.

    python -m benchmarks.data              # 96x96 and 400x300 images, 0 and 2 workers (~3 min)
    python -m benchmarks.data --quick      # seconds, for the test suite

Two measurements, in one process, repeats interleaved:

- *pipeline*: images/s of a whole epoch of decode, augmentation and batching: a VOC folder
  read by ``gluonkit.data.load_voc`` (every annotation checked, every image's header checked
  before it is decoded) against GluonCV's ``CustomVOCDetectionBase`` (``mx.image.imread``), both
  through GluonCV's ``YOLO3DefaultTrainTransform`` and the same ``DataLoader``, batchify and
  number of workers.
- *read*: the CPU time (``time.process_time``, every thread of the process) of reading one image
  by ``gluonkit.data.images.read_image`` (the header checked, then one synchronous OpenCV
  decode), by MXNet's asynchronous ``imdecode`` waited for image by image (what
  ``read_image`` did after its checks until it decoded with OpenCV), and by
  ``mx.image.imread`` (GluonCV's reader: no checks, the decode not waited for; the clock
  waits for all of them at the end). Run it with another gluonkit on the path to measure that
  one's ``read_image``.
"""
import os
import statistics
import tempfile
import time

import cv2
import mxnet as mx
import numpy as np
from gluoncv.data import CustomVOCDetectionBase
from gluoncv.data.batchify import Pad, Stack, Tuple
from gluoncv.data.transforms.presets.yolo import YOLO3DefaultTrainTransform
from mxnet import gluon

from gluonkit.data import load_voc
from gluonkit.data.images import read_image

from ._common import add_output_options, apply_defaults, benchmark_parser, parse_with_config, \
    set_env, write_outputs
from ._harness import machine, markdown_table

__all__ = ["write_voc", "pipeline", "read_costs", "main"]

_CLASSES = ("box",)


def write_voc(root, count, width, height, seed=0):
    """A VOC folder of ``count`` JPEG images of ``width`` x ``height`` (smooth noise, as photos
    compress) with one to three boxes each, all listed in ImageSets/Main/train.txt."""
    rng = np.random.RandomState(seed)
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for i in range(count):
        pixels = cv2.GaussianBlur(rng.randint(0, 256, (height, width, 3), np.uint8), (5, 5), 0)
        cv2.imwrite(os.path.join(root, "JPEGImages", f"{i}.jpg"), pixels)
        objects = ""
        for _ in range(rng.randint(1, 4)):
            x0, y0 = rng.randint(1, width // 2), rng.randint(1, height // 2)
            x1, y1 = rng.randint(x0 + 2, width + 1), rng.randint(y0 + 2, height + 1)
            objects += (f"<object><name>box</name><difficult>0</difficult><bndbox><xmin>{x0}</xmin>"
                        f"<ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>")
        with open(os.path.join(root, "Annotations", f"{i}.xml"), "w") as f:
            f.write(f"<annotation><size><width>{width}</width><height>{height}</height>"
                    f"<depth>3</depth></size>{objects}</annotation>")
    with open(os.path.join(root, "ImageSets", "Main", "train.txt"), "w") as f:
        f.write("".join(f"{i}\n" for i in range(count)))


def _loader(dataset, size, workers):
    transform = YOLO3DefaultTrainTransform(size, size)
    return gluon.data.DataLoader(dataset.transform(transform), batch_size=8, shuffle=False,
                                 batchify_fn=Tuple(Stack(), Pad(pad_val=-1)),
                                 last_batch="keep", num_workers=workers)


def pipeline(root, size, workers, repeats):
    """Images/s of an epoch, per repeat, for 'gluoncv' and 'gluonkit' (interleaved)."""
    datasets = {"gluoncv": CustomVOCDetectionBase(classes=_CLASSES, root=root,
                                                  splits=(("", "train"),)),
                "gluonkit": load_voc(root, splits=("train",), classes=_CLASSES)[0][0]}
    loaders = {name: _loader(dataset, size, workers) for name, dataset in datasets.items()}
    rates = {name: [] for name in loaders}
    for repeat in range(repeats + 1):
        order = list(loaders) if repeat % 2 else list(loaders)[::-1]
        for name in order:
            tic, seen = time.perf_counter(), 0
            for images, _ in loaders[name]:
                images.wait_to_read()
                seen += images.shape[0]
            if repeat:                         # the first epoch warms up (workers, caches)
                rates[name].append(seen / (time.perf_counter() - tic))
    return rates


def _decode_waited(path):
    """MXNet's asynchronous decode of ``path``, waited for: what ``read_image`` did after its
    checks before it decoded with OpenCV."""
    with open(path, "rb") as f:
        image = mx.image.imdecode(f.read())
    image.wait_to_read()
    return image


def read_costs(paths, repeats):
    """CPU milliseconds per image, per repeat, of each way to read ``paths``."""
    readers = {"read_image": read_image, "MXNet decode, waited": _decode_waited,
               "mx.image.imread": mx.image.imread}
    costs = {name: [] for name in readers}
    for repeat in range(repeats + 1):
        for name, read in readers.items():
            mx.nd.waitall()
            tic = time.process_time()
            for path in paths:
                read(path)
            mx.nd.waitall()
            if repeat:
                costs[name].append((time.process_time() - tic) / len(paths) * 1e3)
    return costs


def main(argv=None):
    set_env("benchmarks.data")
    parser = benchmark_parser(__doc__)
    parser.add_argument("--images", type=int, help="images per size (default 400; --quick 16)")
    parser.add_argument("--repeats", type=int, help="timed repeats (default 5; --quick 1)")
    parser.add_argument("--workers", default=None,
                        help="DataLoader workers to try, comma-separated (default 0,2; --quick 0)")
    add_output_options(parser, "data")
    args = parse_with_config(parser, argv)
    quick = args.quick
    apply_defaults(args, {"images": 16 if quick else 400, "repeats": 1 if quick else 5,
                          "workers": "0" if quick else "0,2"}, "data")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for width, height in ((96, 96), (400, 300)):
            root = os.path.join(tmp, f"{width}x{height}")
            write_voc(root, args.images, width, height)
            paths = [os.path.join(root, "JPEGImages", f"{i}.jpg") for i in range(args.images)]
            for name, costs in read_costs(paths, args.repeats).items():
                rows.append({"measure": "read", "image": f"{width}x{height}", "contestant": name,
                             "workers": 0, "median": statistics.median(costs), "unit": "CPU ms/image",
                             "runs": costs})
            for workers in (int(w) for w in str(args.workers).split(",")):
                rates = pipeline(root, 416 if width > 96 else 96, workers, args.repeats)
                for name, rate in rates.items():
                    rows.append({"measure": "pipeline", "image": f"{width}x{height}",
                                 "contestant": name, "workers": workers,
                                 "median": statistics.median(rate), "unit": "images/s",
                                 "runs": rate})
    _add_ratios(rows)
    table = markdown_table(rows, [
        ("measure", "measure"), ("image", "image"), ("workers", "workers"),
        ("contestant", "contestant"),
        ("median", lambda r: f"{r['median']:.3f}" if r["measure"] == "read"
         else f"{r['median']:.0f}"),
        ("unit", "unit"), ("range", lambda r: f"{min(r['runs']):.3g}-{max(r['runs']):.3g}"),
        ("ratio", lambda r: f"{r['ratio']:.2f}x")])
    section = ("## The detection input pipeline (`data.py`)\n\n" + __doc__.split("\n\n", 2)[2]
               + "\n\nThe ratio is to GluonCV's pipeline (images/s) or to `read_image` (CPU "
               "time).\n\n" + table)
    write_outputs(args, "data", {"machine": machine(), "images": args.images,
                                 "repeats": args.repeats, "rows": rows}, section)
    print(table)


def _add_ratios(rows):
    """Each row's median over its reference's: GluonCV's pipeline, or ``read_image``'s cost."""
    for row in rows:
        reference = next(r for r in rows if (r["measure"], r["image"], r["workers"]) ==
                         (row["measure"], row["image"], row["workers"]) and r["contestant"] in
                         ("gluoncv", "read_image"))
        row["ratio"] = row["median"] / reference["median"]


if __name__ == "__main__":
    main()
