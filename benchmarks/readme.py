"""The figures the README quotes: the default runs, as a user starts them, timed from outside.

    python -m benchmarks.readme --update-committed    # classify + detect, rewriting the README's figures
    python -m benchmarks.readme --runs classify,multitask
    python -m benchmarks.readme --runs classify,classify2,classify3,multitask,detect   # the README's rows
    python -m benchmarks.readme --runs classify,detect,tests   # also time the test suite
    python -m benchmarks.readme --quick --out quick.json --readme quick.md

Each run is the recipe's command with its default options (``make run`` is the classify one),
started as ``python -m gluonkit.recipes.<name>`` in a fresh process with its outputs in a
temporary directory, and timed from the launch to the exit. What the command printed gives
its result (the exported model's test accuracy, the validation VOC07 mAP); ``classify2`` and
``classify3`` are ``make run``'s command on 2 and 3 ``dist_sync`` workers (``gluonkit-launch -n N
-s 1``: the same global batches and updates as one process; without ``--micro-batch`` BatchNorm
normalizes each worker's share, so not quite the same model). The ``tests`` run is ``make test``'s pytest run of the
whole suite (``--quick``: one small test file), timed the same way. The machine (CPU model, cores) and the load average
before and after each run are recorded beside it. Results go to ``--out`` and ``--readme``; with ``--update-committed``, to ``benchmarks/results/readme.json``
and, as a Markdown snippet, to the README's ``figures`` section (between
``<!-- figures:begin -->`` and ``<!-- figures:end -->``), which is the only place the README
quotes these figures from. ``--quick`` runs tiny budgets (for the tests: the figures mean
nothing)."""
import os
import re
import subprocess
import sys
import tempfile
import time

from . import _common
from gluonkit.bench.harness import machine

__all__ = ["RUNS", "QUICK", "run_recipe", "snippet", "parse_args", "main"]

#: What each run's command prints last, as a regular expression whose groups are its results.
RUNS = {
    "classify": r"test accuracy: (?P<test_accuracy>[0-9.]+) on (?P<images>\d+) images of the "
                r"test split, by the model exported from epoch (?P<exported_epoch>\d+) "
                r"\((?P<epochs>\d+) epochs, (?P<train_seconds>[0-9.]+) s\)",
    "detect": r"VOC07 mAP: (?P<val_map>[0-9.]+) on (?P<images>\d+) images of the validation "
              r"split, boxes in their own pixels \([^;]*; (?P<transform_map>[0-9.]+) in the "
              r"validation transform's pixels; (?P<epochs>\d+) epochs, (?P<train_seconds>[0-9.]+) s",
    "multitask": r"test accuracy: digit (?P<digit_accuracy>[0-9.]+), parity "
                 r"(?P<parity_accuracy>[0-9.]+), aux (?P<aux_accuracy>[0-9.]+)",
    "tests": r"(?P<passed>\d+) passed",
}
#: ``make run``'s command on N workers: name -> N, under ``gluonkit-launch -n N -s 1`` (dist_sync)
LAUNCHED = {"classify2": 2, "classify3": 3}
RUNS.update({name: RUNS["classify"] for name in LAUNCHED})
#: The tiny budgets of ``--quick``.
QUICK = {
    "classify": ["--epochs", "1", "--limit", "64", "--batch-size", "32"],
    "detect": ["--epochs", "1", "--limit", "8", "--batch-size", "4"],
    "multitask": ["--epochs", "1", "--train-size", "64"],
    "tests": [os.path.join("tests", "test_check.py")],
}
QUICK.update({name: QUICK["classify"] for name in LAUNCHED})
_WHAT = {"classify": "`make run` (`gluonkit-classify`, digits, built-in CNN)",
         "detect": "`gluonkit-detect` (shapes, YOLOv3 mobilenet0.25)",
         "multitask": "`gluonkit-multitask` (digits, three heads)",
         "tests": "`make test` (the whole test suite)",
         **{name: f"`make run`'s command on {workers} workers (`gluonkit-launch -n {workers} -s 1 -- "
                  "gluonkit-classify --kvstore dist_sync`)" for name, workers in LAUNCHED.items()}}


