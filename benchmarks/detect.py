"""Detection training step: the detect recipe's (gluonkit.fit + batch_fn) against GluonCV's loop.

Images/s of YOLOv3 training on the embedded shapes set, one and two devices, and what
accumulating at one image per device costs. The reference is the loop of GluonCV's
``scripts/detection/yolo/train_yolo3.py``: ``gluon.utils.split_and_load``, the network's own
losses, ``autograd.backward`` and ``gluon.Trainer.step(batch_size)``. Faster R-CNN the same
way against the loop of ``train_faster_rcnn.py`` (its ``ForwardBackwardTask`` per image on
two devices), and one image per device accumulated against whole batches padded by GluonCV's
``FasterRCNNTrainBatchify``.
"""
import os
import sys

from ._common import (ROOT, add_output_options, apply_defaults, benchmark_parser, parse_with_config, set_env,
                      thread_settings, write_outputs)
from gluonkit.bench.harness import WORKER_FLAG, compare, machine, markdown_table, measured_on, paired, serve

SECTION = "detect"

# name -> (description, loop, devices, images per step, accumulate)
CONTESTANTS = {
    "gluoncv-1": ("GluonCV loop, 1 device", "gluoncv", 1, "batch", 1),
    "gluonkit-1": ("gluonkit.fit + batch_fn, 1 device", "gluonkit", 1, "batch", 1),
    "gluoncv-2": ("GluonCV loop, 2 devices", "gluoncv", 2, "batch", 1),
    "gluonkit-2": ("gluonkit.fit + batch_fn, 2 devices", "gluonkit", 2, "batch", 1),
    "gluoncv-2-acc": ("GluonCV loop, 2 devices, 1 image each, gradients added by hand",
                      "gluoncv", 2, "two", "window"),
    "gluonkit-2-acc": ("gluonkit.fit, 2 devices, 1 image each, Trainer(accumulate)",
                       "gluonkit", 2, "two", "window"),
    "gluoncv-rcnn": ("Faster R-CNN, GluonCV loop (ForwardBackwardTask), 2 devices, 1 image each",
                     "gluoncv", 2, "two", "window"),
    "gluonkit-rcnn": ("Faster R-CNN, gluonkit.fit + FasterRCNNBatch, 2 devices, 1 image each",
                      "gluonkit", 2, "two", "window"),
    "gluoncv-rcnn-batch": ("Faster R-CNN, GluonCV loop, 2 devices, whole batches padded",
                           "gluoncv", 2, "batch", 1),
}

FINDINGS = [   # (text, contestant, against)
    ("gluonkit.fit + batch_fn vs GluonCV's loop, 1 device", "gluonkit-1", "gluoncv-1"),
    ("the same, 2 devices", "gluonkit-2", "gluoncv-2"),
    ("gluonkit accumulation at 1 image per device vs GluonCV's loop adding gradients by hand",
     "gluonkit-2-acc", "gluoncv-2-acc"),
    ("what 1 image per device with accumulation costs in gluonkit vs whole batches",
     "gluonkit-2-acc", "gluonkit-2"),
    ("Faster R-CNN: gluonkit.fit + FasterRCNNBatch vs GluonCV's ForwardBackwardTask loop",
     "gluonkit-rcnn", "gluoncv-rcnn"),
    ("Faster R-CNN: gluonkit at 1 image per device, accumulated, vs GluonCV's whole padded batches",
     "gluonkit-rcnn", "gluoncv-rcnn-batch"),
]


class _Loop:
    """One epoch of a contestant: gluonkit's ``fit`` with its ``batch_fn``, or GluonCV's own loop
    (``_gluoncv_epoch``); ``run`` returns the images it trained on."""

    def run(self):
        if self._loop == "gluonkit":
            self._fit(self._net, None, self._trainer, self._batches, epochs=1, ctx=self._ctx,
                      batch_fn=self._batch_fn, progress=False)
        else:
            self._gluoncv_epoch()
        return self._images_per_epoch

    setup = run   # one epoch of warm-up


