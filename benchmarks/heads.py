"""Counts by head against a single count on ``gluonkit-multitask``'s network: the step's cost
and the memory, each as a ratio measured in one run.

    python -m benchmarks.heads           # the table below (about a minute)
    python -m benchmarks.heads --quick   # seconds, for the test suite; figures not meaningful

The multitask recipe's network (a conv trunk, three dense heads: digit, parity, aux),
hybridized, one device, SGD with momentum and weight decay, ``accumulate=2`` over
micro-batches of 32 already on the device, in two ways over the same parameters, each with
its own ``gluonkit.Trainer``, taking turns round by round: the single count (the heads'
per-sample losses summed, ``step(32)``) and counts by head (``begin_window`` once per window,
``weigh_losses``, ``step({head: count})``, the 'aux' label on a fraction of the samples). The
step cost is the median over the rounds of the counts-by-head round time over the single
count's. Memory: each way trains in a process of its own, and the ratio is of their peak
resident memory. Results go to a JSON file and the "heads" section of benchmarks/README.md.
"""
import json
import os
import resource
import statistics
import subprocess
import sys

from ._common import (add_output_options, apply_defaults, benchmark_parser, parse_with_config, set_env,
                      thread_settings, timed, write_outputs)
from ._contestants import OPTIMIZER
from gluonkit.bench.harness import machine, markdown_table, measured_on, target_line

__all__ = ["WAYS", "measure_steps", "measure_memory", "targets", "parse_args", "main"]

SECTION = "heads"
MICRO_BATCH, ACCUMULATE = 32, 2
HAS_AUX = 0.4   # the fraction of samples with the 'aux' label
WAYS = {"single": "a single count: step(32)", "heads": "counts by head: step({'digit': .., 'parity': .., 'aux': ..})"}
STEP_TARGET, MEMORY_TARGET = 1.05, 1.10
FULL = {"rounds": 100, "updates": 2}   # short rounds: the two of a pair close in time
QUICK = {"rounds": 2, "updates": 2}


def _setup(seed):
    """The network, the micro-batches (data, labels by head, aux mask) and the loss."""
    import mxnet as mx
    import numpy as np
    from mxnet import gluon

    from gluonkit.recipes.multitask import HEADS, MultiTaskNet

    mx.random.seed(seed)
    rng = np.random.RandomState(seed)
    net = MultiTaskNet()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    batches = []
    for _ in range(ACCUMULATE):
        digits = mx.nd.array(rng.randint(0, 10, MICRO_BATCH))
        labels = {name: target(digits).astype("float32") for name, target in HEADS.items()}
        mask = mx.nd.array(rng.rand(MICRO_BATCH) < HAS_AUX)
        batches.append((mx.nd.array(rng.rand(MICRO_BATCH, 1, 8, 8)), labels, mask))
    return net, batches, gluon.loss.SoftmaxCrossEntropyLoss()


def _per_sample(net, loss_fn, x, labels, mask):
    outputs = dict(zip(("digit", "parity", "aux"), net(x)))
    return {name: loss_fn(out, labels[name]) * (mask if name == "aux" else 1) for name, out in outputs.items()}


def _runner(way, net, batches, loss_fn, updates):
    """``run()``: ``updates`` accumulated updates the given way, with a Trainer of its own."""
    from mxnet import autograd

    import gluonkit

    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), accumulate=ACCUMULATE)
    counts = [{"digit": MICRO_BATCH, "parity": MICRO_BATCH, "aux": int(mask.sum().asscalar())}
              for _, _, mask in batches]
    window = {name: sum(c[name] for c in counts) for name in counts[0]}

    def single():
        for _ in range(updates):
            for x, labels, mask in batches:
                with autograd.record():
                    loss = sum(_per_sample(net, loss_fn, x, labels, mask).values())
                loss.backward()
                trainer.step(MICRO_BATCH)

    def by_head():
        for _ in range(updates):
            trainer.begin_window(window)
            for (x, labels, mask), count in zip(batches, counts):
                with autograd.record():
                    loss = trainer.weigh_losses(_per_sample(net, loss_fn, x, labels, mask))
                loss.backward()
                trainer.step(count)

    return single if way == "single" else by_head


