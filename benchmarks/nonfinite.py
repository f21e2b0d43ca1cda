"""The cost of the gradient checks of ``gluonkit.Trainer``: ``on_nonfinite='skip'``, alone and
with ``clip_global_norm``, and clipping alone (on the device), against 'ignore'.

    python -m benchmarks.nonfinite           # the three networks (about 11 minutes on 2 idle cores)
    python -m benchmarks.nonfinite --quick   # seconds, for the test suite; figures not meaningful

Each network is trained by a hand-written loop (the throughput benchmark's) under the
settings of ``gluonkit.Trainer``: 'ignore'; 'skip'; 'skip' with a ``clip_global_norm`` far
above every gradient norm met (it never clips: the cost of computing and checking the norm);
'skip' with one far below them (every update is scaled); that clipping alone, under 'ignore'
(on the device, no wait); and, as the alternative gluonkit does not use, 'skip' decided on the
device (``benchmarks.stepcost.KeptOnDevice``: not exact). ``clip_global_norm`` is fixed when a
Trainer is built, so each setting has its own Trainer, all built in one process over the
same network's parameters, and the loop switches between them epoch by epoch, the order
rotating every round. So every setting trains the same weights on the same data, memory and
load, and each keeps optimizer states of the same size; separate processes (as in the
throughput benchmark) would add their differences of memory layout and scheduling to a cost
of a few per cent. The extra step time of a setting is the median over the rounds of its
epoch's time over the 'ignore' epoch's of the same round, minus 1. Results go to a JSON file
and the "nonfinite" section of benchmarks/README.md.
"""
import os
import statistics
import time

from tqdm import tqdm

from ._common import (add_output_options, apply_defaults, benchmark_parser, parse_with_config, set_env,
                      thread_settings, write_outputs)
from ._contestants import NETWORKS, QUICK_SIZE, SIZES, build
from gluonkit.bench.harness import machine, markdown_table, measured_on, target_line
from .stepcost import KeptOnDevice

__all__ = ["SETTINGS", "check_clipping", "measure_network", "targets", "parse_args", "main"]

SECTION = "nonfinite"
NEVER_CLIPS = 1e6   # the gradient norms met here are about 1 to 50 (checked after every epoch)
CLIPS = 1e-6        # ... so this one scales every update (checked too; 0.01 was not, late in a cifar run)
REFERENCE = "ignore"


def _number(value):
    return f"{value:g}".replace("e+0", "e").replace("e-0", "e-")   # 1e6, 1e-6, 0.01


# name: (table label, gluonkit.Trainer options)
SETTINGS = {
    "ignore": ("'ignore'", {"on_nonfinite": "ignore"}),
    "skip": ("'skip'", {"on_nonfinite": "skip"}),
    "skip+clip": (f"'skip' + clip_global_norm={_number(NEVER_CLIPS)} (never clips)",
                  {"on_nonfinite": "skip", "clip_global_norm": NEVER_CLIPS}),
    "skip+clipping": (f"'skip' + clip_global_norm={_number(CLIPS)} (clips every update)",
                      {"on_nonfinite": "skip", "clip_global_norm": CLIPS}),
    "clipping": (f"clip_global_norm={_number(CLIPS)} under 'ignore' (on the device)",
                 {"on_nonfinite": "ignore", "clip_global_norm": CLIPS}),
    "skip-device": ("'skip' decided on the device (not exact)", {"on_nonfinite": "ignore"}),
}
TARGET = 0.02   # at most 2% extra step time ...
TARGET_NET = "resnet18_v1b"   # ... on this network, for these settings:
TARGET_SETTINGS = ("skip", "skip+clip", "skip+clipping")
FULL = {"nets": ",".join(NETWORKS), "rounds": 40}
QUICK = {"nets": "cnn", "rounds": 2}


