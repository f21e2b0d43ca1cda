"""What the benchmark scripts share: thread settings, options, --config files, the recipe's CNN."""
import argparse
import importlib.util
import json
import os

from _harness import set_threads

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = os.path.join(os.path.dirname(HERE), "recipes", "classify.py")


def set_env():
    """Thread settings for a benchmark; call before anything imports MXNet.

    ``OMP_NUM_THREADS`` defaults to the number of cores (MXNet would use half), and
    ``OMP_WAIT_POLICY`` to PASSIVE: spinning OpenMP threads slowed training many times over
    whenever other processes kept the cores busy.
    """
    set_threads()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def thread_settings():
    """The environment variables that decide how fast MXNet runs on a CPU (a dict)."""
    names = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MXNET_CPU_WORKER_NTHREADS", "KMP_AFFINITY")
    return {name: os.environ[name] for name in names if name in os.environ}


def benchmark_parser(doc):
    """An argument parser with the options every benchmark has: ``--config`` and ``--quick``;
    its description is the first paragraph of ``doc`` (the script's docstring)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--config", metavar="FILE", help="JSON file of option defaults (keys as option names)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny run for the test suite (seconds; figures not meaningful)")
    return parser


def parse_with_config(parser, argv):
    """Parse ``argv``; a ``--config FILE`` (JSON, keys as option names) sets the defaults first."""
    known, _ = parser.parse_known_args(argv)
    if known.config:
        with open(known.config) as f:
            config = json.load(f)
        dests = {action.dest for action in parser._actions}
        unknown = sorted(key for key in config if key.replace("-", "_") not in dests)
        if unknown:
            parser.error(f"--config {known.config}: unknown option(s) {', '.join(unknown)}.")
        parser.set_defaults(**{key.replace("-", "_"): value for key, value in config.items()})
    return parser.parse_args(argv)


def apply_defaults(args, defaults, name):
    """Set the options left unset from ``defaults``; outside ``--quick``, also write the
    results to ``results/<name>.json`` and the README by default (a quick run writes nothing
    it was not asked to)."""
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.quick:
        args.out = args.out or os.path.join(HERE, "results", f"{name}.json")
        args.readme = args.readme or os.path.join(HERE, "README.md")


def recipe_cnn(classes):
    """The CNN that ``recipes/classify.py`` trains by default (imported from the recipe)."""
    spec = importlib.util.spec_from_file_location("classify_recipe", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    return recipe.small_cnn(classes)
