"""Distributed training over loopback: one process against the workers of a dist_sync job.

    python -m benchmarks.dist            # full run (about 2 minutes on 2 cores)
    python -m benchmarks.dist --quick    # seconds, for the test suite; figures not meaningful

Trains the recipes' small CNN (gluonkit.recipes.models) on synthetic digit-sized images with
``gluonkit.Trainer``: as one process without a kvstore, and under
``python -m gluonkit.launch -n N -s 1`` (kvstore 'dist_sync', 127.0.0.1) with 1 and 2
workers, each worker on its own shard with the same batch. Reports samples/s over all
workers and the time from the launch until the first step is done. The runs take turns,
repeated; every process has a timeout. Results go to a JSON file and to the "dist" section of
benchmarks/README.md. Every process of a job runs this file as ``dist.py job SPEC``: in the servers
and the scheduler, importing MXNet serves the job and exits.
"""
import os
import sys


import json
import shutil
import statistics
import subprocess
import tempfile
import time

import mxnet as mx  # (in a server or the scheduler of a job, this serves and exits)
from mxnet import gluon

import gluonkit
from ._common import (ROOT, add_output_options, apply_defaults, benchmark_parser, parse_with_config,
                      set_env, thread_settings, write_outputs)
from ._contestants import OPTIMIZER, initialized_net, make_data, make_loader, train_step
from ._harness import machine, markdown_table, measured_on

SECTION = "dist"
NET = "cnn"
# name: (table label, workers; 0 means one process without a kvstore)
RUNS = {
    "single": ("1 process, no kvstore", 0),
    "dist1": ("1 worker + 1 server, dist_sync", 1),
    "dist2": ("2 workers + 1 server, dist_sync", 2),
}
REFERENCE = "single"
JOB = "job"   # first argument of the processes of a run
FULL = {"batch_size": 64, "steps": 100, "epochs": 3, "repeats": 3, "timeout": 300.0}
QUICK = {"batch_size": 8, "steps": 3, "epochs": 2, "repeats": 1, "timeout": 90.0}
_GRACE_SECONDS = 30.0   # beyond the launcher's own timeout, for it to end its processes


def run_job(out_dir, batch_size, steps, epochs, seed, t0):
    """One process of a run: a warm-up epoch, then ``epochs`` timed ones; timings to JSON."""
    started = time.time()
    distributed = "DMLC_ROLE" in os.environ
    kvstore = mx.kv.create("dist_sync") if distributed else "device"
    ready = time.time()
    rank = kvstore.rank if distributed else 0
    ctx = [mx.cpu()]
    net = initialized_net({"net": NET, "seed": seed}, ctx)
    trainer = gluonkit.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kvstore)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images, labels = make_data(NET, steps * batch_size, seed + 1 + rank)   # this worker's shard
    loader = make_loader(images, labels, batch_size)
    first_step, runs = None, []
    for epoch in range(epochs + 1):
        mx.nd.waitall()
        tic = time.perf_counter()
        for x, y in loader:
            train_step(net, loss_fn, trainer, gluonkit.split_and_load, ctx, x, y)
            if first_step is None:
                mx.nd.waitall()
                first_step = time.time()
        mx.nd.waitall()
        if epoch:   # epoch 0 is the warm-up
            runs.append({"samples": steps * batch_size, "seconds": time.perf_counter() - tic})
    timings = {"rank": rank, "t0": t0, "started": started, "ready": ready, "first_step": first_step,
               "runs": runs, "threads": thread_settings()}
    with open(os.path.join(out_dir, f"worker{rank}.json"), "w") as f:
        json.dump(timings, f)


def _job_command(out_dir, args, t0):
    """The command of every process of a run. Its settings go in a file, not in options:
    the dmlc tracker takes options that look like its own (even abbreviated) for itself."""
    spec = os.path.join(out_dir, "job.json")
    with open(spec, "w") as f:
        json.dump({"out_dir": out_dir, "batch_size": args.batch_size, "steps": args.steps,
                   "epochs": args.epochs, "seed": args.seed, "t0": t0}, f)
    return [sys.executable, "-m", "benchmarks.dist", JOB, spec]