def measure_steps(rounds, updates, seed):
    """Time ``updates`` updates each way for ``rounds`` rounds, taking turns."""
    net, batches, loss_fn = _setup(seed)
    runs = {way: _runner(way, net, batches, loss_fn, updates) for way in WAYS}
    for run in runs.values():   # warm-up: the graph, the optimizer states
        run()
    seconds = {way: [] for way in runs}
    for r in range(rounds):
        for way in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            seconds[way].append(timed(runs[way]))
    ratios = [a / b for a, b in zip(seconds["heads"], seconds["single"])]
    return {"rounds": rounds, "updates": updates, "seconds": seconds,
            "ms_per_update": {w: 1000 * statistics.median(s) / updates for w, s in seconds.items()},
            "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}}


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # kB on Linux


def measure_memory(updates, seed):
    """Each way's peak resident memory (MB) in a process of its own training ``updates`` updates."""
    peaks = {}
    for way in WAYS:
        command = [sys.executable, "-m", "benchmarks.heads", "--train-only", way, "--updates", str(updates),
                   "--seed", str(seed), "--quick"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        peaks[way] = json.loads(result.stdout.strip().splitlines()[-1])["peak_rss_mb"]
    return {"peak_rss_mb": peaks, "ratio": peaks["heads"] / peaks["single"]}


def targets(steps, memory):
    """The goals: counts by head at most 1.05x the single count's step, 1.1x its memory."""
    return [{"target": f"counts by head <= {STEP_TARGET:.2f}x the single count's update time",
             "value": f"{steps['ratio']['median']:.3f}x", "met": steps["ratio"]["median"] <= STEP_TARGET},
            {"target": f"counts by head <= {MEMORY_TARGET:.2f}x the single count's peak memory",
             "value": f"{memory['ratio']:.3f}x", "met": memory["ratio"] <= MEMORY_TARGET}]


README_TEXT = """\
## Counts by head (`heads.py`)

```bash
python -m benchmarks.heads           # the table below (about a minute)
python -m benchmarks.heads --quick   # seconds, for the test suite
```

`gluonkit-multitask`'s network (a conv trunk and three dense heads), hybridized, one device,
SGD with momentum and weight decay, `accumulate={accumulate}` over micro-batches of {size}
already on the device, trained with a single count (`step({size})`, the heads' per-sample
losses summed) and with counts by head (`begin_window` once per window, `weigh_losses`,
`step({{head: count}})`, the 'aux' label on {aux:.0%} of the samples), each with its own
Trainer over the same parameters, taking turns for {rounds} rounds of {updates} updates. The
ratio is the median over the rounds of the counts-by-head round time over the single count's
(min and max in brackets). Memory: each way in a process of its own, the ratio of their peak
resident memory. Counting by head adds no gradient buffer: its cost is one small sum per
window (none on one worker) and a multiply per head in the loss."""


def readme_section(results):
    info, steps, memory = results["machine"], results["steps"], results["memory"]
    threads = ", ".join(f"{k}={v}" for k, v in info["threads"].items())
    ratio = steps["ratio"]
    rows = [{"way": WAYS["single"], "ms": f"{steps['ms_per_update']['single']:.2f}", "ratio": "1.00x",
             "mb": f"{memory['peak_rss_mb']['single']:.0f}", "mem": "1.00x"},
            {"way": WAYS["heads"], "ms": f"{steps['ms_per_update']['heads']:.2f}",
             "ratio": f"{ratio['median']:.3f}x ({ratio['min']:.2f} .. {ratio['max']:.2f})",
             "mb": f"{memory['peak_rss_mb']['heads']:.0f}", "mem": f"{memory['ratio']:.3f}x"}]
    return "\n\n".join([
        README_TEXT.format(accumulate=ACCUMULATE, size=MICRO_BATCH, aux=HAS_AUX, rounds=steps["rounds"],
                           updates=steps["updates"]),
        measured_on(info, threads),
        markdown_table(rows, [("way", "way"), ("ms/update", "ms"), ("over the single count", "ratio"),
                              ("peak MB", "mb"), ("memory ratio", "mem")]),
        "\n".join(target_line(t) for t in results["targets"])])


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=int, help="timed rounds (default 100; 2 with --quick)")
    parser.add_argument("--updates", type=int, help="updates per round (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-only", choices=sorted(WAYS),
                        help="train one way and print its peak memory (the memory measurement's process)")
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    apply_defaults(args, QUICK if args.quick else FULL, SECTION)
    for name in ("rounds", "updates"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}.")
    return args


def main(args):
    """Measure the step cost and the memory; print the targets, write the JSON and README section."""
    if args.train_only:
        net, batches, loss_fn = _setup(args.seed)
        _runner(args.train_only, net, batches, loss_fn, args.updates)()
        import mxnet as mx
        mx.nd.waitall()
        print(json.dumps({"peak_rss_mb": _peak_rss_mb()}))
        return None
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    steps = measure_steps(args.rounds, args.updates, args.seed)
    memory = measure_memory(max(args.updates, 5), args.seed)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results = {"machine": info, "steps": steps, "memory": memory, "targets": targets(steps, memory)}
    section = readme_section(results)
    print(section)
    write_outputs(args, SECTION, results, section)
    return results


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")   # one thread: paired rounds vary less on a shared machine
    set_env("benchmarks.heads")
    main(parse_args())
