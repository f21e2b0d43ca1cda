"""Distributed training over loopback: one process against 2 workers of a dist_sync job and 2 Horovod ranks.

    python -m benchmarks.dist            # full run (about 6 minutes on 2 cores)
    python -m benchmarks.dist --quick    # seconds, for the test suite; figures not meaningful

Trains the recipes' small CNN (gluonkit.recipes.models) and GluonCV's cifar_resnet20_v1 on
synthetic images with ``gluonkit.Trainer`` and the same global batch: as one process without
a kvstore, under ``python -m gluonkit.launch -n 2 -s 1`` (kvstore 'dist_sync', 127.0.0.1)
and under ``horovodrun --gloo -np 2`` (kvstore 'horovod', loopback), each worker on its own
shard with half the batch. Reports samples/s over all workers, the ratio to the single
process on the same cores, the time per update spent communicating, and the time from the
launch until the first step is done. The runs take turns, repeated; every process has a
timeout. Results go to a JSON file and to the "dist" section of a Markdown file: by default
benchmarks/results/dist.json and benchmarks/README.md of this clone, which a full run rewrites
(``--out FILE --readme FILE`` to write elsewhere). Every process of a job runs this file as ``dist.py job SPEC``: in the servers and the scheduler,
importing MXNet serves the job and exits.
"""
import os
import sys


import json
import shutil
import statistics
import tempfile
import time

import mxnet as mx  # (in a server or the scheduler of a job, this serves and exits)
from mxnet import gluon

import gluonkit
from ._common import (ROOT, add_output_options, apply_defaults, benchmark_parser, parse_with_config,
                      set_env, thread_settings, write_outputs)
from ._contestants import NETWORKS, OPTIMIZER, forward_backward, initialized_net, make_data, make_loader
from gluonkit.bench.harness import machine, markdown_table, measured_on
from gluonkit.bench.workers import horovod_available, launcher_command, run_launched

SECTION = "dist"
NETS = ("cnn", "cifar_resnet20_v1")
# name: (table label, workers (0: one process without a kvstore), kvstore)
RUNS = {
    "single": ("1 process, no kvstore", 0, "device"),
    "dist2": ("2 workers + 1 server, dist_sync", 2, "dist_sync"),
    "horovod2": ("2 Horovod ranks (Gloo)", 2, "horovod"),
}
REFERENCE = "single"
JOB = "job"   # first argument of the processes of a run
# per network: global batch (split over the workers), steps per epoch
FULL = {"repeats": 3, "epochs": 3, "timeout": 300.0, "sizes": {"cnn": (128, 60), "cifar_resnet20_v1": (64, 8)}}
QUICK = {"repeats": 1, "epochs": 1, "timeout": 120.0, "sizes": {"cnn": (8, 3), "cifar_resnet20_v1": (4, 2)}}
_GRACE_SECONDS = 30.0   # beyond the launcher's own timeout, for it to end its processes


def run_job(out_dir, net, kvstore, batch_size, steps, epochs, seed, t0):
    """One process of a run: a warm-up epoch, ``epochs`` timed ones, then one epoch that
    waits for the devices around every ``trainer.step`` (its median is the update's time:
    the gradients' exchange and the optimizer); timings to JSON."""
    started = time.time()
    kv = mx.kv.create(kvstore) if kvstore.startswith("dist") else kvstore
    ready = time.time()
    ctx = [mx.cpu()]
    model = initialized_net({"net": net, "seed": seed}, ctx)
    trainer = gluonkit.Trainer(model.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), kvstore=kv)
    rank, workers = trainer.rank, trainer.num_workers
    batch = batch_size // workers
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images, labels = make_data(net, steps * batch, seed + 1 + rank)   # this worker's shard
    loader = make_loader([images, labels], batch, len(images))
    first_step, runs, updates = None, [], []
    for epoch in range(epochs + 2):
        mx.nd.waitall()
        tic = time.perf_counter()
        for x, y in loader:
            forward_backward(model, loss_fn, [[x]], [y])
            if epoch == epochs + 1:   # the instrumented epoch
                mx.nd.waitall()
                update = time.perf_counter()
            trainer.step(x.shape[0])
            if epoch == epochs + 1:
                mx.nd.waitall()
                updates.append(time.perf_counter() - update)
            if first_step is None:
                mx.nd.waitall()
                first_step = time.time()
        mx.nd.waitall()
        if 0 < epoch <= epochs:   # epoch 0 is the warm-up
            runs.append({"samples": steps * batch, "seconds": time.perf_counter() - tic})
    timings = {"rank": rank, "t0": t0, "started": started, "ready": ready, "first_step": first_step,
               "runs": runs, "update_s": statistics.median(updates), "threads": thread_settings()}
    with open(os.path.join(out_dir, f"worker{rank}.json"), "w") as f:
        json.dump(timings, f)


def _job_command(out_dir, spec):
    """The command of every process of a run. Its settings go in a file, not in options:
    the dmlc tracker and horovodrun take options that look like their own (even abbreviated)."""
    path = os.path.join(out_dir, "job.json")
    with open(path, "w") as f:
        json.dump(dict(spec, out_dir=out_dir), f)
    return [sys.executable, "-m", "benchmarks.dist", JOB, path]


