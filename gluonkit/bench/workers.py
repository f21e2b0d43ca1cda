"""Jobs of 1, 2 or N workers on this machine: ``gluonkit-launch`` (kvstore 'dist_sync', one
server) or ``horovodrun`` (kvstore 'horovod', Gloo over loopback).

Scaling is measured as N workers against N times one worker of the same shape: every job,
the 1-worker one included, is started by the same launcher (each process in a session of its
own, as the launchers make them: with ``sched_autogroup_enabled`` each session gets its own
share of a loaded machine), each worker has the same batch and the same ``OMP_NUM_THREADS``,
and the jobs take turns, repeat by repeat. ``efficiency`` = samples/s of N workers over N x
the 1-worker job's samples/s of the same repeat: 1.0 means N workers do N times the work.
"""
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from .devices import base_config, describe, row_name

__all__ = ["HOROVODRUN", "JOB_MODULE", "horovod_available", "launcher_command", "failure_output", "run_launched",
           "job_threads", "measure"]

HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
#: the module every process of a job runs (the servers and the scheduler serve on importing MXNet)
JOB_MODULE = "gluonkit.bench.job"
_GRACE_SECONDS = 30.0   # beyond the launcher's own timeout, for it to end its processes
LAUNCH_EPOCHS = 2       # timed epochs per launch, after the warm-up; a launch's figure is their median


def horovod_available():
    """Whether Horovod and its horovodrun beside this interpreter are installed."""
    return importlib.util.find_spec("horovod") is not None and os.path.exists(HOROVODRUN)


def launcher_command(kvstore, workers, timeout):
    """The command that starts a job's processes, before the job's own command (none for a
    kvstore that is neither 'dist_sync' nor 'horovod')."""
    if kvstore.startswith("dist"):
        return [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1",
                "--timeout", f"{timeout:g}", "--"]
    if kvstore == "horovod":
        return [HOROVODRUN, "--gloo", "-np", str(workers), "-H", f"localhost:{workers}",
                "--network-interface", "lo"]
    return []


_RANK_LINE = re.compile(r"^\[(\d+)\]<std(?:out|err)>:")


def failure_output(stderr, limit=3000):
    """The end of a failed job's stderr: of each rank's own lines where horovodrun prefixed
    them with ``[RANK]<stderr>:`` (the rank that failed first is often not the one horovodrun
    names), else of the whole; at most ``limit`` characters each."""
    ranks = {}
    for line in stderr.splitlines():
        match = _RANK_LINE.match(line)
        if match:
            ranks.setdefault(int(match.group(1)), []).append(line)
    if len(ranks) < 2:
        return stderr[-limit:]
    return "\n".join("\n".join(ranks[rank])[-limit:] for rank in sorted(ranks)) + "\n" + stderr[-limit // 3:]


def run_launched(command, env, timeout, cwd=None):
    """Run ``command`` in a process group of its own; the whole group is killed after
    ``timeout`` s. RuntimeError, with the end of its stderr, if it fails or times out."""
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        raise RuntimeError(f"{' '.join(command[:8])} ... did not end within {timeout:g} s:\n"
                           + failure_output(stderr))
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:8])} ... failed (exit code {process.returncode}):\n"
                           + failure_output(stderr))


def job_threads(args):
    """OMP_NUM_THREADS of every process of every job: ``--threads``, or the cores over the
    largest worker count (the same for the 1-worker job)."""
    return args.threads or max(1, (os.cpu_count() or 1) // max(args.workers))


def _launch(config, workers, args, epochs):
    """One job: its workers' timings (a list of dicts, one per rank)."""
    out_dir = tempfile.mkdtemp(prefix="gluonkit-bench-job-")
    env = dict(os.environ, OMP_NUM_THREADS=str(job_threads(args)))
    try:
        spec = os.path.join(out_dir, "job.json")
        with open(spec, "w") as f:
            json.dump({"config": config, "epochs": epochs, "out_dir": out_dir}, f)
        # the job's settings go in a file: the dmlc tracker and horovodrun read options that
        # look like their own (even abbreviated)
        command = launcher_command(config["kvstore"], workers, args.timeout) + [sys.executable, "-m",
                                                                                 JOB_MODULE, spec]
        run_launched(command, env, args.timeout + _GRACE_SECONDS)
        timings = []
        for rank in range(workers):
            with open(os.path.join(out_dir, f"worker{rank}.json")) as f:
                timings.append(json.load(f))
        return timings
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _launch_figures(timings):
    """A job's samples/s (per timed epoch: all workers' samples over the slowest worker's
    time; their median), warm-up and work."""
    epochs = list(zip(*(t["runs"] for t in timings)))
    speeds = [sum(r["samples"] for r in epoch) / max(r["seconds"] for r in epoch) for epoch in epochs]
    work = {key: sum(t["runs"][-1][key] for t in timings) for key in ("samples", "updates")}
    return {"samples_per_s": statistics.median(speeds), "work": work, "ranks": sorted(t["rank"] for t in timings),
            "setup_s": max(t["setup_s"] for t in timings), "build_s": max(t["build_s"] for t in timings)}


def measure(args, log=print):
    """Every contestant as a job of each worker count, ``args.repeats`` launches each, taking
    turns; the rows, with ``speedup`` and ``efficiency`` paired by repeat."""
    from .harness import paired

    base = dict(base_config(args), devices=args.devices[0])
    plan = [(tool, workers) for tool in args.contestants for workers in args.workers]
    launches = {entry: [] for entry in plan}
    epochs = 1 if args.quick else LAUNCH_EPOCHS
    for r in range(args.repeats):
        shift = r % len(plan)
        for tool, workers in plan[shift:] + plan[:shift]:
            tic = time.perf_counter()
            figures = _launch_figures(_launch(dict(base, tool=tool), workers, args, epochs))
            launches[tool, workers].append(dict(figures, launch_s=time.perf_counter() - tic))
            log(f"  repeat {r + 1}/{args.repeats} {row_name(tool, base['devices'], workers)}: "
                f"{figures['samples_per_s']:.1f} samples/s")
    rows = []
    for (tool, workers), results in launches.items():
        runs = [x["samples_per_s"] for x in results]
        row = {"name": row_name(tool, base["devices"], workers), "runs": runs,
               "samples_per_s": statistics.median(runs), "min": min(runs), "max": max(runs),
               "work": results[-1]["work"], "samples_per_run": results[-1]["work"]["samples"],
               "ranks": results[-1]["ranks"], "threads_per_process": job_threads(args),
               "setup_s": statistics.median(x["setup_s"] for x in results),
               "build_s": statistics.median(x["build_s"] for x in results),
               "launch_s": statistics.median(x["launch_s"] for x in results)}
        rows.append(describe(row, dict(base, tool=tool), workers))
        one = launches[tool, 1]
        if workers > 1:
            speedup = paired(runs, [x["samples_per_s"] for x in one])
            row["speedup"], row["speedup_min"], row["speedup_max"] = speedup
            row["efficiency"] = row["speedup"] / workers
    return rows
