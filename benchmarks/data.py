"""The detection input pipeline: gluonkit's readers against GluonCV's own on the same JPEG files.

    python -m benchmarks.data              # 96x96 and 400x300 images, 0, 1 and 2 workers (~5 min)
    python -m benchmarks.data --quick      # seconds, for the test suite
    python -m benchmarks.data --measures load_coco --out benchmarks/results/data-coco.json

The measurements, in one process, repeats interleaved:

- *pipeline*: images/s of a whole epoch of decode, augmentation and batching into a batch on
  ``cpu(0)``, ready for a network. gluonkit: what ``gluonkit-detect`` builds, a VOC folder read
  by ``gluonkit.data.load_voc`` (every annotation checked, every image's header checked before
  it is decoded) through its ``detection_loader`` (``MultiScaleDataset``, ``SizedTransform``,
  ``MultiScaleSampler``, gluonkit's ``DataLoader``). GluonCV: its ``CustomVOCDetectionBase``
  (``mx.image.imread``) with ``dataset.transform(...)`` in a ``gluon.data.DataLoader``, each
  batch moved to ``cpu(0)`` as GluonCV's training scripts' ``split_and_load`` moves it. Like
  with like: the same JPEG files, the same ``YOLO3DefaultTrainTransform``, batchify, batch size
  (8), order and number of workers. gluonkit's loader seeds Python's and NumPy's generators
  (which that transform draws from) per sample, as the recipe does
  (``gluonkit.data.seeded_loader``); GluonCV's images are read and transformed inside the same
  ``sample_generators`` key, so both pipelines do the same augmentations, image for image, in
  every repeat and worker, and deliver equal batches. The
  first epoch of each is a warm-up, not timed; the ratio is the median over repeats of
  gluonkit's figure over GluonCV's in the same round, its range the spread of those ratios.
- *pipeline CPU*: the CPU time of those epochs per image, this process's threads and its
  worker processes' (each repeat starts new loaders and ends their workers to count them):
  the work done, which other processes on the machine disturb far less than images/s.
- *read*: the CPU time (``time.process_time``, every thread of the process) of reading one image
  by ``gluonkit.data.images.read_image`` (the header checked, then one synchronous OpenCV
  decode), by MXNet's asynchronous ``imdecode`` waited for image by image (what
  ``read_image`` did after its checks until it decoded with OpenCV), and by
  ``mx.image.imread`` (GluonCV's reader: no checks, the decode not waited for; the clock
  waits for all of them at the end). Run it with another gluonkit on the path to measure that
  one's ``read_image``.
- *load_coco*: the CPU time of ``gluonkit.data.load_coco`` on a COCO file of 4000 and of 40000
  images (64x48 JPEGs, three boxes each, as a tool exports them: every record checked, every
  image file found and its header read) against pycocotools' ``COCO()`` on the same file plus
  a header read of every image (``gluonkit.imagefiles.image_header``, the least a loader that
  checks the images' sizes does); the ratio is gluonkit's over that reference.
"""
import contextlib
import gc
import io
import json
import os
import resource
import shutil
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

from gluonkit.data import MultiScaleSampler, load_coco, load_voc, sample_generators
from gluonkit.data.images import read_image
from gluonkit.deploy.imagefiles import image_header
from gluonkit.recipes.detection import SizedTransform, detection_loader

from ._common import add_output_options, apply_defaults, benchmark_parser, parse_with_config, \
    set_env, write_outputs
from gluonkit.bench.harness import machine, markdown_table, measured_on, paired

__all__ = ["write_voc", "SameDraws", "loaders", "pipeline", "read_costs", "write_coco",
           "coco_load_costs", "main"]

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


class SameDraws(gluon.data.Dataset):
    """``dataset`` (transformed) whose item ``idx`` is read inside ``sample_generators``' key
    of the ``idx``-th sample of a first epoch, as gluonkit's loader in order seeds it: each
    image is augmented the same way (the same work) in either pipeline, in any worker."""

    def __init__(self, dataset, seed):
        self.dataset, self.seed = dataset, seed

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, idx):
        with sample_generators((self.seed, 0, idx)):
            return self.dataset[idx]


