"""Variable input shapes: what a new shape every step costs, and what bucketing saves.

    python -m benchmarks.varshape                 # full run (a few minutes on 2 cores)
    python -m benchmarks.varshape --quick         # seconds; figures are not meaningful
    python -m benchmarks.varshape --many-shapes   # memory and speed with more shapes than graphs

The data are images of random height and width (uniform in --min-size..--max-size, so the
mean pixel count equals that of a --ref-size square image) and random labels. Every
contestant trains the same network on the same samples for the same number of epochs, each
in its own process, repeats interleaved (see gluonkit/bench/harness.py). Results go to a JSON file and to
the "Variable shapes" section of benchmarks/README.md.
"""
import os
import sys



import mxnet as mx
import numpy as np
from gluoncv.data.batchify import Stack, Tuple
from mxnet import autograd, gluon

from gluonkit.data.buckets import BucketPad, Buckets, bucket_loader
from gluonkit.data.multiscale import multiscale_loader, resize_first
from gluonkit.nn.shapecache import ShapeCache
from gluonkit.recipes.models import small_cnn
from gluonkit.trainer import Trainer

from ._common import (ROOT, add_output_options, apply_defaults, benchmark_parser, parse_with_config, set_env,
                      template, write_outputs)
from gluonkit.bench.harness import WORKER_FLAG, compare, machine, markdown_table, measured_on, paired, serve

SECTION = "varshape"
SECTION_MANY = "varshape-many"

# name: (table label, data path, graph mode)
CONTESTANTS = {
    "fixed": ("fixed shape, hybridize() (reference)", "fixed", "hybrid"),
    "fixed-imperative": ("fixed shape, imperative", "fixed", "imperative"),
    "padmax": ("random batches padded to their largest, hybridize()", "padmax", "hybrid"),
    "imperative": ("new shape every step, imperative", "sorted", "imperative"),
    "hybrid": ("new shape every step, hybridize()", "sorted", "hybrid"),
    "static": ("new shape every step, static_alloc + static_shape", "sorted", "static"),
    "buckets": ("gluonkit buckets, hybridize()", "buckets", "hybrid"),
    "buckets-static": ("gluonkit buckets, static_alloc + static_shape", "buckets", "static"),
    "shapecache": ("gluonkit buckets + ShapeCache, hybridize()", "buckets", "shapecache"),
    "shapecache-static": ("gluonkit buckets + ShapeCache, static_alloc + static_shape", "buckets",
                          "shapecache-static"),
    "module": ("gluonkit buckets + mx.mod.BucketingModule", "buckets", "module"),
}
# --many-shapes: every batch at one of many sizes (multiscale_loader), more than ShapeCache keeps
MANY = {
    "many-static": ("one graph, static_alloc + static_shape (reference)", "multiscale", "static"),
    "many-hybrid": ("one graph, hybridize()", "multiscale", "hybrid"),
    "many-shapecache": ("ShapeCache(max_shapes={max_shapes}), static_alloc + static_shape",
                        "multiscale", "shapecache-static"),
    "many-shapecache-all": ("ShapeCache(max_shapes={sizes}): every size kept, static_alloc + "
                            "static_shape", "multiscale", "shapecache-static-all"),
}
GLUONKIT = "shapecache-static"   # gluonkit's variable-shape path, checked against the targets
NAIVE = "hybrid"
STATIC = {"static_alloc": True, "static_shape": True}
# data settings: CIFAR-sized images in batches of 32 (long steps on a CPU), small images in
# batches of 8 (short steps, where a change of shape weighs more), and a tiny one for --quick
SETTINGS = {
    "cifar": {"min_size": 24, "max_size": 40, "batch_size": 32, "samples": 768},
    "short": {"min_size": 12, "max_size": 20, "batch_size": 8, "samples": 384},
    "tiny": {"min_size": 10, "max_size": 18, "batch_size": 8, "samples": 48},
    "many": {"min_size": 12, "max_size": 51, "batch_size": 8, "samples": 192},   # 40 sizes
}


def make_sizes(samples, low, high, seed):
    """Heights and widths of the samples (two int arrays)."""
    rng = np.random.RandomState(seed)
    return rng.randint(low, high + 1, samples), rng.randint(low, high + 1, samples)