class _Contestant(_Loop):
    """YOLOv3 trained on precomputed batches of the shapes set by one of the two loops."""

    def __init__(self, name, options):
        import mxnet as mx
        import numpy as np

        from gluonkit.data import MultiScaleSampler, ShapesDetection
        from gluonkit.recipes import detection as det

        _, self._loop, devices, per_step, accumulate = CONTESTANTS[name]
        self._ctx = [mx.cpu(i) for i in range(devices)]
        self._batch = options["batch_size"] if per_step == "batch" else devices
        self._accumulate = 1 if accumulate == 1 else options["batch_size"] // self._batch
        np.random.seed(options["seed"])
        mx.random.seed(options["seed"])
        data = ShapesDetection("train", length=options["samples"])
        self._net = det.build_detector(options["model"], data.classes)
        self._net.initialize(ctx=self._ctx)
        size = [(options["size"], options["size"])]
        loader = det.detection_loader(
            data, MultiScaleSampler(len(data), self._batch, size, seed=options["seed"]),
            det.SizedTransform(det.train_transforms(self._net, "yolo3", size)), det.train_batchify("yolo3"))
        self._batches = list(loader)     # made once: the step is timed, not the augmentation
        optimizer = ("sgd", {"learning_rate": 1e-3, "momentum": 0.9, "wd": 5e-4})
        if self._loop == "gluonkit":
            import gluonkit

            self._trainer = gluonkit.Trainer(self._net.collect_params(), *optimizer,
                                             accumulate=self._accumulate)
            self._fit, self._batch_fn = gluonkit.fit, det.yolo3_batch_fn
        else:
            from mxnet import gluon

            if self._accumulate > 1:
                for param in self._net.collect_params().values():
                    if param.grad_req != "null":
                        param.grad_req = "add"
            self._trainer = gluon.Trainer(self._net.collect_params(), *optimizer)

    def _gluoncv_epoch(self):
        from mxnet import autograd, gluon

        for index, batch in enumerate(self._batches):
            data = gluon.utils.split_and_load(batch[0], self._ctx, even_split=False)
            targets = [gluon.utils.split_and_load(batch[i], self._ctx, even_split=False)
                       for i in range(1, 6)]
            gt_boxes = gluon.utils.split_and_load(batch[6], self._ctx, even_split=False)
            with autograd.record():
                sums = []
                for k, x in enumerate(data):
                    obj, center, scale, cls = self._net(x, gt_boxes[k], *[t[k] for t in targets])
                    sums.append(obj + center + scale + cls)
                autograd.backward(sums)
            if (index + 1) % self._accumulate == 0:
                self._trainer.step(self._batch * self._accumulate)
                if self._accumulate > 1:
                    self._net.collect_params().zero_grad()
        left = len(self._batches) % self._accumulate
        if left:   # the partial window at the epoch's end, as fit flushes it: none leaks into the next
            self._trainer.step(self._batch * left)
            self._net.collect_params().zero_grad()

    @property
    def _images_per_epoch(self):
        return sum(batch[0].shape[0] for batch in self._batches)