def check_clipping(name, trainer):
    """Refuse a run whose clipping setting did not do what its label says (last update)."""
    clip = trainer.clip_global_norm
    if clip is None:
        return
    clipped = trainer.global_norm > clip
    if clipped != (clip == CLIPS):
        raise RuntimeError(f"{name}: the last update's gradient norm was {trainer.global_norm:.4g}, so "
                           f"clip_global_norm={clip:g} {'clipped' if clipped else 'did not clip'} it; "
                           "the timings would not measure what the table says. Change NEVER_CLIPS or "
                           "CLIPS for this network.")


def _spread(ratios):
    """Median, quartiles and range of the extra step times ``ratios`` - 1 (a dict)."""
    extra = [r - 1 for r in ratios]
    quartiles = statistics.quantiles(extra, n=4, method="inclusive") if len(extra) > 1 else extra * 3
    return {"median": statistics.median(extra), "q1": quartiles[0], "q3": quartiles[2],
            "min": min(extra), "max": max(extra)}


def measure_network(net, size, rounds, device, seed):
    """Time ``rounds`` epochs under each setting, taking turns; return the network's row."""
    import mxnet as mx

    batch, steps = size
    loop = build({"tool": "gluonkit", "net": net, "devices": 1, "device": device, "kvstore": "device",
                  "batch": batch, "steps": steps, "accumulate": 1, "on_nonfinite": "ignore",
                  "seed": seed})
    trainers = {name: loop.make_trainer("gluonkit", **options) for name, (_, options) in SETTINGS.items()}
    trainers["skip-device"] = KeptOnDevice(trainers["skip-device"], loop.net.collect_params())
    names = list(SETTINGS)
    for name in names:   # warm-up: graphs, optimizer states, the check's buffers
        loop.trainer = trainers[name]
        loop.run()
    seconds = {name: [] for name in names}
    for r in tqdm(range(rounds), desc=net, unit="round", leave=False):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            loop.trainer = trainers[name]
            mx.nd.waitall()
            tic = time.perf_counter()
            loop.run()
            mx.nd.waitall()
            seconds[name].append(time.perf_counter() - tic)
            check_clipping(f"{net}, {name}", trainers[name])
    skipped = {name: t.nonfinite_skips for name, t in trainers.items() if t.nonfinite_skips}
    if skipped:
        raise RuntimeError(f"{net}: updates were skipped ({skipped}); the timings would not compare "
                           "like with like.")
    return {"net": net, "batch": batch, "steps": steps, "rounds": rounds, "seconds": seconds,
            "ms_per_step": {n: 1000 * statistics.median(s) / steps for n, s in seconds.items()},
            "global_norm": {n: trainers[n].global_norm for n in names if n != REFERENCE},
            "extra": {n: _spread([a / b for a, b in zip(seconds[n], seconds[REFERENCE])])
                      for n in names if n != REFERENCE}}


def targets(rows):
    """The goal checked on the rows: on ``TARGET_NET``, each of ``TARGET_SETTINGS`` costs at
    most ``TARGET`` of an 'ignore' step. A list of dicts 'target', 'value' and 'met' (None
    where the network was not measured)."""
    row = next((r for r in rows if r["net"] == TARGET_NET), None)
    found = []
    for name in TARGET_SETTINGS:
        target = f"{TARGET_NET}: {SETTINGS[name][0]} costs <= {TARGET:.0%} of an 'ignore' step"
        if row is None:
            found.append({"target": target, "value": "not measured", "met": None})
            continue
        extra = row["extra"][name]
        found.append({"target": target, "value": f"{extra['median']:+.1%} (middle half of the rounds "
                      f"{extra['q1']:+.1%} .. {extra['q3']:+.1%})", "met": extra["median"] <= TARGET})
    return found


def _extra(name):
    return lambda r: (f"{r['extra'][name]['median']:+.1%} ({r['extra'][name]['q1']:+.1%} .. "
                      f"{r['extra'][name]['q3']:+.1%})")


COLUMNS = [("network", "net"), ("batch", "batch"),
           ("ms/step, 'ignore'", lambda r: f"{r['ms_per_step'][REFERENCE]:.1f}")]