def make_data(samples, low, high, seed, classes=10):
    """Random 3-channel images of random sizes (a list) and random labels (an array)."""
    heights, widths = make_sizes(samples, low, high, seed)
    rng = np.random.RandomState(seed + 1)
    images = [rng.rand(3, h, w).astype(np.float32) for h, w in zip(heights, widths)]
    return images, rng.randint(0, classes, samples).astype(np.float32)


def sorted_batches(heights, widths, batch_size):
    """Index batches of samples of similar size: sorted by (height, width), cut in order."""
    order = np.lexsort((widths, heights))
    return [[int(i) for i in order[k:k + batch_size]] for k in range(0, len(order), batch_size)]


class _OwnSize:
    """Batchify (image, label) samples to the batch's own size: in pad mode its largest, in
    resize mode its (geometric) mean, with the same NumPy code as gluonkit's buckets."""

    def __init__(self, mode):
        self._mode = mode

    def __call__(self, samples):
        sizes = np.array([x.shape[1:] for x, _ in samples])
        if self._mode == "pad":
            size = tuple(int(v) for v in sizes.max(axis=0))
        else:
            size = tuple(int(v) for v in np.rint(np.exp(np.log(sizes).mean(axis=0))))
        return Tuple(BucketPad(Buckets([size], mode=self._mode)), Stack())(samples)


class _ShuffledBatches(gluon.data.Sampler):
    """Fixed batches in a new random order every epoch."""

    def __init__(self, batches, seed):
        self._batches, self._rng = batches, np.random.RandomState(seed)

    def __iter__(self):
        return iter([self._batches[i] for i in self._rng.permutation(len(self._batches))])

    def __len__(self):
        return len(self._batches)


def build_net(name):
    mx.random.seed(0)
    if name == "cnn":
        return small_cnn(10)
    from gluoncv.model_zoo import get_model

    return get_model(name, pretrained=False, classes=10)


def make_loader(path, options):
    """The DataLoader of a data path: 'fixed', 'sorted' (new shape every step) or 'buckets'."""
    o = options
    images, labels = make_data(o["samples"], o["min_size"], o["max_size"], o["seed"])
    if path == "fixed":
        images = [resize_first(x, (o["ref_size"], o["ref_size"])) for x in images]
        return gluon.data.DataLoader(gluon.data.ArrayDataset(images, labels), o["batch_size"],
                                     shuffle=True, batchify_fn=Tuple(Stack(), Stack()))
    dataset = gluon.data.ArrayDataset(images, labels)
    if path == "multiscale":
        sizes = list(range(o["min_size"], o["max_size"] + 1))
        return multiscale_loader(dataset, o["batch_size"], sizes, seed=o["seed"])
    if path == "padmax":
        return gluon.data.DataLoader(dataset, o["batch_size"], shuffle=True, batchify_fn=_OwnSize("pad"))
    if path == "sorted":
        heights, widths = make_sizes(o["samples"], o["min_size"], o["max_size"], o["seed"])
        sampler = _ShuffledBatches(sorted_batches(heights, widths, o["batch_size"]), o["seed"])
        return gluon.data.DataLoader(dataset, batch_sampler=sampler, batchify_fn=_OwnSize(o["mode"]))
    return bucket_loader(dataset, o["batch_size"], o["buckets"], mode=o["mode"],
                         multiple=o["multiple"], seed=o["seed"])


class _GluonContestant:
    """Trains a Gluon network on one data path under one graph mode."""

    def __init__(self, path, graph, options):
        self._loader = make_loader(path, options)
        net = build_net(options["net"])
        net.initialize(mx.init.Xavier())
        self._trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
        if graph == "hybrid":
            net.hybridize()
        elif graph == "static":
            net.hybridize(**STATIC)
        elif graph.startswith("shapecache"):
            net = ShapeCache(net, max_shapes=_max_shapes(graph, options))
            net.hybridize(**(STATIC if "static" in graph else {}))
        self._net = net
        self._loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def run(self):
        samples = 0
        for x, y in self._loader:
            x, y = x.as_in_context(mx.cpu()), y.as_in_context(mx.cpu())
            with autograd.record():
                loss = self._loss(self._net(x), y)
            loss.backward()
            self._trainer.step(x.shape[0])
            samples += x.shape[0]
        return samples

    setup = run   # one epoch of warm-up: every graph built, every shape seen once