class _RCNNContestant(_Loop):
    """Faster R-CNN trained on precomputed samples of the shapes set by one of the loops."""

    def __init__(self, name, options):
        import mxnet as mx
        import numpy as np
        from gluoncv.data.batchify import FasterRCNNTrainBatchify
        from mxnet import gluon

        from gluonkit.data import ShapesDetection
        from gluonkit.recipes import rcnn

        _, self._loop, devices, per_step, _ = CONTESTANTS[name]
        self._ctx = [mx.cpu(i) for i in range(devices)]
        self._images = options["batch_size"]
        per_device = 1 if per_step == "two" else self._images // devices
        np.random.seed(options["seed"])
        mx.random.seed(options["seed"])
        data = ShapesDetection("train", length=options["samples"])
        short, max_size = options["size"], options["size"] * 3 // 2
        self._net = rcnn.build_faster_rcnn(RCNN_MODEL, data.classes, short=short, max_size=max_size,
                                           scales=rcnn.fit_rpn_scales(data, short, max_size),
                                           images_per_device=per_device)
        self._net.initialize(ctx=self._ctx)
        rcnn.place_target_generator(self._net, self._ctx)
        transform = rcnn.train_transform(self._net, short, max_size)
        samples = [transform(*data[i]) for i in range(len(data))]
        self._count = len(samples)
        step = devices if per_step == "two" else self._images
        groups = [samples[i:i + step] for i in range(0, len(samples), step)]
        if per_step == "two":      # the recipe's batches: one image per device, own sizes
            self._batches = [rcnn.train_batchify(group) for group in groups]
        else:                      # GluonCV's: padded to one shape per device
            batchify = FasterRCNNTrainBatchify(self._net, num_shards=devices)
            self._batches = [list(zip(*batchify([sample[:5] for sample in group]))) for group in groups]
        optimizer = ("sgd", {"learning_rate": 1e-3, "momentum": 0.9, "wd": 5e-4})
        if self._loop == "gluonkit":
            import gluonkit

            self._trainer = gluonkit.Trainer(self._net.collect_params(), *optimizer,
                                             accumulate=self._images // devices)
            self._fit, self._batch_fn = gluonkit.fit, rcnn.FasterRCNNBatch()
        else:
            from gluoncv.model_zoo.rcnn.faster_rcnn.data_parallel import ForwardBackwardTask

            for param in self._net.collect_params().values():
                if param.grad_req != "null":
                    param.grad_req = "add"
            self._trainer = gluon.Trainer(self._net.collect_params(), *optimizer)
            self._task = ForwardBackwardTask(
                self._net, self._trainer, gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False),
                gluon.loss.HuberLoss(rho=1 / 9), gluon.loss.SoftmaxCrossEntropyLoss(),
                gluon.loss.HuberLoss(rho=1.0), mix_ratio=1.0, amp_enabled=False)

    def _gluoncv_epoch(self):
        seen = 0
        for batch in self._batches:
            for shard, ctx in zip(batch, self._ctx):   # the recipe's images end with a region seed
                self._task.forward_backward([a.as_in_context(ctx) for a in shard[:5]])
                seen += shard[0].shape[0]
            if seen % self._images == 0:
                self._trainer.step(self._images)
                self._net.collect_params().zero_grad()
        if seen % self._images:   # the partial window at the epoch's end, as fit flushes it
            self._trainer.step(seen % self._images)
            self._net.collect_params().zero_grad()

    @property
    def _images_per_epoch(self):
        return self._count


RCNN_MODEL = "faster_rcnn_mobilenet0.25_custom"


def build(name, options):
    """A contestant by name (called in its worker process)."""
    return _RCNNContestant(name, options) if "rcnn" in name else _Contestant(name, options)


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    run = parser.add_argument_group("run")
    run.add_argument("--repeats", type=int, default=None, help="timed epochs per contestant")
    run.add_argument("--only", default=None,
                     help=f"comma-separated contestants (default all): {', '.join(CONTESTANTS)}")
    data = parser.add_argument_group("data")
    data.add_argument("--samples", type=int, help="images per epoch")
    data.add_argument("--batch-size", type=int, help="images per update (a multiple of 2)")
    data.add_argument("--size", type=int, help="input size (a multiple of 32)")
    data.add_argument("--model", help="a GluonCV YOLOv3 model-zoo name")
    data.add_argument("--seed", type=int, default=0)
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    defaults = {"repeats": 2, "samples": 4, "batch_size": 4, "size": 64,
                "model": "yolo3_mobilenet0.25_custom"} if args.quick else \
        {"repeats": 5, "samples": 64, "batch_size": 8, "size": 128, "model": "yolo3_mobilenet0.25_custom"}
    apply_defaults(args, defaults, "detect")
    for name in ("repeats", "samples", "batch_size", "size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}.")
    if args.batch_size % 2 or args.samples % args.batch_size or args.size % 32:
        parser.error(f"--batch-size must be even, --samples a multiple of it and --size of 32; got "
                     f"{args.batch_size}, {args.samples}, {args.size}.")
    args.only = args.only.split(",") if args.only else list(CONTESTANTS)
    unknown = [n for n in args.only if n not in CONTESTANTS]
    if unknown or "gluoncv-1" not in args.only:
        parser.error(f"--only must name contestants among {', '.join(CONTESTANTS)} and include "
                     f"'gluoncv-1' (the reference); got {', '.join(args.only)}.")
    return args


