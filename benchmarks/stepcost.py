"""The host's share of a training step: ``gluonkit.Trainer``'s settings on a host-bound network,
and accumulation over small micro-batches against their forward+backward floor.

    python -m benchmarks.stepcost           # the tables below (about 2 minutes)
    python -m benchmarks.stepcost --quick   # seconds, for the test suite; figures not meaningful

It runs MXNet with one OpenMP thread unless ``OMP_NUM_THREADS`` is set: with two, on a
machine shared with other jobs, the host-bound network's step took twice as long and its
rounds varied fourfold, too much for a ratio of a few per cent.

A host-bound network (40 ``Dense(8)`` layers, batch 4, ``hybridize(static_alloc=True,
static_shape=True)``, one device) computes so little that a step costs what the host spends
on it: every operator call and every wait for the device shows. It is trained under each
setting of ``SETTINGS``, each with its own ``gluonkit.Trainer`` over the same parameters,
taking turns round by round (the order rotating), and by the floor (forward and backward
only). Two settings run what gluonkit does not do, as the alternatives: clipping by one
operator per gradient array (what an optimizer gluonkit does not fold the factor into gets)
and 'skip' decided on the devices (not exact, so not gluonkit's: see ``KeptOnDevice``). A setting's cost is the median over the rounds of its
round time over the 'ignore' round's. Accumulation: the recipe CNN, ``accumulate=4`` over micro-batches of 16 already on
the device, against the same four forward+backward calls without a Trainer. Results go to a
JSON file and the "stepcost" section of benchmarks/README.md.
"""
import os
import statistics

from ._common import (add_output_options, apply_defaults, benchmark_parser, parse_with_config, set_env,
                      thread_settings, timed, write_outputs)
from ._contestants import OPTIMIZER, make_data, make_net
from gluonkit.bench.harness import machine, markdown_table, measured_on, target_line

__all__ = ["SETTINGS", "KeptOnDevice", "host_bound_net", "measure_settings", "measure_accumulation",
           "targets", "parse_args", "main"]

SECTION = "stepcost"
LAYERS, WIDTH, BATCH = 40, 8, 4
CLIPS = 1e-6   # far below the gradient norms met: every update is clipped
REFERENCE = "ignore"
# name: (table label, gluonkit.Trainer options, count given as an NDArray)
SETTINGS = {
    "ignore": ("'ignore' (the default)", {}, False),
    "clip": ("clip_global_norm=1e-6 (clips every update)", {"clip_global_norm": CLIPS}, False),
    "clip-each": ("clip_global_norm=1e-6, one operator per gradient (before)", {"clip_global_norm": CLIPS}, False),
    "clip-wait": ("clip_global_norm=1e-6, norm read on the host (with 'raise': one wait)",
                  {"clip_global_norm": CLIPS, "on_nonfinite": "raise"}, False),
    "skip": ("on_nonfinite='skip'", {"on_nonfinite": "skip"}, False),
    "skip-device": ("'skip' decided on the device (not exact)", {}, False),
    "ndarray": ("a count given as an NDArray", {}, True),
    "ndarray+clip": ("a count given as an NDArray, clip_global_norm=1e-6", {"clip_global_norm": CLIPS}, True),
}
TARGET = 1.10   # at most this times the reference: clipping and 'skip' on the host-bound network, ...
TARGET_SETTINGS = ("clip", "skip")
MICRO_BATCH, MICRO_BATCHES = 16, 4   # ... and accumulation over the floor of its micro-batches
FULL = {"rounds": 60, "steps": 30, "updates": 5}   # short rounds: pairs close in time
QUICK = {"rounds": 2, "steps": 5, "updates": 2}


class KeptOnDevice:
    """A stand-in for a Trainer whose 'skip' is decided on the devices, for timing only.

    Each ``step`` measures the gradients' sum of squares, copies every weight and momentum,
    updates with an 'ignore' ``trainer`` and keeps the copies where the sum is not finite
    (``where``), without a wait. It is not exact, so gluonkit does not do it: ``step`` cannot
    return whether it updated, nor warn, count the skip or leave the update counts (the
    learning-rate schedule) as they were; this stand-in only does the device's share of it.
    """

    clip_global_norm, global_norm, nonfinite_skips = None, None, 0

    def __init__(self, trainer, params):
        self.trainer = trainer
        self.params = [p for p in params.values() if p.grad_req != "null"]

    @property
    def optimizer(self):
        """The 'ignore' trainer's optimizer (its update count is this stand-in's)."""
        return self.trainer.optimizer

    def _finite(self):
        import mxnet as mx

        grads = [g for p in self.params for g in p.list_grad()]
        sums = [mx.nd.multi_sum_sq(*grads[i:i + 60], num_arrays=len(grads[i:i + 60])).sum()
                for i in range(0, len(grads), 60)]
        return mx.nd.contrib.isfinite(mx.nd.add_n(*sums) if len(sums) > 1 else sums[0])

    def step(self, count):
        import mxnet as mx

        finite = self._finite()
        # gluon.Trainer's updaters hold the momentum arrays (none before the first update)
        states = [s for u in self.trainer._updaters for s in u.states.values() if s is not None]
        kept = [a for p in self.params for a in p.list_data()] + states
        old = [a.copy() for a in kept]
        self.trainer.step(count)
        for new, before in zip(kept, old):
            flag = mx.nd.broadcast_like(finite.reshape((1,) * new.ndim), new)
            mx.nd.where(flag, new, before, out=new)