class _ModuleContestant:
    """Trains the same network with MXNet's BucketingModule, one bucket key per batch shape."""

    def __init__(self, options):
        self._loader = make_loader("buckets", options)
        net = build_net(options["net"])
        out = mx.sym.SoftmaxOutput(net(mx.sym.var("data")), mx.sym.var("softmax_label"),
                                   name="softmax")
        buckets = self._loader.batch_sampler.buckets
        largest = max(buckets.shapes, key=lambda s: (np.prod(s), s))
        key = (options["batch_size"], 3) + tuple(largest)
        self._mod = mx.mod.BucketingModule(lambda _: (out, ("data",), ("softmax_label",)),
                                           default_bucket_key=key, context=mx.cpu())
        self._mod.bind(data_shapes=[("data", key)], label_shapes=[("softmax_label", key[:1])])
        self._mod.init_params(mx.init.Xavier())
        self._mod.init_optimizer(optimizer="sgd", optimizer_params={
            "learning_rate": 0.01, "rescale_grad": 1.0 / options["batch_size"]})

    def run(self):
        samples = 0
        for x, y in self._loader:
            batch = mx.io.DataBatch([x], [y], bucket_key=x.shape,
                                    provide_data=[mx.io.DataDesc("data", x.shape)],
                                    provide_label=[mx.io.DataDesc("softmax_label", y.shape)])
            self._mod.forward_backward(batch)
            self._mod.update()
            samples += x.shape[0]
        return samples

    setup = run


def _max_shapes(graph, options):
    """The graphs a ShapeCache contestant keeps: every size, --max-shapes, or 2 per bucket."""
    if graph.endswith("all"):
        return options["max_size"] - options["min_size"] + 1
    return options.get("max_shapes") or 2 * options["buckets"]


def build(name, options):
    """A contestant by name (called in its worker process)."""
    _, path, graph = {**CONTESTANTS, **MANY}[name]
    if graph == "module":
        return _ModuleContestant(options)
    return _GluonContestant(path, graph, options)


