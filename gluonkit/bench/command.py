"""The ``gluonkit-bench`` command (also ``python -m gluonkit.bench``): check every option,
measure, print the table, write the files asked for."""
import os
import sys
import time

from ..recipes import common
from .harness import machine
from .options import parse_args
from .report import (SCHEMA, compare_table, read_results, spread_warnings, table, write_chart, write_csv,
                     write_results)

__all__ = ["main", "run"]

_SETTINGS = ("net", "params", "net_args", "input_shapes", "label_shape", "classes", "loss", "dtype",
             "hybridize", "batch_size", "accumulate", "steps", "repeats", "contestants", "seed", "quick",
             "device", "devices", "kvstore", "workers", "threads", "timeout")

def _say(line):
    print(line, file=sys.stderr, flush=True)

def _headline(args):
    devices, workers = max(args.devices), max(args.workers or [1])
    micro = args.batch_size * devices * workers
    accumulated = f", {args.accumulate} micro-batches per update: {micro * args.accumulate} samples per update" \
        if args.accumulate > 1 else ""
    return (f"{args.net}: input {' + '.join(','.join(map(str, s)) for s in args.input_shapes)}, batch "
            f"{args.batch_size} per device, global batch {micro} on {devices} device(s)"
            + (f" x {workers} workers" if workers > 1 else "") + accumulated
            + f"; {args.steps} updates per epoch, {args.repeats} repeats")

def run(args):
    """Measure what ``args`` (checked by :func:`~gluonkit.bench.options.parse_args`) asks for;
    return the results (a dict, as ``--json`` writes it)."""
    info = machine()
    _say(f"{info['cpu']}, {info['cores']} cores, OMP_NUM_THREADS={info['omp_num_threads']}, "
         f"load average {info['load_average']}")
    _say(_headline(args))
    for name, why in args.skipped.items():
        _say(f"  {name} skipped: {why}")
    tic = time.perf_counter()
    if args.workers:
        from .workers import measure
    else:
        from .devices import measure
    rows = measure(args, log=_say)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return {"schema": SCHEMA, "command": ["gluonkit-bench"] + sys.argv[1:], "machine": info,
            "settings": {key: getattr(args, key) for key in _SETTINGS}, "seconds": time.perf_counter() - tic,
            "skipped": args.skipped, "rows": rows, "warnings": spread_warnings(rows)}

def _write(args, results):
    print(table(results["rows"]))
    info = results["machine"]
    print(f"\n{info['cpu']}, {info['cores']} cores; load average {info['load_average'][0]} before, "
          f"{info['load_average_end'][0]} after; MXNet {info['mxnet']} ({', '.join(info['mxnet_features'])})")
    if results["warnings"]:
        print("\nwarning: the repeats' spread exceeds the difference reported (noise at this load: "
              "more --repeats, or a quieter machine):\n  " + "\n  ".join(results["warnings"]))
    for option, write in (("json", write_results), ("csv", lambda p, r: write_csv(p, r["rows"])),
                          ("chart", lambda p, r: write_chart(p, r["rows"], _headline(args)))):
        path = getattr(args, option)
        if path:
            write(path, results)
            _say(f"wrote {path}")

def _compare(paths):
    try:
        a, b = (read_results(path) for path in paths)
    except (OSError, ValueError) as err:
        raise common.OptionError(f"--compare: {err}") from None
    print(compare_table(a, b, paths))

def main(argv=None):
    """The command: parse and check ``argv`` (default: the command line), then measure or compare."""
    try:
        args = parse_args(argv)
        if args.compare:
            _compare(args.compare)
            return None
        results = run(args)
        _write(args, results)
        return results
    except KeyboardInterrupt:
        sys.exit(130)
    except (OSError, common.OptionError, RuntimeError) as err:
        sys.exit(f"gluonkit-bench: {err}")