def _unfolded_sgd(options):
    """SGD as MXNet's, in a subclass gluonkit does not fold a clip factor into: its Trainer
    multiplies each gradient by the factor first, one operator per array (its behaviour before)."""
    import mxnet as mx

    class UnfoldedSGD(mx.optimizer.SGD):
        pass

    return UnfoldedSGD(**options)


def _trainer(name, params):
    """The Trainer (or stand-in) a setting is timed with."""
    import gluonkit

    _, options, _ = SETTINGS[name]
    optimizer = _unfolded_sgd(OPTIMIZER[1]) if name == "clip-each" else OPTIMIZER[0]
    trainer = gluonkit.Trainer(params, optimizer, None if name == "clip-each" else dict(OPTIMIZER[1]), **options)
    return KeptOnDevice(trainer, params) if name == "skip-device" else trainer


def host_bound_net(ctx):
    """40 Dense(8) layers, initialized on ``ctx``, hybridized with static memory and shapes."""
    import mxnet as mx
    from mxnet import gluon

    net = gluon.nn.HybridSequential()
    for _ in range(LAYERS):
        net.add(gluon.nn.Dense(WIDTH, in_units=WIDTH, activation="relu"))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def _forward_backward(net, loss_fn, x, y):
    from mxnet import autograd

    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()