def _threads(workers, worker_threads):
    """OMP_NUM_THREADS of every process of a run: the cores shared out among the workers."""
    if workers == 0:
        return os.environ["OMP_NUM_THREADS"]
    return str(worker_threads or max(1, (os.cpu_count() or 1) // workers))


def launch_run(name, net, args):
    """Run one process, or a job of 2 workers; return its timings.

    Returns a dict: 'start_s' (launch until every worker finished its first step),
    'samples_per_s' (one per timed epoch: samples of all workers over the slowest worker's
    time) and 'update_s' (the slowest worker's median update time, devices waited for).
    """
    _, workers, kvstore = RUNS[name]
    batch, steps = args.sizes[net]
    out_dir = tempfile.mkdtemp(prefix="gluonkit-dist-")
    env = dict(os.environ, OMP_NUM_THREADS=_threads(workers, args.worker_threads))
    try:
        t0 = time.time()
        command = launcher_command(kvstore, workers, args.timeout) + _job_command(out_dir, {
            "net": net, "kvstore": kvstore, "batch_size": batch, "steps": steps, "epochs": args.epochs,
            "seed": args.seed, "t0": t0})
        run_launched(command, env, args.timeout + _GRACE_SECONDS, cwd=ROOT)
        timings = []
        for rank in range(max(workers, 1)):
            with open(os.path.join(out_dir, f"worker{rank}.json")) as f:
                timings.append(json.load(f))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    epochs = zip(*(t["runs"] for t in timings))
    return {"start_s": max(t["first_step"] for t in timings) - t0,
            "samples_per_s": [sum(r["samples"] for r in epoch) / max(r["seconds"] for r in epoch)
                              for epoch in epochs],
            "update_s": max(t["update_s"] for t in timings), "threads": env["OMP_NUM_THREADS"]}


def _spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args, log=print):
    """Every run ``repeats`` times per network, taking turns; one row per network and run."""
    rows = []
    for net in args.nets:
        launches = {name: [] for name in args.runs}
        for r in range(args.repeats):
            shift = r % len(args.runs)
            for name in args.runs[shift:] + args.runs[:shift]:
                result = launch_run(name, net, args)
                launches[name].append(result)
                log(f"  {net} repeat {r + 1}/{args.repeats} {name}: first step after {result['start_s']:.1f} s, "
                    f"{statistics.median(result['samples_per_s']):.1f} samples/s, "
                    f"update {1000 * result['update_s']:.2f} ms")
        rows += _rows(net, launches, args)
    return rows


def _rows(net, launches, args):
    """The rows of one network; ratios and communication against the single process of the same repeat."""
    batch = args.sizes[net][0]
    single = launches[REFERENCE]
    rows = []
    for name, results in launches.items():
        label, workers, kvstore = RUNS[name]
        speeds = [s for result in results for s in result["samples_per_s"]]
        per_launch = [statistics.median(x["samples_per_s"]) for x in results]
        ratios = [a / statistics.median(b["samples_per_s"]) for a, b in zip(per_launch, single)]
        communication = [x["update_s"] - s["update_s"] for x, s in zip(results, single)]
        update_time = [batch / speed for speed in per_launch]   # seconds per update, everything included
        rows.append({
            "name": name, "net": net, "label": label, "workers": workers, "kvstore": kvstore if workers else None,
            "global_batch": batch, "batch_per_worker": batch // max(workers, 1),
            "omp_num_threads": results[0]["threads"], "runs": speeds, "per_launch": per_launch,
            "samples_per_s": statistics.median(speeds), "min": min(speeds), "max": max(speeds),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "update_ms": 1000 * statistics.median(x["update_s"] for x in results),
            "communication_ms": 1000 * statistics.median(communication),
            "communication_share": statistics.median(c / t for c, t in zip(communication, update_time)),
            "start": _spread([x["start_s"] for x in results])})
    return rows


def _fmt(value, digits=1):
    return f"{value:.{digits}f}"


COLUMNS = [
    ("network", "net"),
    ("run", "label"),
    ("OMP threads per process", "omp_num_threads"),
    ("samples/s, all workers (median)", lambda r: _fmt(r["samples_per_s"])),
    ("min - max", lambda r: f"{_fmt(r['min'])} - {_fmt(r['max'])}"),
    ("scaling efficiency: samples/s over 1 process's (min - max)",
     lambda r: f"{r['ratio']:.2f} ({r['ratio_min']:.2f} - {r['ratio_max']:.2f})"),
    ("update, ms (devices waited for)", lambda r: _fmt(r["update_ms"], 2)),
    ("communicating per update, ms (share of the update's time)",
     lambda r: f"{_fmt(r['communication_ms'], 2)} ({100 * r['communication_share']:.0f}%)" if r["workers"] else ""),
    ("launch to first step, s (min - max)",
     lambda r: f"{_fmt(r['start']['median'])} ({_fmt(r['start']['min'])} - {_fmt(r['start']['max'])})"),
]


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    run = parser.add_argument_group("run")
    default_runs = [name for name in RUNS if RUNS[name][2] != "horovod" or horovod_available()]
    run.add_argument("--runs", default=",".join(default_runs),
                     help=f"comma-separated, among {', '.join(RUNS)} (horovod2 by default where Horovod is "
                          "installed: make horovod)")
    run.add_argument("--nets", default=",".join(NETS), help=f"comma-separated, among {', '.join(NETWORKS)}")
    run.add_argument("--repeats", type=int, help="launches of each run (default 3; 1 with --quick)")
    run.add_argument("--epochs", type=int, help="timed epochs per launch, after one warm-up (default 3)")
    run.add_argument("--worker-threads", type=int,
                     help="OMP_NUM_THREADS of each process of a job (default: cores / workers)")
    run.add_argument("--timeout", type=float, help="seconds before a launch is ended (default 300)")
    run.add_argument("--seed", type=int, default=0)
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, sys.argv[1:] if argv is None else argv)
    args.sizes = None
    apply_defaults(args, QUICK if args.quick else FULL, "dist")
    args.runs, args.nets = args.runs.split(","), args.nets.split(",")
    bad = [name for name in args.runs if name not in RUNS]
    if bad or REFERENCE not in args.runs:
        parser.error(f"--runs must name runs among {', '.join(RUNS)} and include {REFERENCE!r}; "
                     f"got {', '.join(args.runs)}.")
    if "horovod2" in args.runs and not horovod_available():
        parser.error("--runs horovod2 needs Horovod for MXNet and horovodrun beside this Python; build it "
                     "with `make horovod`.")
    if not args.nets or any(net not in NETWORKS for net in args.nets):
        parser.error(f"--nets must name networks among {', '.join(NETWORKS)}; got {', '.join(args.nets)}.")
    for key in ("repeats", "epochs", "worker_threads", "timeout"):
        value = getattr(args, key)
        if value is not None and value <= 0:
            parser.error(f"--{key.replace('_', '-')} must be positive, got {value}.")
    return args


