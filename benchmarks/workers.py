"""The same command on 1, 2 and 3 workers: does it train the same model?

    python -m benchmarks.workers            # 1 process, 2 and 3 dist_sync workers, 2 and 3 Horovod ranks
    python -m benchmarks.workers --quick    # seconds, for the test suite; figures not meaningful

Runs ``gluonkit-classify`` (digits, the built-in CNN with BatchNorm, shuffled) with one command
line on global batches (``--batch-size 64 --micro-batch 16``): in one process, under
``gluonkit-launch -n N -s 1`` (kvstore 'dist_sync', 127.0.0.1) and, where Horovod is installed,
under ``horovodrun --gloo -np N`` (kvstore 'horovod', loopback). For each run: the exported
model's test accuracy, the largest difference of its exported arrays (weights and BatchNorm's
running statistics) from the single process's, and the wall time from launch to exit (a
shared machine: not a speed figure). Results go to a JSON file and to the "workers" section of
a Markdown file: by default benchmarks/results/workers.json and docs/distributed.md of this
clone (``--out FILE --readme FILE`` to write elsewhere).
"""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import _common
from gluonkit.bench.harness import machine, markdown_table

__all__ = ["RUNS", "run", "snippet", "parse_args", "main"]

#: name -> (engine, workers)
RUNS = {"one": ("process", 1), "dist2": ("dist_sync", 2), "dist3": ("dist_sync", 3),
        "horovod2": ("horovod", 2), "horovod3": ("horovod", 3)}
_OPTIONS = ["--batch-size", "64", "--micro-batch", "16", "--no-progress"]
_BIN = os.path.dirname(sys.executable)


def _command(engine, workers, options, out):
    classify = [os.path.join(_BIN, "gluonkit-classify"), *options, "--out", out]
    if engine == "process":
        return classify
    if engine == "dist_sync":
        return [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1", "--timeout", "1800", "--",
                *classify, "--kvstore", "dist_sync"]
    # through sh -c 'exec ...': horovodrun would read the command's options as its own
    return [os.path.join(_BIN, "horovodrun"), "--gloo", "-np", str(workers), "-H", f"localhost:{workers}",
            "--network-interface", "lo", "sh", "-c", "exec " + shlex.join([*classify, "--kvstore", "horovod"])]


def _exported(out):
    import mxnet as mx   # here: MXNet loads after the thread settings
    return {name: array.asnumpy() for name, array in mx.nd.load(os.path.join(out, "model-0000.params")).items()}


def run(name, options, work):
    """Run ``name`` of :data:`RUNS` with the recipe's ``options``; its results and exported arrays."""
    engine, workers = RUNS[name]
    out = os.path.join(work, name)
    command = _command(engine, workers, options, out)
    tic = time.perf_counter()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - tic
    found = re.search(r"test accuracy: ([0-9.]+) on \d+ images of the test split, by the model exported from "
                      r"epoch (\d+)", done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{name} exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return ({"engine": engine, "workers": workers, "test_accuracy": float(found.group(1)),
             "exported_epoch": int(found.group(2)), "wall_seconds": round(wall, 1)}, _exported(out))


def snippet(results):
    """The Markdown table of the runs, then how and where they were measured."""
    rows = [{"engine": row["engine"], "workers": row["workers"], "test accuracy": f"{row['test_accuracy']:.4f}",
             "exported epoch": row["exported_epoch"],
             "largest difference from 1 process": f"{row['largest_difference']:.1e}",
             "wall time (s)": row["wall_seconds"]} for row in results["runs"].values()]
    info = results["machine"]
    table = markdown_table(rows, [(header, header) for header in rows[0]])
    return (f"{table}\n\n`gluonkit-classify {' '.join(results['options'])}`; the difference is the largest over "
            f"every exported array (weights and BatchNorm's running statistics). Measured {info['date']} on "
            f"{info['cpu']} ({info['cores']} cores, load average {info['load_average'][0]}), MXNet {info['mxnet']}, "
            f"by `{results['command']}`" + (" (tiny budgets: these figures mean nothing)." if results["quick"] else "."))


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
