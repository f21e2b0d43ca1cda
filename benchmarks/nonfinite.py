"""The cost of ``gluonkit.Trainer(on_nonfinite='skip')``: the gradient check before every update.

    python -m benchmarks.nonfinite           # the three networks (about 8 minutes on 2 idle cores)
    python -m benchmarks.nonfinite --quick   # seconds, for the test suite; figures not meaningful

Each network is trained by a hand-written loop with a ``gluonkit.Trainer`` whose policy is
switched between 'ignore' and 'skip' epoch by epoch, in the same process (the order
alternates), so both run on the same weights, memory and load; the extra step time is the
median over the rounds of skip/ignore - 1. Results go to a JSON file and the "nonfinite"
section of benchmarks/README.md.
"""
import os


import statistics
import time

from tqdm import tqdm

from ._common import apply_defaults, benchmark_parser, parse_with_config, set_env, thread_settings
from ._contestants import NETWORKS, QUICK_SIZE, SIZES, build
from ._harness import machine, markdown_table, measured_on, replace_section, write_json

SECTION = "nonfinite"
TARGET = 0.03   # at most 3% extra step time
POLICIES = ("ignore", "skip")
FULL = {"nets": ",".join(NETWORKS), "rounds": 60}
QUICK = {"nets": "cnn", "rounds": 2}


def measure_network(net, size, rounds, device, seed):
    """Time ``rounds`` epochs under each policy, alternating; return the network's row."""
    import mxnet as mx

    batch, steps = size
    loop = build({"tool": "gluonkit", "net": net, "devices": 1, "device": device, "kvstore": "device",
                  "batch": batch, "steps": steps, "accumulate": 1, "on_nonfinite": "ignore",
                  "seed": seed})
    for policy in POLICIES:   # warm-up: graphs, optimizer states, the check's buffers
        loop.trainer.on_nonfinite = policy
        loop.run()
    seconds = {policy: [] for policy in POLICIES}
    for r in tqdm(range(rounds), desc=net, unit="round", leave=False):
        for policy in POLICIES if r % 2 == 0 else POLICIES[::-1]:
            loop.trainer.on_nonfinite = policy
            mx.nd.waitall()
            tic = time.perf_counter()
            loop.run()
            mx.nd.waitall()
            seconds[policy].append(time.perf_counter() - tic)
    if loop.trainer.nonfinite_skips:
        raise RuntimeError(f"{net}: {loop.trainer.nonfinite_skips} update(s) were skipped; the "
                           "timings would not compare like with like.")
    extra = [s / i - 1 for i, s in zip(seconds["ignore"], seconds["skip"])]
    quartiles = statistics.quantiles(extra, n=4, method="inclusive") if len(extra) > 1 else extra * 3
    return {"net": net, "batch": batch, "steps": steps, "rounds": rounds, "seconds": seconds,
            "ms_per_step": {p: 1000 * statistics.median(s) / steps for p, s in seconds.items()},
            "extra": statistics.median(extra), "extra_q1": quartiles[0], "extra_q3": quartiles[2],
            "extra_min": min(extra), "extra_max": max(extra), "met": statistics.median(extra) < TARGET}


COLUMNS = [
    ("network", "net"),
    ("batch", "batch"),
    ("ms/step, 'ignore'", lambda r: f"{r['ms_per_step']['ignore']:.1f}"),
    ("ms/step, 'skip'", lambda r: f"{r['ms_per_step']['skip']:.1f}"),
    ("extra step time (median)", lambda r: f"{r['extra']:+.1%}"),
    ("middle half of the rounds", lambda r: f"{r['extra_q1']:+.1%} .. {r['extra_q3']:+.1%}"),
    ("min .. max", lambda r: f"{r['extra_min']:+.1%} .. {r['extra_max']:+.1%}"),
    (f"< {TARGET:.0%}", lambda r: "met" if r["met"] else "**NOT met**"),
]

README_TEXT = """\
## The cost of `on_nonfinite='skip'` (`nonfinite.py`)

```bash
python -m benchmarks.nonfinite           # the table below (about 8 minutes)
python -m benchmarks.nonfinite --quick   # seconds, for the test suite
```

With `on_nonfinite='skip'` (or 'raise'), every update first sums the squares of all
gradients on the device and reads the result: the update waits for the whole backward
pass, and the host for the device. Each network (the throughput benchmark's, same batch,
data and optimizer) is trained by a hand-written loop with one `gluonkit.Trainer` whose
policy is switched between 'ignore' and 'skip' epoch by epoch in the same process, the
order alternating, {rounds} rounds after a warm-up epoch of each. "extra step time" is the
median over the rounds of the 'skip' epoch's time over the 'ignore' epoch's, minus 1."""


def readme_section(results):
    """The README section: how to reproduce, what is measured, the conditions, the table."""
    info = results["machine"]
    threads = ", ".join(f"{k}={v}" for k, v in info["threads"].items())
    return "\n\n".join([README_TEXT.format(rounds=results["rounds"]),
                        measured_on(info, f"{threads}, device {results['device']}"),
                        markdown_table(results["rows"], COLUMNS)])


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--nets", help=f"comma-separated networks of {', '.join(NETWORKS)} (default all)")
    parser.add_argument("--rounds", type=int, help="timed epochs per policy (default 60; 2 with --quick)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="JSON results (default benchmarks/results/nonfinite.json; "
                        "with --quick none)")
    parser.add_argument("--readme", help="Markdown file whose 'nonfinite' section is rewritten "
                        "(default benchmarks/README.md; with --quick none)")
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
    """Measure every network; print the table, write the JSON and the README section."""
    import mxnet as mx

    if args.device == "gpu" and mx.context.num_gpus() < 1:
        raise SystemExit("--device gpu: no GPU is visible.")
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    rows = [measure_network(net, QUICK_SIZE if args.quick else SIZES[net], args.rounds, args.device,
                            args.seed) for net in args.nets]
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    results = {"machine": info, "rounds": args.rounds, "device": args.device, "rows": rows}
    print(markdown_table(rows, COLUMNS))
    if args.out:
        write_json(args.out, results)
    if args.readme:
        replace_section(args.readme, SECTION, readme_section(results))
    return results


if __name__ == "__main__":
    set_env("benchmarks.nonfinite")
    main(parse_args())