def _ratios(seconds, reference):
    """Median, min and max of the paired ratios ``seconds[r] / reference[r]``."""
    ratios = [a / b for a, b in zip(seconds, reference)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def measure_settings(rounds, steps, seed):
    """Time ``steps`` training steps per setting (and the floor) for ``rounds`` rounds."""
    import mxnet as mx
    from mxnet import gluon

    mx.random.seed(seed)
    ctx = mx.cpu()
    net = host_bound_net(ctx)
    loss_fn = gluon.loss.L2Loss()
    x, y = mx.nd.random.normal(shape=(BATCH, WIDTH), ctx=ctx), mx.nd.random.normal(shape=(BATCH, WIDTH), ctx=ctx)
    count = mx.nd.array([BATCH], ctx=ctx)
    runs = {}
    for name, (_, _, as_array) in SETTINGS.items():
        runs[name] = _training(net, loss_fn, _trainer(name, net.collect_params()), x, y,
                               count if as_array else BATCH, steps)
    runs["floor"] = lambda: [_forward_backward(net, loss_fn, x, y) for _ in range(steps)]
    names = list(runs)
    for name in names:   # warm-up: the graph, optimizer states, the checks' buffers
        runs[name]()
    seconds = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(timed(runs[name]))
    return {"rounds": rounds, "steps": steps, "seconds": seconds,
            "ms_per_step": {n: 1000 * statistics.median(s) / steps for n, s in seconds.items()},
            "ratio": {n: _ratios(seconds[n], seconds[REFERENCE]) for n in names if n != REFERENCE}}


def _training(net, loss_fn, trainer, x, y, count, steps):
    def run():
        for _ in range(steps):
            _forward_backward(net, loss_fn, x, y)
            trainer.step(count)
    return run


def measure_accumulation(rounds, updates, seed):
    """Time ``updates`` accumulated updates of 4 micro-batches of 16 against the same forward
    and backward calls without a Trainer, taking turns for ``rounds`` rounds."""
    import mxnet as mx
    from mxnet import gluon

    import gluonkit

    ctx = mx.cpu()
    net = make_net("cnn", seed)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    images, labels = make_data("cnn", MICRO_BATCH * MICRO_BATCHES, seed)
    batches = [(mx.nd.array(images[i:i + MICRO_BATCH], ctx=ctx), mx.nd.array(labels[i:i + MICRO_BATCH], ctx=ctx))
               for i in range(0, len(images), MICRO_BATCH)]
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), accumulate=MICRO_BATCHES)

    def accumulated():
        for _ in range(updates):
            for x, y in batches:
                _forward_backward(net, loss_fn, x, y)
                trainer.step(MICRO_BATCH)

    def floor():
        for _ in range(updates):
            for x, y in batches:
                _forward_backward(net, loss_fn, x, y)

    runs = {"floor": floor, "accumulate": accumulated}
    for run in runs.values():
        run()
    seconds = {name: [] for name in runs}
    for r in range(rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            seconds[name].append(timed(runs[name]))
    return {"rounds": rounds, "updates": updates, "seconds": seconds,
            "ms_per_update": {n: 1000 * statistics.median(s) / updates for n, s in seconds.items()},
            "ratio": _ratios(seconds["accumulate"], seconds["floor"])}


def targets(settings, accumulation):
    """The goals: each of ``TARGET_SETTINGS`` at most ``TARGET`` times an 'ignore' step, and
    accumulation at most ``TARGET`` times its floor. A list of dicts 'target', 'value', 'met'."""
    found = []
    for name in TARGET_SETTINGS:
        ratio = settings["ratio"][name]
        found.append({"target": f"host-bound network: {SETTINGS[name][0]} <= {TARGET:.2f}x an 'ignore' step",
                      "value": f"{ratio['median']:.2f}x", "met": ratio["median"] <= TARGET})
    ratio = accumulation["ratio"]
    found.append({"target": f"accumulation over {MICRO_BATCHES} micro-batches of {MICRO_BATCH} <= {TARGET:.2f}x "
                            "their forward+backward floor", "value": f"{ratio['median']:.2f}x",
                  "met": ratio["median"] <= TARGET})
    return found


README_TEXT = """\
## The host's share of a step (`stepcost.py`)

```bash
python -m benchmarks.stepcost           # the tables below (about 2 minutes)
python -m benchmarks.stepcost --quick   # seconds, for the test suite
```

A host-bound network ({layers} `Dense({width})` layers, batch {batch}, `hybridize(static_alloc=True,
static_shape=True)`, one device, SGD with momentum and weight decay) is trained under each
setting of `gluonkit.Trainer`, each with its own Trainer over the same parameters, taking
turns for {rounds} rounds of {steps} steps (the order rotating). The ratio is the median over
the rounds of a setting's round time over the 'ignore' round's (min and max in brackets).
Clipping computes its factor on the device and folds it into SGD's multi-tensor update: it
waits for nothing; 'skip', 'raise' and a count given as an NDArray wait once per update
(docs/trainer.md says why). Two rows time what gluonkit does not do, as the alternatives:
clipping by one operator per gradient array (gluonkit's behaviour before the fold, kept for
optimizers other than SGD) and 'skip' decided on the device (not exact). MXNet runs one
OpenMP thread unless `OMP_NUM_THREADS` is set: with two, on this machine shared with other
jobs, this network's step took twice as long and its rounds varied fourfold."""

ACCUMULATION_TEXT = """\
Accumulation: the recipe CNN (static memory and shapes), `accumulate={micro}` over micro-batches
of {size} already on the device, against the same {micro} forward+backward calls without a
Trainer (the floor), taking turns for {rounds} rounds of {updates} updates."""


def _ratio(r):
    return f"{r['median']:.2f}x ({r['min']:.2f} .. {r['max']:.2f})"


def readme_section(results):
    """The README section: how to reproduce, what is measured, the conditions, the tables."""
    info, settings, accumulation = results["machine"], results["settings"], results["accumulation"]
    threads = ", ".join(f"{k}={v}" for k, v in info["threads"].items())
    rows = [{"setting": label, "ms": f"{settings['ms_per_step'][name]:.2f}",
             "ratio": "1.00x" if name == REFERENCE else _ratio(settings["ratio"][name])}
            for name, (label, _, _) in SETTINGS.items()]
    rows.append({"setting": "forward+backward only (the floor)", "ms": f"{settings['ms_per_step']['floor']:.2f}",
                 "ratio": _ratio(settings["ratio"]["floor"])})
    acc = [{"run": f"accumulate={MICRO_BATCHES}, {MICRO_BATCHES} x {MICRO_BATCH}",
            "ms": f"{accumulation['ms_per_update']['accumulate']:.1f}", "ratio": _ratio(accumulation["ratio"])},
           {"run": f"the floor: {MICRO_BATCHES} forward+backward of {MICRO_BATCH}",
            "ms": f"{accumulation['ms_per_update']['floor']:.1f}", "ratio": "1.00x"}]
    return "\n\n".join([
        README_TEXT.format(layers=LAYERS, width=WIDTH, batch=BATCH, rounds=settings["rounds"],
                           steps=settings["steps"]),
        measured_on(info, threads),
        markdown_table(rows, [("setting", "setting"), ("ms/step", "ms"), ("over 'ignore'", "ratio")]),
        ACCUMULATION_TEXT.format(micro=MICRO_BATCHES, size=MICRO_BATCH, rounds=accumulation["rounds"],
                                 updates=accumulation["updates"]),
        markdown_table(acc, [("run", "run"), ("ms/update", "ms"), ("over the floor", "ratio")]),
        "\n".join(target_line(t) for t in results["targets"])])


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=int, help="timed rounds (default 60; 2 with --quick)")
    parser.add_argument("--steps", type=int, help="steps per round on the host-bound network (default 30)")
    parser.add_argument("--updates", type=int, help="accumulated updates per round (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    apply_defaults(args, QUICK if args.quick else FULL, SECTION)
    for name in ("rounds", "steps", "updates"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}.")
    return args


def main(args):
    """Measure both parts; print the targets, write the JSON and the README section."""
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    settings = measure_settings(args.rounds, args.steps, args.seed)
    accumulation = measure_accumulation(args.rounds, args.updates, args.seed)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results = {"machine": info, "settings": settings, "accumulation": accumulation,
               "targets": targets(settings, accumulation)}
    section = readme_section(results)
    print(section)
    write_outputs(args, SECTION, results, section)
    return results


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")   # see the module's docstring
    set_env("benchmarks.stepcost")
    main(parse_args())