def run_recipe(name, extra=(), timeout=3600):
    """Run ``name`` (a recipe, or ``tests``) as a command; a dict of its results, the wall
    time from launch to exit and the 1-minute load average before and after."""
    module = "pytest" if name == "tests" else f"gluonkit.recipes.{'classify' if name in LAUNCHED else name}"
    launcher = ["python -m gluonkit.launch", "-n", str(LAUNCHED[name]), "-s", "1", "--"] if name in LAUNCHED else []
    shown = " ".join([*launcher, "python -m", module, *extra] + (["--kvstore", "dist_sync"] if launcher else []))
    with tempfile.TemporaryDirectory(prefix=f"readme-{name}-") as work:
        if name == "tests":       # make test: pytest from the clone's root, a process per core (at most 4)
            jobs = min(4, os.cpu_count() or 1)
            command, cwd = [sys.executable, "-m", module, "-q", "-p", "no:cacheprovider", "-n", str(jobs),
                            "--dist", "loadfile", *extra], _common.ROOT
        else:
            command, cwd = [sys.executable, "-m", module, "--no-progress",
                            "--out", os.path.join(work, name), *extra], work
        if launcher:
            command = [sys.executable, "-m", "gluonkit.launch", "-n", str(LAUNCHED[name]), "-s", "1", "--timeout",
                       str(timeout), "--", *command, "--kvstore", "dist_sync"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [_common.ROOT, os.environ.get("PYTHONPATH")])))
        load_before = os.getloadavg()[0]
        tic = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        wall = time.perf_counter() - tic
    if done.returncode != 0:
        raise RuntimeError(f"{shown} exited with {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    found = re.search(RUNS[name], done.stdout)
    if found is None:
        raise RuntimeError(f"{shown} printed no result line matching {RUNS[name]!r}:\n"
                           f"{done.stdout[-2000:]}")
    results = {key: float(value) for key, value in found.groupdict().items()}
    return {"command": shown, **results, "wall_seconds": round(wall, 1),
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def _result_text(name, row):
    if name == "classify" or name in LAUNCHED:
        return (f"test accuracy {row['test_accuracy']:.4f} on {row['images']:.0f} images, by the "
                f"model exported from epoch {row['exported_epoch']:.0f} (chosen on the validation "
                "split)")
    if name == "detect":
        return f"validation VOC07 mAP {row['val_map']:.3f} on {row['images']:.0f} images"
    if name == "tests":
        return f"{row['passed']:.0f} passed"
    return ("test accuracy of the exported model: digit {digit_accuracy:.3f}, parity "
            "{parity_accuracy:.3f}, aux {aux_accuracy:.3f}".format(**row))


def snippet(results):
    """The Markdown the README quotes: one table row per run, then the machine."""
    info = results["machine"]
    lines = ["| run | result | wall time (launch to exit) | load average (1 min, before / after) |",
             "|---|---|---|---|"]
    for name, row in results["runs"].items():
        minutes, seconds = divmod(round(row["wall_seconds"]), 60)
        lines.append(f"| {_WHAT[name]} | {_result_text(name, row)} | "
                     f"{minutes} min {seconds:02d} s | {row['load_average'][0]} / "
                     f"{row['load_average'][1]} |")
    lines += ["", f"Measured {info['date']} on {info['cpu']} ({info['cores']} cores), MXNet "
                  f"{info['mxnet']}, Python {info['python']}, by "
                  + (f"`{results['command']}` (tiny budgets: these figures mean nothing)"
                     if results["quick"] else f"`{results['command']}`") + "."]
    return "\n".join(lines)


def parse_args(argv=None):
    """The command line (``argv``, default ``sys.argv[1:]``)."""
    parser = _common.benchmark_parser(__doc__)
    parser.add_argument("--runs", default="classify,detect",
                        help="comma-separated runs among classify, classify2, classify3 (make run's command "
                             "on 2 and 3 workers), detect, multitask, tests (default classify,detect)")
    _common.add_output_options(parser, "readme")
    args = _common.parse_with_config(parser, argv)
    args.runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown or not args.runs:
        parser.error(f"--runs {','.join(args.runs)}: unknown {unknown}; choose among "
                     f"{', '.join(RUNS)}.")
    _common.apply_defaults(args, {}, "readme", readme=os.path.join(_common.ROOT, "README.md"))
    return args


def main(args):
    """Run ``args.runs``, then write the JSON and the README's figures section."""
    command = "python -m benchmarks.readme --runs " + ",".join(args.runs)
    command += " --quick" if args.quick else ""
    results = {"quick": args.quick, "command": command, "machine": machine(), "runs": {}}
    for name in args.runs:
        print(f"running {name} ...", flush=True)
        results["runs"][name] = run_recipe(name, QUICK[name] if args.quick else ())
        print(f"  {results['runs'][name]}", flush=True)
    text = snippet(results)
    results["markdown"] = text
    _common.write_outputs(args, "figures", results, text)
    print(text)
    return results


if __name__ == "__main__":
    main(parse_args())