def _threads(workers, worker_threads):
    """OMP_NUM_THREADS of every process of a run: the cores shared out among the workers."""
    if workers == 0:
        return os.environ["OMP_NUM_THREADS"]
    return str(worker_threads or max(1, (os.cpu_count() or 1) // workers))


def launch_run(workers, args):
    """Run one process, or a job of ``workers`` workers and one server; return its timings.

    Returns a dict: 'start_s' (launch until every worker finished its first step),
    'ready_s' (until every worker's kvstore was created), 'samples_per_s' (one per timed
    epoch: samples of all workers over the slowest worker's time).
    """
    out_dir = tempfile.mkdtemp(prefix="gluonkit-dist-")
    env = dict(os.environ, OMP_NUM_THREADS=_threads(workers, args.worker_threads))
    try:
        t0 = time.time()
        command = _job_command(out_dir, args, t0)
        if workers:
            command = [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1",
                       "--timeout", f"{args.timeout:g}", "--"] + command
        result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT,
                                timeout=args.timeout + _GRACE_SECONDS)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:8])} ... failed (exit code {result.returncode}):\n"
                               + result.stderr[-3000:])
        timings = []
        for rank in range(max(workers, 1)):
            with open(os.path.join(out_dir, f"worker{rank}.json")) as f:
                timings.append(json.load(f))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    epochs = zip(*(t["runs"] for t in timings))
    return {"start_s": max(t["first_step"] for t in timings) - t0,
            "ready_s": max(t["ready"] for t in timings) - t0,
            "samples_per_s": [sum(r["samples"] for r in epoch) / max(r["seconds"] for r in epoch)
                              for epoch in epochs],
            "threads": env["OMP_NUM_THREADS"]}


def _spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args, log=print):
    """Every run ``repeats`` times, taking turns; one row per run (a list of dicts)."""
    launches = {name: [] for name in args.runs}
    for r in range(args.repeats):
        shift = r % len(args.runs)
        for name in args.runs[shift:] + args.runs[:shift]:
            result = launch_run(RUNS[name][1], args)
            launches[name].append(result)
            log(f"  repeat {r + 1}/{args.repeats} {name}: first step after {result['start_s']:.1f} s, "
                f"{statistics.median(result['samples_per_s']):.1f} samples/s")
    rows = []
    for name, results in launches.items():
        label, workers = RUNS[name]
        speeds = [s for result in results for s in result["samples_per_s"]]
        row = {"name": name, "label": label, "workers": workers, "kvstore": "dist_sync" if workers else None,
               "batch_per_worker": args.batch_size, "omp_num_threads": results[0]["threads"],
               "runs": speeds, "start": _spread([x["start_s"] for x in results]),
               "ready": _spread([x["ready_s"] for x in results]),
               "per_launch": [statistics.median(x["samples_per_s"]) for x in results]}
        row.update(samples_per_s=statistics.median(speeds), min=min(speeds), max=max(speeds))
        rows.append(row)
    reference = next(r for r in rows if r["name"] == REFERENCE)
    for row in rows:   # per repeat: each launch's median over the reference's in the same repeat
        ratios = [a / b for a, b in zip(row["per_launch"], reference["per_launch"])]
        row.update(ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
    return rows


def _fmt(value, digits=1):
    return f"{value:.{digits}f}"


COLUMNS = [
    ("run", "label"),
    ("OMP threads per process", "omp_num_threads"),
    ("samples/s, all workers (median)", lambda r: _fmt(r["samples_per_s"])),
    ("min - max", lambda r: f"{_fmt(r['min'])} - {_fmt(r['max'])}"),
    ("ratio to 1 process (min - max)",
     lambda r: f"{r['ratio']:.2f} ({r['ratio_min']:.2f} - {r['ratio_max']:.2f})"),
    ("launch to first step, s (min - max)",
     lambda r: f"{_fmt(r['start']['median'])} ({_fmt(r['start']['min'])} - {_fmt(r['start']['max'])})"),
    ("launch to kvstore ready, s", lambda r: _fmt(r["ready"]["median"]) if r["workers"] else ""),
]


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    run = parser.add_argument_group("run")
    run.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, among {', '.join(RUNS)}")
    run.add_argument("--repeats", type=int, help="launches of each run (default 3; 1 with --quick)")
    run.add_argument("--batch-size", type=int, help="samples per step and worker (default 64)")
    run.add_argument("--steps", type=int, help="steps per epoch (default 100)")
    run.add_argument("--epochs", type=int, help="timed epochs per launch, after one warm-up (default 3)")
    run.add_argument("--worker-threads", type=int,
                     help="OMP_NUM_THREADS of each process of a job (default: cores / workers)")
    run.add_argument("--timeout", type=float, help="seconds before a launch is ended (default 300)")
    run.add_argument("--seed", type=int, default=0)
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, sys.argv[1:] if argv is None else argv)
    apply_defaults(args, QUICK if args.quick else FULL, "dist")
    args.runs = args.runs.split(",")
    bad = [name for name in args.runs if name not in RUNS]
    if bad or REFERENCE not in args.runs:
        parser.error(f"--runs must name runs among {', '.join(RUNS)} and include {REFERENCE!r}; "
                     f"got {', '.join(args.runs)}.")
    for key in ("repeats", "batch_size", "steps", "epochs", "worker_threads", "timeout"):
        value = getattr(args, key)
        if value is not None and value <= 0:
            parser.error(f"--{key.replace('_', '-')} must be positive, got {value}.")
    return args


