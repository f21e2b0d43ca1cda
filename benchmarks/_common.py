"""What the benchmark scripts share: options and --config files (gluonkit's command-line kit),
thread settings, default outputs and writing them, the report templates."""
import os
import sys
import time

from gluonkit.recipes import common

from gluonkit.bench.harness import replace_section, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
#: The directory that holds the ``benchmarks`` package: child processes run from it, so
#: that ``python -m benchmarks.<name>`` finds the package.
ROOT = os.path.dirname(HERE)

__all__ = ["HERE", "ROOT", "set_env", "thread_settings", "benchmark_parser", "parse_with_config",
           "add_output_options", "apply_defaults", "write_outputs", "template", "timed"]


def set_env(module):
    """Thread settings for a benchmark, applied by its ``main``: ``OMP_NUM_THREADS`` defaults
    to the number of cores (MXNet would use half) and ``OMP_WAIT_POLICY`` to PASSIVE
    (spinning OpenMP threads slowed training many times over whenever other processes kept
    the cores busy). MXNet reads them when it loads: the command restarts once as
    ``python -m module`` if it must."""
    common.apply_threads(module)


def thread_settings():
    """The environment variables that decide how fast MXNet runs on a CPU (a dict)."""
    names = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MXNET_CPU_WORKER_NTHREADS", "KMP_AFFINITY")
    return {name: os.environ[name] for name in names if name in os.environ}


def benchmark_parser(doc):
    """An argument parser with the options every benchmark has: ``--config`` and ``--quick``;
    its description is the first paragraph of ``doc`` (the script's docstring)."""
    parser = common.build_parser(doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny run for the test suite (seconds; figures not meaningful)")
    return parser


def parse_with_config(parser, argv):
    """Parse ``argv``; a ``--config FILE`` (JSON or YAML, keys as option names) sets the
    defaults first, each value checked by its option's type."""
    return common.parse_with_config(parser, argv)


def add_output_options(parser, name):
    """The 'output' group: ``--out`` (the JSON results), ``--readme`` (the file whose ``name``
    section is rewritten) and ``--update-committed`` (write this clone's committed results
    and README section, which the docs quote); returned, for a benchmark's own output options."""
    out = parser.add_argument_group("output")
    out.add_argument("--out", help="JSON results (none unless given, or with --update-committed: "
                     f"benchmarks/results/{name}.json)")
    out.add_argument("--readme", help=f"Markdown file whose '{name}' section is rewritten (none unless "
                     "given, or with --update-committed: benchmarks/README.md)")
    out.add_argument("--update-committed", action="store_true",
                     help="replace the committed figures (results and README section) by this run's; "
                          "only for a full run on a quiet machine")
    return out


def write_outputs(args, name, results, section):
    """Write ``results`` to ``--out`` and ``section`` into the ``name`` section of ``--readme``
    (each only if set), and say which files were written (outside ``--quick`` they default to
    files of this clone)."""
    if args.out:
        write_json(args.out, results)
        print(f"wrote {args.out}", file=sys.stderr)
    if args.readme:
        replace_section(args.readme, name, section)
        print(f"rewrote the '{name}' section of {args.readme}", file=sys.stderr)


def apply_defaults(args, defaults, name, readme=None):
    """Set the options left unset from ``defaults``; with ``--update-committed``, also write
    the results to ``results/<name>.json`` and ``readme`` (default benchmarks/README.md),
    unless ``--out`` / ``--readme`` say otherwise. A run without it (a partial one, say)
    writes nothing it was not asked to."""
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.update_committed:
        if args.quick:
            raise SystemExit("--update-committed with --quick: a quick run's figures mean nothing; drop one.")
        args.out = args.out or os.path.join(HERE, "results", f"{name}.json")
        args.readme = args.readme or readme or os.path.join(HERE, "README.md")


def template(name):
    """The report prose of a benchmark: ``templates/<name>.md`` (a ``str.format`` template)."""
    with open(os.path.join(HERE, "templates", f"{name}.md")) as f:
        return f.read().rstrip("\n")


def timed(run):
    """Seconds that ``run()`` takes, the devices idle before it starts and waited for after it."""
    import mxnet as mx   # here: a benchmark sets its threads before mxnet loads

    mx.nd.waitall()
    tic = time.perf_counter()
    run()
    mx.nd.waitall()
    return time.perf_counter() - tic