def input_work(path, options):
    """Pixels the network sees per sample, over the reference's (ref_size squared)."""
    o = options
    heights, widths = make_sizes(o["samples"], o["min_size"], o["max_size"], o["seed"])
    if path == "fixed":
        return 1.0
    if path == "padmax":   # expected largest of a random batch, per axis (sizes are uniform)
        sides = np.arange(o["min_size"], o["max_size"] + 1)
        below = (sides - o["min_size"] + 1) / len(sides)
        largest = np.sum(sides * (below ** o["batch_size"] - (below - 1 / len(sides)) ** o["batch_size"]))
        return float(largest ** 2 / o["ref_size"] ** 2)
    if path == "sorted":
        seen = 0
        for b in sorted_batches(heights, widths, o["batch_size"]):
            if o["mode"] == "pad":
                seen += len(b) * heights[b].max() * widths[b].max()
            else:
                mean = np.rint(np.exp(np.log([heights[b], widths[b]]).mean(axis=1)))
                seen += len(b) * mean.prod()
    else:
        shapes = [(3, h, w) for h, w in zip(heights, widths)]
        buckets = Buckets.from_data(shapes, o["buckets"], mode=o["mode"], multiple=o["multiple"])
        seen = (1 + buckets.overhead(shapes)) * (heights * widths).sum()
    return float(seen / (len(heights) * o["ref_size"] ** 2))


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    run = parser.add_argument_group("run")
    run.add_argument("--settings", default=None,
                     help=f"comma-separated data settings: {', '.join(SETTINGS)} "
                          "(default cifar,short; 'tiny' with --quick)")
    run.add_argument("--nets", default=None,
                     help="comma-separated: cifar_resnet20_v1, cnn (default both; cnn with --quick)")
    run.add_argument("--repeats", type=int, default=None, help="timed epochs per contestant")
    run.add_argument("--only", default=None,
                     help=f"comma-separated contestants (default all): {', '.join(CONTESTANTS)}")
    data = parser.add_argument_group("data (override every setting)")
    data.add_argument("--samples", type=int, help="samples per epoch")
    data.add_argument("--batch-size", type=int)
    data.add_argument("--min-size", type=int, help="smallest image side")
    data.add_argument("--max-size", type=int, help="largest image side")
    data.add_argument("--buckets", type=int, default=4, help="gluonkit bucket count")
    data.add_argument("--mode", choices=("pad", "resize"), default="resize",
                      help="gluonkit buckets: pad or resize samples to their bucket")
    data.add_argument("--multiple", type=int, default=4,
                      help="gluonkit bucket sizes are multiples of this (the networks' stride)")
    data.add_argument("--seed", type=int, default=0)
    many = parser.add_argument_group("many shapes")
    many.add_argument("--many-shapes", action="store_true",
                      help="instead: one of 40 sizes per batch (--min-size..--max-size) against "
                           "a ShapeCache of --max-shapes graphs; resident memory after each epoch")
    many.add_argument("--max-shapes", type=int, default=16, help="ShapeCache's bound")
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    if args.many_shapes:
        defaults = {"settings": "tiny", "nets": "cnn", "repeats": 2, "only": ",".join(MANY)} \
            if args.quick else {"settings": "many", "nets": "cifar_resnet20_v1", "repeats": 6,
                                "only": ",".join(MANY)}
    else:
        defaults = {"settings": "tiny", "nets": "cnn", "repeats": 2} if args.quick else \
            {"settings": "cifar,short", "nets": "cifar_resnet20_v1,cnn", "repeats": 5}
    apply_defaults(args, defaults, SECTION_MANY if args.many_shapes else SECTION)
    args.settings = args.settings.split(",")
    if any(name not in SETTINGS for name in args.settings):
        parser.error(f"--settings must name settings among {', '.join(SETTINGS)}, got {args.settings}.")
    for name in ("repeats", "samples", "batch_size", "min_size", "buckets", "multiple", "max_shapes"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}.")
    args.only = args.only.split(",") if args.only else list(CONTESTANTS)
    names, reference = (MANY, "many-static") if args.many_shapes else (CONTESTANTS, "fixed")
    unknown = [n for n in args.only if n not in names]
    if unknown or reference not in args.only:
        parser.error(f"--only must name contestants among {', '.join(names)} and include "
                     f"{reference!r} (the reference); got {', '.join(args.only)}.")
    return args


def setting_options(name, args):
    """The options of one data setting, with the command line's overrides."""
    options = dict(SETTINGS[name], buckets=args.buckets, mode=args.mode, multiple=args.multiple,
                   seed=args.seed, max_shapes=args.max_shapes if args.many_shapes else None)
    for key in ("samples", "batch_size", "min_size", "max_size"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if options["max_size"] < options["min_size"]:
        raise ValueError(f"max_size {options['max_size']} is below min_size {options['min_size']}.")
    heights, widths = make_sizes(options["samples"], options["min_size"], options["max_size"],
                                 options["seed"])
    options["ref_size"] = int(round(float(np.sqrt((heights * widths).mean()))))
    return options


def _fmt(value, digits=1):
    return f"{value:.{digits}f}"


def _ratio_cell(ratio):
    median, low, high = ratio
    return f"{median:.2f} ({low:.2f} - {high:.2f})"


COLUMNS = [
    ("contestant", lambda r: CONTESTANTS[r["name"]][0]),
    ("samples/s: median (min - max)",
     lambda r: f"{_fmt(r['samples_per_s'])} ({_fmt(r['min'])} - {_fmt(r['max'])})"),
    ("vs fixed: median (min - max)", lambda r: _ratio_cell(r["vs_fixed"])),
    ("input pixels vs fixed", lambda r: _fmt(r["work"], 3)),
    ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:.0f}"),
    ("first epoch s", lambda r: _fmt(r["setup_s"])),
]