def loaders(root, size, workers, batch_size=8):
    """``{'gluoncv': loader, 'gluonkit': loader}`` of the VOC folder ``root`` (its train.txt)
    through ``YOLO3DefaultTrainTransform(size, size)``, in order, with ``workers`` processes."""
    transform = YOLO3DefaultTrainTransform(size, size)
    batchify = Tuple(Stack(), Pad(pad_val=-1))
    theirs = CustomVOCDetectionBase(classes=_CLASSES, root=root, splits=(("", "train"),))
    ours = load_voc(root, splits=("train",), classes=_CLASSES)[0][0]
    sampler = MultiScaleSampler(len(ours), batch_size, [size], shuffle=False, seed=0)
    return {"gluoncv": gluon.data.DataLoader(SameDraws(theirs.transform(transform), seed=0),
                                             batch_size, batchify_fn=batchify, num_workers=workers),
            "gluonkit": detection_loader(ours, sampler, SizedTransform({(size, size): transform}),
                                         batchify, workers, seed=0)}


def _cpu_seconds():
    """CPU seconds used so far by this process (every thread) and its children that ended."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def pipeline(root, size, workers, repeats):
    """Per repeat, for 'gluoncv' and 'gluonkit' (interleaved): images/s of an epoch, and its
    CPU milliseconds per image (this process's and its worker processes', which each repeat
    starts and ends: the figure a loaded machine disturbs least)."""
    rates, costs = {"gluoncv": [], "gluonkit": []}, {"gluoncv": [], "gluonkit": []}
    for repeat in range(repeats + 1):
        made = loaders(root, size, workers)
        for name in (list(made) if repeat % 2 else list(made)[::-1]):
            gc.collect()
            cpu, tic, seen = _cpu_seconds(), time.perf_counter(), 0
            for batch in made[name]:           # on cpu(0): a copy of gluon's workers' batches
                mx.nd.waitall()
                for field in batch:
                    field.as_in_context(mx.cpu(0)).wait_to_read()
                seen += batch[0].shape[0]
            wall = time.perf_counter() - tic
            del made[name]                     # its workers end (and count as children)
            gc.collect()
            if repeat:                         # the first epoch warms up (caches, imports)
                rates[name].append(seen / wall)
                costs[name].append((_cpu_seconds() - cpu) / seen * 1e3)
    return rates, costs


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


def write_coco(root, count, seed=0):
    """A COCO file ``root/annotations/instances_train.json`` of ``count`` 64x48 JPEGs in
    ``root/images/train`` (copies of 8 random ones), three boxes each; its path."""
    folder = os.path.join(root, "images", "train")
    os.makedirs(folder)
    os.makedirs(os.path.join(root, "annotations"))
    rng = np.random.RandomState(seed)
    sources = []
    for k in range(8):
        sources.append(os.path.join(root, f"source{k}.jpg"))
        cv2.imwrite(sources[-1], rng.randint(0, 255, (48, 64, 3), np.uint8))
    images, annotations = [], []
    for i in range(count):
        shutil.copyfile(sources[i % 8], os.path.join(folder, f"{i:06d}.jpg"))
        images.append({"id": i + 1, "file_name": f"{i:06d}.jpg", "width": 64, "height": 48})
        for k in range(3):
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": k + 1,
                                "bbox": [2.5 + 9 * k, 3, 20, 10.25], "area": 205.0, "iscrowd": 0,
                                "segmentation": [[2.5, 3, 22.5, 3, 22.5, 13.25]]})
    path = os.path.join(root, "annotations", "instances_train.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": [{"id": k, "name": f"class{k}"} for k in (1, 2, 3)]}, f)
    return path


def _pycocotools_and_headers(path):
    from pycocotools.coco import COCO
    with contextlib.redirect_stdout(io.StringIO()):        # its timing lines
        coco = COCO(path)
    folder = os.path.join(os.path.dirname(os.path.dirname(path)), "images", "train")
    for image in coco.dataset["images"]:
        image_header(os.path.join(folder, image["file_name"]))


def coco_load_costs(path, repeats):
    """CPU seconds per repeat of ``load_coco`` and of pycocotools' load plus the header reads."""
    readers = {"load_coco": lambda: load_coco([path]),
               "pycocotools + headers": lambda: _pycocotools_and_headers(path)}
    costs = {name: [] for name in readers}
    for repeat in range(repeats + 1):
        for name, read in readers.items():
            gc.collect()
            tic = time.process_time()
            read()
            if repeat:
                costs[name].append(time.process_time() - tic)
    return costs


