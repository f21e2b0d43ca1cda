"""The same command on 1, 2 and 3 workers: does it train the same model, how fast, and what does losing a worker cost?

    python -m benchmarks.workers            # 1 process, 2 and 3 dist_sync workers, 2 and 3 Horovod ranks, a lost worker
    python -m benchmarks.workers --quick    # seconds, for the test suite; figures not meaningful

Runs ``gluonkit-classify`` (digits, the built-in CNN with BatchNorm, shuffled) with one command
line on global batches (``--batch-size 64 --micro-batch 16``): in one process, under
``gluonkit-launch -n N -s 1`` (kvstore 'dist_sync', 127.0.0.1) and, where Horovod is installed,
under ``horovodrun --gloo -np N`` (kvstore 'horovod', loopback). Every job is started by
setsid, as the launchers start their roles, so the kernel's autogroup scheduler treats all
alike, with ``OMP_NUM_THREADS=1`` in every process. For each
run: the exported model's test accuracy, the largest difference of its exported arrays
(weights and BatchNorm's running statistics) from the single process's, the training
samples/s (the median over the epochs of ``history.csv``, every worker's samples) and the wall
time from launch to exit: the time to that accuracy.

The run ``lost3`` is ``dist3`` under ``--max-restarts 1 --min-workers 2`` with worker 2
SIGKILLed halfway through epoch 2: it says the seconds from the kill to the launcher's notice
(detection), from there to the workers' resume line (ending every role, starting them again,
reading the checkpoint: restart), and the training since the last checkpoint that was done
again (redone). Results go to a JSON file and to the "workers" section of a Markdown file: by
default benchmarks/results/workers.json and docs/distributed.md of this clone (``--out FILE
--readme FILE`` to write elsewhere).
"""
import csv
import importlib.util
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from . import _common
from gluonkit.bench.harness import machine, markdown_table

__all__ = ["RUNS", "run", "snippet", "parse_args", "main"]

#: name -> (engine, workers)
RUNS = {"one": ("process", 1), "dist2": ("dist_sync", 2), "dist3": ("dist_sync", 3),
        "horovod2": ("horovod", 2), "horovod3": ("horovod", 3), "lost3": ("dist_sync", 3)}
_LOST = ["--max-restarts", "1", "--min-workers", "2"]   # the launcher's options of the run that loses a worker
_OPTIONS = ["--batch-size", "64", "--micro-batch", "16", "--no-progress"]
_BIN = os.path.dirname(sys.executable)


def _command(engine, workers, options, out, launcher=()):
    classify = [os.path.join(_BIN, "gluonkit-classify"), *options, "--out", out]
    if engine == "process":
        return classify
    if engine == "dist_sync":
        return [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1", "--timeout", "1800",
                *launcher, "--", *classify, "--kvstore", "dist_sync"]
    # through sh -c 'exec ...': horovodrun would read the command's options as its own
    return [os.path.join(_BIN, "horovodrun"), "--gloo", "-np", str(workers), "-H", f"localhost:{workers}",
            "--network-interface", "lo", "sh", "-c", "exec " + shlex.join([*classify, "--kvstore", "horovod"])]


def _exported(out):
    import mxnet as mx   # here: MXNet loads after the thread settings
    return {name: array.asnumpy() for name, array in mx.nd.load(os.path.join(out, "model-0000.params")).items()}


def _samples_per_second(out):
    """The median over the epochs of ``history.csv``'s samples/s (every worker's samples)."""
    with open(os.path.join(out, "history.csv"), newline="") as f:
        return round(float(np.median([float(row["samples_per_sec"]) for row in csv.DictReader(f)])), 1)


class _Lines:
    """A command's merged output, line by line with the time each arrived."""

    def __init__(self, command, cwd):
        self.process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                        start_new_session=True)
        self._queue, self.text = queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self._queue.put((time.perf_counter(), line))
        self._queue.put((time.perf_counter(), None))

    def next(self, until=None):
        """``(time, line)``, None at the end; ``(None, None)`` once ``until`` (perf_counter) passed."""
        try:
            arrived, line = self._queue.get(timeout=None if until is None else max(0.0, until - time.perf_counter()))
        except queue.Empty:
            return None, None
        if line is not None:
            self.text.append(line)
        return arrived, line


def _lose_a_worker(command, work):
    """Run ``command`` (3 workers under ``_LOST``), SIGKILL worker 2 halfway through epoch 2;
    the output and the times (perf_counter) of what happened."""
    job, marks, pid, kill_at = _Lines(command, work), {}, None, None
    patterns = {"began": r"Batches: global batch", "epoch1": r"epoch 1/", "noticed": r"was killed by SIGKILL",
                "resumed": r"It was saved by 3 worker\(s\); this job's 2 worker\(s\) continue"}
    while True:
        arrived, line = job.next(kill_at)
        if arrived is None and line is None and kill_at is not None:
            os.kill(pid, signal.SIGKILL)
            marks["killed"], kill_at = time.perf_counter(), None
            continue
        if line is None:
            break
        found = re.search(r"worker 2 started \(pid (\d+)\)", line)
        if found and pid is None:
            pid = int(found.group(1))
        for mark, pattern in patterns.items():
            if mark not in marks and re.search(pattern, line):
                marks[mark] = arrived
        if "epoch1" in marks and "killed" not in marks and kill_at is None:
            kill_at = marks["epoch1"] + (marks["epoch1"] - marks["began"]) / 2
    job.process.wait()
    return job.process.returncode, "".join(job.text), marks