FINDINGS = [   # (text, contestant, against)
    ("gluonkit's path (buckets + ShapeCache, static_alloc) vs new shape every step "
     "(hybridize): target 1.25x", GLUONKIT, NAIVE),
    ("gluonkit's path vs fixed shape: target 0.90x", GLUONKIT, "fixed"),
    ("what changing shapes costs: buckets vs new shape every step, both hybridize()", "buckets", NAIVE),
    ("the same with static_alloc + static_shape", "buckets-static", "static"),
    ("ShapeCache (one graph per shape) vs one graph, hybridize()", "shapecache", "buckets"),
    ("ShapeCache vs one graph, static_alloc + static_shape", "shapecache-static", "buckets-static"),
    ("BucketingModule vs gluonkit's path", "module", GLUONKIT),
    ("buckets vs random batches padded to their largest, both hybridize()", "buckets", "padmax"),
    ("imperative vs hybridize(), fixed shape", "fixed-imperative", "fixed"),
]


def findings(rows):
    """Paired ratios that answer the benchmark's questions, as Markdown list items."""
    by = {r["name"]: r for r in rows}
    items = []
    for text, name, against in FINDINGS:
        if name in by and against in by:
            median, low, high = paired(by[name]["runs"], by[against]["runs"])
            memory = by[name]["peak_rss_mb"] - by[against]["peak_rss_mb"]
            items.append(f"- {text}: **{median:.2f}x** ({low:.2f} - {high:.2f}), "
                         f"peak RSS {memory:+.0f} MB")
    return "\n".join(items)


MANY_COLUMNS = [
    ("contestant", lambda r: r["label"]),
    ("samples/s: median (min - max)",
     lambda r: f"{_fmt(r['samples_per_s'])} ({_fmt(r['min'])} - {_fmt(r['max'])})"),
    ("vs one graph with static_alloc", lambda r: _ratio_cell(r["vs_static"])),
    ("RSS MB after epoch 1, 2, last", lambda r: ", ".join(f"{m:.0f}" for m in
                                                         r["rss_mb"][:2] + r["rss_mb"][-1:])),
    ("growth after epoch 2 MB", lambda r: f"{r['rss_mb'][-1] - r['rss_mb'][1]:+.0f}"),
    ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:.0f}"),
]


def main_many(args):
    """The --many-shapes comparison: more sizes than ShapeCache keeps, memory after each epoch."""
    info = machine()
    results = {"machine": info, "repeats": args.repeats, "runs": []}
    options = setting_options(args.settings[0], args)
    options["sizes"] = options["max_size"] - options["min_size"] + 1
    for net in args.nets.split(","):
        print(f"{net}: {options['samples']} images per epoch at one of {options['sizes']} sizes "
              f"per batch, batch {options['batch_size']}", flush=True)
        rows = compare("benchmarks.varshape", args.only, dict(options, net=net), args.repeats,
                       reference="many-static", cwd=ROOT)
        reference = rows[args.only.index("many-static")]
        for row in rows:
            row["label"] = MANY[row["name"]][0].format(**options)
            row["vs_static"] = paired(row["runs"], reference["runs"])
        results["runs"].append({"net": net, "options": options, "rows": rows})
        print(markdown_table(rows, MANY_COLUMNS), flush=True)
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    sections = [template("varshape-many").format(repeats=args.repeats),
                measured_on(info, f"OMP_NUM_THREADS={info['omp_num_threads']}")]
    sections += [f"### {run['net']}, {options['min_size']}..{options['max_size']} px, batch "
                 f"{options['batch_size']}, {options['samples']} images per epoch\n\n"
                 f"{markdown_table(run['rows'], MANY_COLUMNS)}" for run in results["runs"]]
    write_outputs(args, SECTION_MANY, results, "\n\n".join(sections))
    return results


def main(args):
    if args.many_shapes:
        return main_many(args)
    info = machine()
    print(f"{info['cpu']}, {info['cores']} cores, OMP_NUM_THREADS={info['omp_num_threads']}, "
          f"load {info['load_average']}", flush=True)
    results = {"machine": info, "repeats": args.repeats, "runs": []}
    for setting in args.settings:
        options = setting_options(setting, args)
        for net in args.nets.split(","):
            print(f"{setting} / {net}: {options['samples']} images of {options['min_size']}.."
                  f"{options['max_size']} px per epoch, batch {options['batch_size']}", flush=True)
            rows = compare("benchmarks.varshape", args.only, dict(options, net=net), args.repeats, reference="fixed",
                           cwd=ROOT)
            fixed = rows[args.only.index("fixed")]
            for row in rows:
                row["work"] = input_work(CONTESTANTS[row["name"]][1], options)
                row["vs_fixed"] = paired(row["runs"], fixed["runs"])
            results["runs"].append({"setting": setting, "net": net, "options": options, "rows": rows})
            print(markdown_table(rows, COLUMNS))
            print(findings(rows), flush=True)
    results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    write_outputs(args, SECTION, results, readme_section(results))
    return results


