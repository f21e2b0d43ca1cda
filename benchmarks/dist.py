"""Distributed training over loopback: 2 workers of a dist_sync job and 2 Horovod ranks, each against 1 worker started the same way.

    python -m benchmarks.dist                       # print the table (results: --out, --readme)
    python -m benchmarks.dist --update-committed    # replace the committed figures (quiet machine)
    python -m benchmarks.dist --quick               # seconds, for the test suite; figures not meaningful

Trains the recipes' small CNN (gluonkit.recipes.models) and GluonCV's cifar_resnet20_v1 on
synthetic images with ``gluonkit.Trainer``, as gluonkit-bench's jobs of workers
(:mod:`gluonkit.bench.workers`): for each kvstore, a job of 1 worker and a job of 2, both
started by the same launcher (``gluonkit.launch -n W -s 1``, kvstore 'dist_sync', or
``horovodrun --gloo -np W``, kvstore 'horovod'), every worker with the same batch and the same
``OMP_NUM_THREADS``, the jobs taking turns. Scaling efficiency is samples/s of 2 workers over
2 x the 1-worker job's, paired by repeat. Results go to ``--out`` and the "dist" section of
``--readme``; ``--update-committed`` writes benchmarks/results/dist.json and benchmarks/README.md.
"""
import argparse
import sys

from gluonkit.bench import workers
from gluonkit.bench.harness import machine, markdown_table, measured_on
from ._common import (add_output_options, apply_defaults, benchmark_parser, parse_with_config, set_env,
                      write_outputs)
from ._contestants import CLASSES, NETWORKS

__all__ = ["NETS", "KVSTORES", "measure", "parse_args", "main"]

SECTION = "dist"
NETS = ("cnn", "cifar_resnet20_v1")
KVSTORES = {"dist_sync": "dist_sync workers + 1 server (gluonkit.launch)", "horovod": "Horovod ranks (Gloo)"}
# per network: (batch per worker, updates per epoch)
FULL = {"repeats": 3, "sizes": {"cnn": (64, 60), "cifar_resnet20_v1": (32, 8)}}
QUICK = {"repeats": 1, "sizes": {"cnn": (4, 2), "cifar_resnet20_v1": (2, 2)}}


def _job_args(net, kvstore, args):
    """The gluonkit-bench options of one network's jobs on one kvstore."""
    batch, steps = args.sizes[net]
    spec, shape = NETWORKS[net]
    return argparse.Namespace(
        net_spec=spec, input_shapes=[list(shape)], label_shape=[], classes=CLASSES, loss="softmax",
        dtype="float32", device="cpu", devices=[1], kvstore=kvstore, batch_size=batch, accumulate=1,
        steps=steps, hybridize="dynamic", seed=args.seed, workers=[1, 2], contestants=["gluonkit"],
        threads=args.threads, timeout=args.timeout, repeats=args.repeats, quick=args.quick)


def measure(args, log=print):
    """Every network's jobs of 1 and 2 workers on each kvstore; the rows, with 'net'."""
    rows = []
    for net in args.nets:
        for kvstore in args.kvstores:
            log(f"{net}, {kvstore}: batch {args.sizes[net][0]} per worker, {args.sizes[net][1]} updates per "
                f"epoch, {args.repeats} launches of each job")
            for row in workers.measure(_job_args(net, kvstore, args), log=log):
                rows.append(dict(row, net=net, run=KVSTORES[kvstore]))
    return rows


def _fmt(value, digits=1):
    return f"{value:.{digits}f}"