def run(name, options, work):
    """Run ``name`` of :data:`RUNS` with the recipe's ``options``; its results and exported arrays."""
    engine, workers = RUNS[name]
    out = os.path.join(work, name)
    command = _command(engine, workers, options, out, _LOST if name == "lost3" else ())
    tic = time.perf_counter()
    if name == "lost3":
        code, output, marks = _lose_a_worker(command, work)
    else:
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=3600,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
        code, output, marks = done.returncode, done.stdout + done.stderr, {}
    wall = time.perf_counter() - tic
    found = re.search(r"test accuracy: ([0-9.]+) on \d+ images of the test split, by the model exported from "
                      r"epoch (\d+)", output)
    if code != 0 or found is None:
        raise RuntimeError(f"{name} exited with {code}:\n{output[-3000:]}")
    row = {"engine": engine, "workers": workers, "test_accuracy": float(found.group(1)),
           "exported_epoch": int(found.group(2)), "wall_seconds": round(wall, 1)}
    if name == "lost3":
        missing = [m for m in ("killed", "noticed", "resumed") if m not in marks]
        if missing:
            raise RuntimeError(f"lost3: no {', '.join(missing)} in its output:\n{output[-3000:]}")
        row.update(detection_seconds=round(marks["noticed"] - marks["killed"], 2),
                   restart_seconds=round(marks["resumed"] - marks["noticed"], 2),
                   redone_seconds=round(marks["killed"] - marks["epoch1"], 2))
    else:
        row["samples_per_s"] = _samples_per_second(out)
    return row, _exported(out)


def snippet(results):
    """The Markdown table of the runs, then how and where they were measured."""
    rows = [{"run": name, "engine": row["engine"], "workers": row["workers"],
             "test accuracy": f"{row['test_accuracy']:.4f}", "exported epoch": row["exported_epoch"],
             "largest difference from 1 process": f"{row['largest_difference']:.1e}",
             "training samples/s": row.get("samples_per_s", ""),
             "launch to exit, s": row["wall_seconds"]} for name, row in results["runs"].items()]
    info = results["machine"]
    table = markdown_table(rows, [(header, header) for header in rows[0]])
    lost = results["runs"].get("lost3")
    lost_text = "" if lost is None else (
        f" `lost3`: `dist3` under `gluonkit-launch {' '.join(_LOST)}`, worker 2 SIGKILLed halfway through epoch 2; "
        f"the launcher noticed {lost['detection_seconds']:.2f} s after the kill, the 2 remaining workers resumed "
        f"{lost['restart_seconds']:.1f} s later (every role ended and started again, the checkpoint read), and "
        f"the {lost['redone_seconds']:.1f} s of training since epoch 1's checkpoint were done again.")
    return (f"{table}\n\n`gluonkit-classify {' '.join(results['options'])}`, every job started by setsid "
            f"with `OMP_NUM_THREADS=1` in every process; the difference is the largest over every exported array "
            f"(weights and BatchNorm's running statistics); samples/s is the median over the epochs of "
            f"`history.csv` (every worker's samples).{lost_text} Measured {info['date']} on {info['cpu']} "
            f"({info['cores']} cores, load average {info['load_average'][0]}), MXNet {info['mxnet']}, by "
            f"`{results['command']}`" + (" (tiny budgets: these figures mean nothing)." if results["quick"] else "."))


def parse_args(argv=None):
    """The command line (``argv``, default ``sys.argv[1:]``)."""
    parser = _common.benchmark_parser(__doc__)
    parser.add_argument("--runs", help=f"comma-separated, among {', '.join(RUNS)} (default: all; the Horovod "
                                       "ones only where Horovod is installed)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs of each run (default 4)")
    _common.add_output_options(parser, "workers")
    args = _common.parse_with_config(parser, argv)
    horovod = importlib.util.find_spec("horovod") is not None and os.path.exists(os.path.join(_BIN, "horovodrun"))
    default = [n for n in RUNS if horovod or not n.startswith("horovod")]
    args.runs = [r for r in args.runs.split(",") if r] if args.runs else (["one", "dist2"] if args.quick else default)
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown or args.runs[:1] != ["one"]:
        parser.error(f"--runs {','.join(args.runs)}: runs among {', '.join(RUNS)}, starting with 'one' (the "
                     "reference the others are compared with).")
    args.epochs = args.epochs or (1 if args.quick else 4)
    if not args.quick:
        args.out = args.out or os.path.join(_common.HERE, "results", "workers.json")
        args.readme = args.readme or os.path.join(_common.ROOT, "docs", "distributed.md")
    return args


def main(args):
    """Run ``args.runs``, compare every export with the first's, write the results."""
    options = ["--epochs", str(args.epochs), *_OPTIONS] + (["--limit", "96"] if args.quick else [])
    command = "python -m benchmarks.workers" + (f" --runs {','.join(args.runs)}" if args.runs else "")
    command += " --quick" if args.quick else ""
    results = {"quick": args.quick, "command": command, "options": options, "machine": machine(), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="workers-") as work:
        reference = None
        for name in args.runs:
            row, arrays = run(name, options, work)
            reference = reference or arrays
            row["largest_difference"] = max(float(np.abs(arrays[k] - reference[k]).max()) for k in reference)
            results["runs"][name] = row
            print(f"{name}: {row}", file=sys.stderr)
    _common.write_outputs(args, "workers", results, snippet(results))
    return results


if __name__ == "__main__":
    _common.set_env("benchmarks.workers")
    main(parse_args())