def main(args):
    """Measure, then write the JSON and the README section; return the results."""
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    print(f"{NET}: batch {args.batch_size} per worker, {args.steps} steps per epoch, "
          f"1 + {args.epochs} epochs per launch, {args.repeats} launches of each run")
    rows = measure(args)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "readme", "config")}
    results = {"machine": info, "args": settings, "rows": rows}
    table = markdown_table(rows, COLUMNS)
    print(table)
    write_outputs(args, SECTION, results, readme_section(results, table))
    return results


def readme_section(results, table):
    """The README section: how to reproduce, what the figures mean, the conditions, the table."""
    info, a = results["machine"], results["args"]
    return "\n\n".join([
        README_TEXT.format(batch=a["batch_size"], steps=a["steps"], epochs=a["epochs"],
                           repeats=a["repeats"], cores=info["cores"]),
        measured_on(info, ", ".join(f"{k}={v}" for k, v in info["threads"].items())
                    + " in the single process"),
        table])


README_TEXT = """\
## Distributed (`dist.py`)

```bash
python -m benchmarks.dist            # the table below (about 2 minutes)
python -m benchmarks.dist --quick    # seconds, for the test suite
```

The recipes' small CNN (`gluonkit.recipes.models.small_cnn`) on synthetic digit-sized images (1x8x8, random
labels), `gluonkit.Trainer` with SGD, batch {batch} per worker, {steps} steps per epoch:
one warm-up epoch, then {epochs} timed epochs per launch; each run launched {repeats} times,
the runs taking turns. The jobs run under
`python -m gluonkit.launch -n N -s 1 --timeout ... -- python -m benchmarks.dist job SPEC`:
a scheduler, one server and N workers on 127.0.0.1 with kvstore `dist_sync`, every worker
training its own shard. The {cores} cores are shared out: each process of a job gets
`OMP_NUM_THREADS` = cores / workers (`--worker-threads` changes it), the single process all of them.

- samples/s counts the samples of all workers over the slowest worker's time, per timed
  epoch (median and min - max over every timed epoch of every launch); the ratio is a
  launch's median over the single process's in the same repeat.
- launch to first step: from starting the launcher (or the single process) until every
  worker has finished its first step (Python and MXNet imports, the scheduler and server
  connecting, the kvstore created, the initial weights broadcast, one forward, backward and
  gradient exchange); launch to kvstore ready: until `mx.kv.create('dist_sync')` returned
  on every worker.

On one machine the workers share its cores and talk over loopback: the figures show what
the parameter server costs, not the speed-up of real machines."""


if __name__ == "__main__":
    if sys.argv[1:2] == [JOB]:
        with open(sys.argv[2]) as f:
            run_job(**json.load(f))
    else:
        set_env("benchmarks.dist")
        main(parse_args())