COLUMNS += [(label, _extra(name)) for name, (label, _) in SETTINGS.items() if name != REFERENCE]

README_TEXT = """\
## The cost of `on_nonfinite='skip'` and `clip_global_norm` (`nonfinite.py`)

```bash
python -m benchmarks.nonfinite           # the table below (about 11 minutes)
python -m benchmarks.nonfinite --quick   # seconds, for the test suite
```

With `on_nonfinite='skip'` (or 'raise'), every update first sums the squares of all
gradients on the device and reads the result, with the window's count, in one wait: the
update waits for the whole backward pass, and the host for the device. A clipping update
folds its factor into the optimizer's `rescale_grad` (with `clip_global_norm` alone, under
'ignore', the factor is computed on the device and folded into SGD's multi-tensor update:
nothing waits, see `stepcost.py`).
Each network (the throughput benchmark's, same batch, data and optimizer) is trained by a
hand-written loop under these settings of `gluonkit.Trainer`: 'ignore', 'skip', 'skip' with
`clip_global_norm={never}` (far above every gradient norm met: it never clips, checked after
every epoch), 'skip' with `clip_global_norm={clips}` (far below: every update is scaled), that
clipping alone under 'ignore', and 'skip' decided on the device, the alternative gluonkit does
not use as it is not exact (docs/trainer.md): each update copies every weight and momentum
and keeps the copies where the gradients' sum of squares is not finite, without a wait.
`clip_global_norm` is fixed when a Trainer is built, so each setting has its own Trainer, all
built in one process over the same network's parameters; the loop switches Trainer epoch by
epoch, the order rotating every round, {rounds} rounds after a warm-up epoch of each. The
columns of the settings give the extra step time: the median over the rounds of the
setting's epoch time over the 'ignore' epoch's of the same round, minus 1 (the middle half of
the rounds in brackets)."""


def readme_section(results):
    """The README section: how to reproduce, what is measured, the conditions, the table."""
    info = results["machine"]
    threads = ", ".join(f"{k}={v}" for k, v in info["threads"].items())
    return "\n\n".join([README_TEXT.format(rounds=results["rounds"], never=_number(NEVER_CLIPS),
                                           clips=_number(CLIPS)),
                        measured_on(info, f"{threads}, device {results['device']}"),
                        markdown_table(results["rows"], COLUMNS),
                        "\n".join(target_line(t) for t in results["targets"])])


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--nets", help=f"comma-separated networks of {', '.join(NETWORKS)} (default all)")
    parser.add_argument("--rounds", type=int, help="timed epochs per setting (default 40; 2 with --quick)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--seed", type=int, default=0)
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    apply_defaults(args, QUICK if args.quick else FULL, SECTION)
    args.nets = args.nets.split(",")
    unknown = [n for n in args.nets if n not in NETWORKS]
    if unknown:
        parser.error(f"unknown network(s) {', '.join(unknown)}; choose from {', '.join(NETWORKS)}.")
    if args.rounds < 1:
        parser.error(f"--rounds must be positive, got {args.rounds}.")
    return args


def main(args):
    """Measure every network; print the table and targets, write the JSON and the README section."""
    import mxnet as mx

    if args.device == "gpu" and mx.context.num_gpus() < 1:
        raise SystemExit("--device gpu: no GPU is visible.")
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    rows = [measure_network(net, QUICK_SIZE if args.quick else SIZES[net], args.rounds, args.device,
                            args.seed) for net in args.nets]
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results = {"machine": info, "rounds": args.rounds, "device": args.device, "rows": rows,
               "targets": targets(rows)}
    print(markdown_table(rows, COLUMNS))
    print("\n".join(target_line(t) for t in results["targets"]))
    write_outputs(args, SECTION, results, readme_section(results))
    return results


if __name__ == "__main__":
    set_env("benchmarks.nonfinite")
    main(parse_args())