COLUMNS = [
    ("contestant", lambda r: CONTESTANTS[r["name"]][0]),
    ("images/s: median (min - max)", lambda r: f"{r['samples_per_s']:.2f} ({r['min']:.2f} - {r['max']:.2f})"),
    ("vs GluonCV 1 device", lambda r: f"{r['ratio']:.2f}"),
    ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:.0f}"),
]


def findings(rows):
    """Paired ratios that answer the benchmark's questions, as Markdown list items."""
    by = {r["name"]: r for r in rows}
    items = []
    for text, name, against in FINDINGS:
        if name in by and against in by:
            median, low, high = paired(by[name]["runs"], by[against]["runs"])
            items.append(f"- {text}: **{median:.2f}x** ({low:.2f} - {high:.2f})")
    return "\n".join(items)


README_TEXT = """\
## Detection training step (`detect.py`)

```bash
python -m benchmarks.detect                  # 6 contestants x 5 epochs of 64 images at 128 px
python -m benchmarks.detect --quick          # seconds, for the test suite; its figures mean nothing
```

YOLOv3 (`{model}`, GluonCV model zoo, from scratch) trained with SGD on {samples} images of the
embedded shapes set at {size}x{size}, batches of {batch_size}, made once beforehand by GluonCV's
`YOLO3DefaultTrainTransform` (the step is timed, not the augmentation). GluonCV's loop is the
one of `train_yolo3.py` (`gluon.Trainer`, `step(batch_size)`); gluonkit's is the detect
recipe's: `gluonkit.fit(batch_fn=yolo3_batch_fn)` with `gluonkit.Trainer`. With "1 image each",
every step holds one image per device and {accumulate} steps make one update of {batch_size}
images: GluonCV's loop with `grad_req='add'`, `step({batch_size})` and `zero_grad()` by hand,
gluonkit's with `Trainer(accumulate={accumulate})`. Each contestant runs in its own process,
one warm-up epoch then {repeats} timed epochs, taking turns; ratios are paired per round.

Faster R-CNN (`{rcnn_model}`, from scratch, shorter side {size} px, longer at most
{max_size}) on the same images at their own sizes, updates of {batch_size} images on 2
devices: GluonCV's loop is `train_faster_rcnn.py`'s (`ForwardBackwardTask.forward_backward`
per device with `grad_req='add'`, one `step({batch_size})`), gluonkit's is the recipe's
(`fit(batch_fn=FasterRCNNBatch())`, `Trainer(accumulate={accumulate})`); "whole batches" is
GluonCV's loop on {half} images per device padded to one shape by `FasterRCNNTrainBatchify`."""


def readme_section(results):
    """The README section: how to reproduce, what the figures mean, and the results."""
    o, info = results["options"], results["machine"]
    return "\n\n".join([
        README_TEXT.format(repeats=results["repeats"], accumulate=o["batch_size"] // 2,
                           rcnn_model=RCNN_MODEL, max_size=o["size"] * 3 // 2,
                           half=o["batch_size"] // 2, **o),
        measured_on(info, ", ".join(f"{k}={v}" for k, v in results["threads"].items())),
        markdown_table(results["rows"], COLUMNS), findings(results["rows"])])


def main(args):
    info = machine()
    options = {"samples": args.samples, "batch_size": args.batch_size, "size": args.size,
               "model": args.model, "seed": args.seed}
    print(f"{info['cpu']}, {info['cores']} cores, load {info['load_average']}", flush=True)
    rows = compare("benchmarks.detect", args.only, options, args.repeats, reference="gluoncv-1", cwd=ROOT)
    results = {"machine": info, "threads": thread_settings(), "repeats": args.repeats,
               "options": options, "rows": rows}
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(markdown_table(rows, COLUMNS))
    print(findings(rows), flush=True)
    write_outputs(args, SECTION, results, readme_section(results))
    return results


if __name__ == "__main__":
    if sys.argv[1:] == [WORKER_FLAG]:
        serve(build)
    else:
        set_env("benchmarks.detect")
        main(parse_args())