COLUMNS = [
    ("network", "net"),
    ("run", "run"),
    ("workers", "workers"),
    ("OMP threads per process", "threads_per_process"),
    ("batch per worker", "batch_per_device"),
    ("samples/s, all workers (median)", lambda r: _fmt(r["samples_per_s"])),
    ("min - max", lambda r: f"{_fmt(r['min'])} - {_fmt(r['max'])}"),
    ("speed-up over 1 worker (min - max)",
     lambda r: f"{r['speedup']:.2f} ({r['speedup_min']:.2f} - {r['speedup_max']:.2f})" if "speedup" in r else ""),
    ("scaling efficiency", lambda r: f"{r['efficiency']:.0%}" if "efficiency" in r else ""),
    ("launch to end, s", lambda r: _fmt(r["launch_s"])),
]


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    run = parser.add_argument_group("run")
    default = [k for k in KVSTORES if k != "horovod" or workers.horovod_available()]
    run.add_argument("--kvstores", default=",".join(default),
                     help="comma-separated, among dist_sync, horovod (horovod by default where Horovod is "
                          "installed: make horovod)")
    run.add_argument("--nets", default=",".join(NETS), help=f"comma-separated, among {', '.join(NETWORKS)}")
    run.add_argument("--repeats", type=int, help="launches of each job (default 3; 1 with --quick)")
    run.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every process of every job "
                     "(default: cores / 2)")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds before a job is ended")
    run.add_argument("--seed", type=int, default=0)
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, sys.argv[1:] if argv is None else argv)
    args.sizes = None
    apply_defaults(args, QUICK if args.quick else FULL, SECTION)
    args.kvstores, args.nets = args.kvstores.split(","), args.nets.split(",")
    if not args.kvstores or any(k not in KVSTORES for k in args.kvstores):
        parser.error(f"--kvstores must name kvstores among {', '.join(KVSTORES)}; got {', '.join(args.kvstores)}.")
    if "horovod" in args.kvstores and not workers.horovod_available():
        parser.error("--kvstores horovod needs Horovod for MXNet and horovodrun beside this Python; build it "
                     "with `make horovod`.")
    if not args.nets or any(net not in NETWORKS for net in args.nets):
        parser.error(f"--nets must name networks among {', '.join(NETWORKS)}; got {', '.join(args.nets)}.")
    for key in ("repeats", "threads", "timeout"):
        value = getattr(args, key)
        if value is not None and value <= 0:
            parser.error(f"--{key.replace('_', '-')} must be positive, got {value}.")
    return args


def main(args):
    """Measure, then write the JSON and the README section; return the results."""
    import os
    import time

    info = machine()
    print(f"{info['cpu']}, {info['cores']} cores, load {info['load_average']}")
    tic = time.perf_counter()
    rows = measure(args)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "readme", "config")}
    results = {"machine": info, "args": settings, "rows": rows, "seconds": time.perf_counter() - tic}
    table = markdown_table(rows, COLUMNS)
    print(table)
    write_outputs(args, SECTION, results, readme_section(results, table))
    return results


def readme_section(results, table):
    """The README section: how to reproduce, what the figures mean, the conditions, the table."""
    info, a = results["machine"], results["args"]
    sizes = "; ".join(f"{net}: batch {b} per worker, {s} updates per epoch" for net, (b, s) in a["sizes"].items()
                      if net in a["nets"])
    threads = results["rows"][0]["threads_per_process"] if results["rows"] else "?"
    return "\n\n".join([
        README_TEXT.format(sizes=sizes, repeats=a["repeats"], cores=info["cores"], threads=threads,
                           minutes=results["seconds"] / 60),
        measured_on(info, f"OMP_NUM_THREADS={threads} in every process of every job"), table])


README_TEXT = """\
## Distributed (`dist.py`)

```bash
python -m benchmarks.dist                      # the table below (Horovod from make horovod)
python -m benchmarks.dist --update-committed   # the same, replacing this section and results/dist.json
python -m benchmarks.dist --quick              # seconds, for the test suite
```

The recipes' small CNN (`gluonkit.recipes.models.small_cnn`, 1x8x8 images) and GluonCV's
`cifar_resnet20_v1` (3x32x32) on synthetic images with random labels, `gluonkit.Trainer` with
SGD ({sizes}), as gluonkit-bench's jobs of workers (`gluonkit-bench --workers 1,2`): for each
kvstore a job of 1 worker and a job of 2, started by the same launcher
(`python -m gluonkit.launch -n W -s 1`, kvstore `dist_sync`, one server; `horovodrun --gloo
-np W -H localhost:W --network-interface lo`, kvstore `horovod`), every worker with the same
batch and `OMP_NUM_THREADS={threads}` on the {cores} cores, each launch a warm-up epoch and 2
timed ones; {repeats} launches of each job, the jobs taking turns. This run took
{minutes:.0f} minutes.

- samples/s counts the samples of all workers over the slowest worker's time per timed
  epoch (a launch's figure is the median of its epochs; the row's, of its launches).
- speed-up: 2 workers' samples/s over the 1-worker job's in the same repeat (median, min -
  max); scaling efficiency is the speed-up over 2. Both jobs' processes are started by
  setsid, so the kernel's autogroup scheduler treats them alike, and each process has the
  same threads: 100% means 2 workers did twice the work of one, what communication and
  sharing the machine cost shows as the shortfall. On 2 cores each worker has a core; on a
  loaded machine the other programs take their share of both."""


if __name__ == "__main__":
    set_env("benchmarks.dist")
    main(parse_args())
