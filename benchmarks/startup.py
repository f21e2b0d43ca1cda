"""Launch to first log line: how long a gluonkit command takes to start, against one ``import
mxnet`` measured in the same run.

    python -m benchmarks.startup                 # 5 rounds (about a minute on 2 cores)
    python -m benchmarks.startup --quick         # 1 round, written nowhere

Each round starts, in a rotated order and with ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` unset
(as a user's shell leaves them):

- ``command``: ``gluonkit-classify`` as installed, timed from ``Popen`` to its first log line,
  then stopped;
- ``restart``: the start-up commands had before they set MXNet's threads before it loads: the
  program imports MXNet, finds the settings unset and restarts as ``python -m
  gluonkit.recipes.classify`` (:func:`gluonkit.recipes.common.apply_threads`, what the
  benchmarks still do), timed the same way;
- ``import mxnet``: ``python -c "import mxnet"`` to its exit, the floor.

It prints the medians, their ranges and the ratios to ``import mxnet``, and writes them to
``--out`` (default ``benchmarks/results/startup.json``; ``--quick`` writes nothing unless
given ``--out``). Absolute times on a shared machine are noise; compare the ratios.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ._harness import machine, markdown_table, write_json

__all__ = ["CONTESTANTS", "first_log_line", "measure", "main"]

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
_ARGS = ["--epochs", "1", "--limit", "40", "--no-progress"]
_RESTART = ("import sys, mxnet\nfrom gluonkit.recipes import common\n"
            "common.apply_threads('gluonkit.recipes.classify', sys.argv[1:])\n")
#: name -> (argv without the run folder, whether it is timed to its first log line)
CONTESTANTS = {
    "command": ([os.path.join(BIN, "gluonkit-classify"), *_ARGS], True),
    "restart": ([sys.executable, "-c", _RESTART, *_ARGS], True),
    "import mxnet": ([sys.executable, "-c", "import mxnet"], False),
}


def _environment():
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}


def first_log_line(argv, cwd, timeout=300):
    """Seconds from starting ``argv`` (in ``cwd``) to the first line it writes to stderr, where
    the recipes log; the process is then stopped. A process that exits first is an error."""
    tic = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=_environment(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        seconds = time.perf_counter() - tic
        if not line:
            raise RuntimeError(f"{argv[0]} exited ({proc.wait(timeout)}) before logging a line")
        return seconds
    finally:
        proc.kill()
        proc.wait(timeout)


def _to_exit(argv, cwd, timeout=300):
    tic = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=_environment(), check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - tic


def measure(rounds):
    """{contestant: [seconds per round]} over ``rounds`` rounds, in an order rotated by round."""
    names = list(CONTESTANTS)
    times = {name: [] for name in names}
    root = tempfile.mkdtemp(prefix="gluonkit-startup-")
    try:
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                argv, to_log = CONTESTANTS[name]
                cwd = tempfile.mkdtemp(dir=root)
                argv = argv + ["--out", os.path.join(cwd, "run")] if to_log else argv
                times[name].append((first_log_line if to_log else _to_exit)(argv, cwd))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 round, written nowhere")
    parser.add_argument("--out", help="JSON results (default benchmarks/results/startup.json)")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    if rounds < 1:
        parser.error(f"--rounds must be at least 1, got {rounds}")
    info = machine()
    times = measure(rounds)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    floor = statistics.median(times["import mxnet"])
    rows = [{"start": name, "median s": round(statistics.median(seconds), 2),
             "range s": f"{min(seconds):.2f}-{max(seconds):.2f}",
             "x import mxnet": round(statistics.median(seconds) / floor, 2)}
            for name, seconds in times.items()]
    print(markdown_table(rows, [(key, key) for key in rows[0]]))
    out = args.out or (None if args.quick else os.path.join(HERE, "results", "startup.json"))
    if out:
        write_json(out, {"machine": info, "rounds": rounds, "seconds": times, "rows": rows})
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