def main(argv=None):
    set_env("benchmarks.data")
    parser = benchmark_parser(__doc__)
    parser.add_argument("--images", type=int, help="images per size (default 400; --quick 16)")
    parser.add_argument("--repeats", type=int, help="timed repeats (default 5; --quick 1)")
    parser.add_argument("--workers", default=None,
                        help="DataLoader workers to try, comma-separated (default 0,1,2; --quick 0)")
    parser.add_argument("--measures", default="read,pipeline,load_coco",
                        help="what to measure, comma-separated: read, pipeline (and its CPU "
                             "time), load_coco")
    parser.add_argument("--coco-images", default=None,
                        help="images of the COCO files loaded, comma-separated (default "
                             "4000,40000; --quick 200)")
    add_output_options(parser, "data")
    args = parse_with_config(parser, argv)
    quick, partial = args.quick, args.measures != "read,pipeline,load_coco"
    readme_given = args.readme is not None
    apply_defaults(args, {"images": 16 if quick else 400, "repeats": 1 if quick else 5,
                          "workers": "0" if quick else "0,1,2",
                          "coco_images": "200" if quick else "4000,40000"}, "data")
    if partial and not readme_given:        # the README's section holds every measure
        args.readme = None
    info = machine()
    rows, measures = [], args.measures.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for width, height in ((96, 96), (400, 300)) if {"read", "pipeline"} & set(measures) else ():
            root = os.path.join(tmp, f"{width}x{height}")
            write_voc(root, args.images, width, height)
            paths = [os.path.join(root, "JPEGImages", f"{i}.jpg") for i in range(args.images)]
            if "read" in measures:
                rows += _rows("read", f"{width}x{height}", 0, read_costs(paths, args.repeats),
                              "CPU ms/image", "read_image")
            for workers in (int(w) for w in str(args.workers).split(",")
                            if "pipeline" in measures):
                rates, costs = pipeline(root, 416 if width > 96 else 96, workers, args.repeats)
                rows += _rows("pipeline", f"{width}x{height}", workers, rates, "images/s",
                              "gluoncv")
                rows += _rows("pipeline CPU", f"{width}x{height}", workers, costs,
                              "CPU ms/image", "gluoncv")
        for count in (int(c) for c in str(args.coco_images).split(",")
                      if "load_coco" in measures):
            path = write_coco(os.path.join(tmp, f"coco{count}"), count)
            rows += _rows("load_coco", f"{count} images", 0, coco_load_costs(path, args.repeats),
                          "CPU s", "pycocotools + headers")
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    table = markdown_table(rows, [
        ("measure", "measure"), ("image", "image"), ("workers", "workers"),
        ("contestant", "contestant"),
        ("median", lambda r: f"{r['median']:.3f}" if r["measure"] in ("read", "load_coco")
         else f"{r['median']:.1f}"),
        ("unit", "unit"), ("range", lambda r: f"{min(r['runs']):.3g}-{max(r['runs']):.3g}"),
        ("ratio (range)", lambda r: f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})")])
    section = ("## The detection input pipeline (`data.py`)\n\n" + __doc__.split("\n\n", 2)[2]
               + "\n\nThe ratio is to GluonCV's pipeline (images/s), to `read_image` (CPU "
               "time) or to pycocotools' load plus the header reads (CPU time), over the "
               "repeats of one round (median, and the range).\n\n"
               + measured_on(info, f"{args.images} images per size, {args.repeats} repeats")
               + "\n\n" + table)
    write_outputs(args, "data", {"machine": info, "images": args.images,
                                 "repeats": args.repeats, "rows": rows}, section)
    print(table)


def _rows(measure, image, workers, runs, unit, reference):
    """A row per contestant of ``runs`` (name -> a figure per repeat), with its median and
    its figures' ratios to ``reference``'s of the same repeats."""
    rows = []
    for name, figures in runs.items():
        ratio, low, high = paired(figures, runs[reference])
        rows.append({"measure": measure, "image": image, "contestant": name, "workers": workers,
                     "median": statistics.median(figures), "unit": unit, "runs": figures,
                     "ratio": ratio, "ratio_min": low, "ratio_max": high})
    return rows


if __name__ == "__main__":
    main()