def readme_section(results):
    """The README section: how to reproduce, what the figures mean, and the results."""
    info = results["machine"]
    parts = [README_TEXT.format(repeats=results["repeats"])]
    parts.append(measured_on(info, f"OMP_NUM_THREADS={info['omp_num_threads']}"))
    for run in results["runs"]:
        o = run["options"]
        parts.append(f"### {run['setting']}: {run['net']}, {o['min_size']}..{o['max_size']} px "
                     f"(mean {o['ref_size']}x{o['ref_size']}), batch {o['batch_size']}, "
                     f"{o['samples']} images per epoch, buckets={o['buckets']}, mode='{o['mode']}', "
                     f"multiple={o['multiple']}\n\n{markdown_table(run['rows'], COLUMNS)}\n\n"
                     f"{findings(run['rows'])}")
    return "\n\n".join(parts)


README_TEXT = """\
## Variable shapes (`varshape.py`)

```bash
python -m benchmarks.varshape                  # both settings and networks (about 7 minutes on 2 cores)
python -m benchmarks.varshape --quick          # seconds, for the test suite; its figures mean nothing
python -m benchmarks.varshape --settings cifar --mode pad --multiple 1 --only fixed,padmax,hybrid,buckets
```

Images of random height and width, each side uniform in a range (so their mean pixel count is
that of a square image of the "mean" size), random labels, plain SGD with `gluonkit.Trainer`,
in two settings: *cifar* (24..40 px, batch 32: a step takes about 90 ms on 2 cores) and *short*
(12..20 px, batch 8: steps of about 10 ms, where the fixed cost of a change of shape weighs
more, as it would on a faster device). Each contestant runs
in its own process, so that none inherits another's compiled kernels or memory pools: one
warm-up epoch ("first epoch s": every shape met once, every graph built), then {repeats} timed
epochs, taking turns with the others. Batches are made in the training process and timed too.

- *fixed shape*: the images resized once to the mean size; hybridize(): the reference. Its
  imperative twin shows what hybridizing is worth here at all.
- *random batches padded to their largest*: a shuffled DataLoader that pads each batch to its
  largest image (what gluoncv's `Pad` batchify does).
- *new shape every step*: images sorted by size and cut into batches, each resized to the
  batch's own mean size (padded to its largest with `--mode pad`); batches in random order, so
  nearly every step changes the shape, with as little resizing as batching allows.
- *gluonkit buckets*: `bucket_loader(dataset, batch, buckets=4, mode='resize', multiple=4)`:
  every batch resized to one of 4 bucket shapes chosen from the data, multiples of 4 (the
  networks' stride; rounding small images to them changes their pixel count, see the column).
- *ShapeCache*: `gluonkit.nn.ShapeCache(net)`: each input shape gets its own hybridized view of
  the network, sharing its parameters, so a shape seen before never makes MXNet re-plan.
- *BucketingModule*: the bucketed batches through `mx.mod.BucketingModule`, one executor per
  batch shape sharing the memory of the largest (the Module API's way).

"samples/s" is the median over the timed epochs; "vs fixed" divides each epoch's samples/s by
the reference's in the same round of turns (median and range over the rounds); "input pixels vs
fixed" counts the pixels the network sees per image; "peak RSS MB" is the process's peak
resident memory, imports of MXNet and GluonCV included; "first epoch s" is measured once per
contestant, so a burst of load from outside can inflate it. The findings are paired ratios."""


if __name__ == "__main__":
    if sys.argv[1:] == [WORKER_FLAG]:
        serve(build)
    else:
        set_env("benchmarks.varshape")
        main(parse_args())