def main(args):
    """Measure, then write the JSON and the README section; return the results."""
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    for net in args.nets:
        batch, steps = args.sizes[net]
        print(f"{net}: global batch {batch} (half per worker of a job), {steps} steps per epoch, "
              f"1 + {args.epochs} + 1 epochs per launch, {args.repeats} launches of each run")
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
    sizes = "; ".join(f"{net}: global batch {batch}, {steps} steps per epoch"
                      for net, (batch, steps) in a["sizes"].items() if net in a["nets"])
    return "\n\n".join([
        README_TEXT.format(sizes=sizes, epochs=a["epochs"], repeats=a["repeats"], cores=info["cores"]),
        measured_on(info, ", ".join(f"{k}={v}" for k, v in info["threads"].items())
                    + " in the single process"),
        table])


README_TEXT = """\
## Distributed (`dist.py`)

```bash
python -m benchmarks.dist            # the table below (about 6 minutes; Horovod from make horovod)
python -m benchmarks.dist --quick    # seconds, for the test suite
```

The recipes' small CNN (`gluonkit.recipes.models.small_cnn`, 1x8x8 images) and GluonCV's
`cifar_resnet20_v1` (3x32x32) on synthetic images with random labels, `gluonkit.Trainer` with
SGD and the same global batch in every run ({sizes}): one warm-up epoch, {epochs} timed
epochs, then one epoch that waits for the devices around every `trainer.step`; each run
launched {repeats} times, the runs taking turns. The jobs are 2 workers, each training its
own shard with half the batch: under
`python -m gluonkit.launch -n 2 -s 1 -- python -m benchmarks.dist job SPEC` (a scheduler,
one server and 2 workers on 127.0.0.1, kvstore `dist_sync`) and under
`horovodrun --gloo -np 2 -H localhost:2 --network-interface lo ...` (kvstore `horovod`). The
{cores} cores are shared out: each process of a job gets `OMP_NUM_THREADS` = cores / workers
(`--worker-threads` changes it), the single process all of them.

- samples/s counts the samples of all workers over the slowest worker's time, per timed
  epoch (median and min - max over every timed epoch of every launch). Scaling efficiency
  is a launch's median over the single process's in the same repeat: the same work on the
  same cores, so 1.0 means that spreading it over processes cost nothing.
- update: the median time of `trainer.step` with the devices waited for before and after
  (the gradients' exchange, the count's, the optimizer); communicating per update is that
  time minus the single process's (which only runs the optimizer), and its share of the
  whole update (global batch over samples/s). It includes the wait for the slower worker.
- launch to first step: from starting the launcher (or the single process) until every
  worker has finished its first step (imports, connections, the initial weights broadcast,
  one forward, backward and gradient exchange).

On one machine the workers share its cores and talk over loopback: the figures show what
each transport costs, not the speed-up of real machines."""


if __name__ == "__main__":
    if sys.argv[1:2] == [JOB]:
        with open(sys.argv[2]) as f:
            run_job(**json.load(f))
    else:
        set_env("benchmarks.dist")
        main(parse_args())
