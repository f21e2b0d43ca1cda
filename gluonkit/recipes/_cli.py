"""The command-line kit the recipes and benchmarks share.

One ``--config`` loader (JSON or YAML) that sets a parser's defaults, one device-list parser,
the OpenMP thread settings a command applies in its ``main()``, argparse types built on
:mod:`gluonkit._validate`, and a recipe's outputs in ``--out``: the resolved arguments, the
callbacks that write checkpoints, history and curves, and the best checkpoint exported.
"""
import argparse
import difflib
import json
import logging
import os
import sys

from .. import _validate
from ..train.checkpoint import CheckpointError

__all__ = ["build_parser", "parse_with_config", "parse_ctx", "ctx_type", "positive_int",
           "non_negative_int", "non_negative_float", "one_of", "sizes_type", "apply_threads",
           "save_args", "seed_all", "add_device_options", "add_output_options", "check_out",
           "check_output_options", "output_callbacks", "finish_init", "export_best", "run_command",
           "add_image_limits"]

_THREADS = {"OMP_NUM_THREADS": str(os.cpu_count() or 1), "OMP_WAIT_POLICY": "PASSIVE"}
_REEXEC = "GLUONKIT_THREADS_SET"


def build_parser(description, **kwargs):
    """An ``ArgumentParser`` with ``--config FILE`` (option defaults from JSON or YAML)."""
    parser = argparse.ArgumentParser(description=description, **kwargs)
    parser.add_argument("--config", metavar="FILE",
                        help="JSON or YAML file of option defaults (keys as in --help, e.g. "
                             "batch_size); options on the command line override it")
    return parser


def _read_config(path, parser):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as err:
        parser.error(f"--config {path}: cannot read it ({err.strerror}).")
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            parser.error(f"--config {path}: reading YAML needs PyYAML (pip install pyyaml), "
                         "or write the file as JSON.")
        config = yaml.safe_load(text)
    else:
        try:
            config = json.loads(text)
        except ValueError as err:
            parser.error(f"--config {path} is not valid JSON ({err}).")
    if not isinstance(config, dict):
        parser.error(f"--config {path} must hold a mapping of option names to values.")
    return config


def parse_with_config(parser, argv=None):
    """Parse ``argv`` (default ``sys.argv[1:]``) after a ``--config FILE`` set the defaults.

    A config value goes through the option's own type check, as if typed on the command line
    (a flag takes ``true``/``false``); an unknown key is an error that names close matches.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    known, _ = parser.parse_known_args(argv)
    if getattr(known, "config", None):
        path = known.config
        dests = sorted(key for key in vars(known) if key != "config")
        defaults = {}
        for key, value in _read_config(path, parser).items():
            dest = key.replace("-", "_")
            if dest not in dests:
                close = difflib.get_close_matches(dest, dests, n=3)
                parser.error(f"--config {path}: unknown option {key!r}"
                             + (f" (did you mean {', '.join(close)}?)" if close else "")
                             + f"; valid: {', '.join(dests)}.")
            if isinstance(parser.get_default(dest), bool):
                if not isinstance(value, bool):
                    parser.error(f"--config {path}: {key} is a switch; write true or false, "
                                 f"got {value!r}.")
                defaults[dest] = value
            elif value is None:
                defaults[dest] = None
            else:   # a string default goes through the option's type when parsed
                defaults[dest] = (",".join(map(str, value)) if isinstance(value, (list, tuple))
                                  else str(value))
        parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def parse_ctx(spec):
    """Contexts from ``'cpu:0,cpu:1'``, ``'gpu:0,1'``, ``'cpu'`` or ``'gpu:2'``.

    Example::

        >>> parse_ctx("cpu:0,1")
        [cpu(0), cpu(1)]
    """
    import mxnet as mx

    contexts, kind = [], None
    for token in str(spec).replace(" ", "").split(","):
        name, _, index = token.partition(":")
        if name.isdigit() and not index and kind:   # the '1' of 'gpu:0,1'
            name, index = kind, name
        index = index or "0"                        # 'cpu' means cpu:0
        if name not in ("cpu", "gpu") or not index.isdigit():
            raise ValueError(f"--ctx {spec!r}: cannot read {token!r}; write devices as "
                             "cpu:0,cpu:1 or gpu:0,1.")
        kind = name
        contexts.append(mx.Context(name, int(index)))
    if len(set(contexts)) != len(contexts):
        raise ValueError(f"--ctx {spec!r} names a device twice.")
    gpus = [c for c in contexts if c.device_type == "gpu"]
    if gpus and max(c.device_id for c in gpus) >= mx.context.num_gpus():
        raise ValueError(f"--ctx {spec!r} asks for GPUs but {mx.context.num_gpus()} are visible "
                         "(this MXNet build may be CPU-only: pip install mxnet-cu112==1.9.1).")
    return contexts


def ctx_type(text):
    """argparse type: a device list that :func:`parse_ctx` reads, kept as text."""
    try:
        parse_ctx(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _checked(check, text, convert=int, expected="an integer"):
    """``check(convert(text), 'the value')``, its error (or a failed conversion) as argparse's."""
    try:
        return check(convert(text), "the value")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err) if "must be" in str(err)
                                         else f"expected {expected}, got {text!r}") from None


def positive_int(text):
    """argparse type: an integer >= 1."""
    return _checked(_validate.positive_int, text)


def non_negative_int(text):
    """argparse type: an integer >= 0."""
    return _checked(_validate.non_negative_int, text)


def non_negative_float(text):
    """argparse type: a finite number >= 0 (a learning rate, momentum, weight decay, epochs)."""
    return _checked(lambda value, name: _validate.finite_real(value, name, minimum=0.0), text,
                    convert=float, expected="a number")


def one_of(*choices):
    """argparse type: one of ``choices`` (checked for --config values too, unlike ``choices=``)."""
    def parse(text):
        try:
            return _validate.choice(text, choices, "the value")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    parse.__name__ = "choice"
    return parse


def sizes_type(text):
    """argparse type: positive sizes, ``'16,20,24'`` -> ``[16, 20, 24]``."""
    try:
        sizes = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 16,20,24,28, got {text!r}") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def apply_threads(module=None, argv=None):
    """Give MXNet one OpenMP thread per core and passive waiting, unless the user set them.

    MXNet's thread count is left at half the cores by default, and spinning OpenMP threads
    slowed training 15-35x whenever other processes kept the cores busy. Both variables are
    read when MXNet loads, so when MXNet is already imported and ``module`` is given, the
    command restarts once as ``python -m module argv`` with them set.
    """
    unset = {name: value for name, value in _THREADS.items() if name not in os.environ}
    os.environ.update(unset)
    if unset and module and "mxnet" in sys.modules and _REEXEC not in os.environ:
        os.environ[_REEXEC] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", module,
                                  *(sys.argv[1:] if argv is None else argv)])


def save_args(args, directory, name="args.json"):
    """Write the resolved arguments ``vars(args)`` as JSON into ``directory``; returns the path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(vars(args), f, indent=1, default=str)
        f.write("\n")
    return path


def seed_all(seed):
    """Seed Python's, NumPy's and MXNet's generators."""
    import random

    import mxnet as mx
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    mx.random.seed(seed)


def add_device_options(parser):
    """The ``devices`` group of the training recipes: ``--ctx`` and ``--kvstore``."""
    devices = parser.add_argument_group("devices")
    devices.add_argument("--ctx", type=ctx_type, default="cpu:0",
                         help="devices, e.g. cpu:0,cpu:1 or gpu:0,1")
    devices.add_argument("--kvstore", default="device",
                         help="how gradients are reduced: device, local, or dist_sync under "
                              "gluonkit-launch")
    return devices


def add_image_limits(group):
    """``--max-image-pixels`` and ``--max-aspect-ratio``: the limits on the image files a
    command reads (``gluonkit.data.images``), added to the argument ``group``."""
    from ..data.images import MAX_ASPECT, MAX_PIXELS, check_limits

    def limit(index, convert):
        def parse(text):
            try:
                values = [MAX_PIXELS, MAX_ASPECT]
                values[index] = convert(text)
                return check_limits(*values)[index]
            except (TypeError, ValueError) as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        parse.__name__ = "limit"
        return parse

    group.add_argument("--max-image-pixels", type=limit(0, int), default=MAX_PIXELS, metavar="N",
                       help="refuse image files of more pixels (Pillow's decompression-bomb "
                            "limit; at most 2^30, MXNet's decoder's)")
    group.add_argument("--max-aspect-ratio", type=limit(1, float), default=MAX_ASPECT, metavar="R",
                       help="refuse image files whose longer side is more than R times the other")
    return group


def add_output_options(parser, default_out):
    """The ``output`` group every training recipe shares: ``--out``, ``--resume``, ``--export``,
    ``--no-progress``; returns the group (a recipe may add to it)."""
    output = parser.add_argument_group("output")
    output.add_argument("--out", default=default_out, metavar="DIR",
                        help="checkpoints, history.csv, curves.png, args.json, the exported "
                             "model ('' for none)")
    output.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in --out, if there is one")
    output.add_argument("--export", action="store_true",
                        help="train nothing: export the best (else the latest) checkpoint in "
                             "--out as --out/model-*")
    output.add_argument("--no-progress", dest="progress", action="store_false",
                        help="hide the progress bars")
    return output


def check_out(parser, out):
    """``parser.error`` if the directory ``out`` cannot be created or written, before any
    training (the nearest existing part of the path must be a writable directory)."""
    if not out:
        return
    existing = os.path.abspath(out)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        parser.error(f"--out {out}: {existing} is a file, not a directory; pass another --out.")
    if not os.access(existing, os.W_OK | os.X_OK):
        parser.error(f"--out {out}: cannot write into {existing}; pass another --out.")


def check_output_options(parser, args):
    """``parser.error`` if ``--resume`` or ``--export`` is given without an ``--out``, or if
    ``--out`` cannot be written (:func:`check_out`)."""
    if (args.resume or args.export) and not args.out:
        parser.error(f"--{'resume' if args.resume else 'export'} reads the checkpoints in "
                     "--out; pass --out DIR.")
    check_out(parser, args.out)


def output_callbacks(out, monitor, resume):
    """``fit`` callbacks that write into ``out``: checkpoints/ (the last few, and the best by
    the history key ``monitor``; ``resume`` continues from the latest), history.csv and
    curves.png."""
    from ..train.callbacks import HistoryLogger, ModelCheckpoint, PlotCurves

    return [ModelCheckpoint(os.path.join(out, "checkpoints"), monitor=monitor, resume=resume),
            HistoryLogger(os.path.join(out, "history.csv")),
            PlotCurves(os.path.join(out, "curves.png"))]


def finish_init(net, input_shape, ctx):
    """Give deferred parameters their shapes and values by one forward of zeros (one sample
    of ``input_shape`` on ``ctx``), recording nothing."""
    import mxnet as mx
    from mxnet import autograd

    with autograd.pause():
        net(mx.nd.zeros((1,) + tuple(input_shape), ctx=ctx))


def export_best(net, checkpoints, prefix, input_shape, **export_options):
    """Load the best (else the latest) checkpoint in the directory ``checkpoints`` into ``net``
    (a fresh, initialized build of the trained network) and export it as ``prefix``-symbol.json,
    -0000.params and .json with ``gluonkit.export_model(..., **export_options)``; returns the
    metadata, whose 'epoch_trained' is the checkpoint's epoch."""
    import mxnet as mx

    from ..export import export_model
    from ..train.checkpoint import Checkpoint

    ckpt = Checkpoint(checkpoints)
    if ckpt.best is None and ckpt.latest is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoints} to export; train first (same "
                                "--out).")
    params = net.collect_params()
    finish_init(net, input_shape, params.list_ctx()[0] if params else mx.cpu())
    state = ckpt.load(net, best=ckpt.best is not None)
    return export_model(net, prefix, input_shape, epoch_trained=state.get("epoch"),
                        **export_options)


def run_command(module, parse_args, train, argv=None):
    """A recipe's ``main``: threads (when ``argv`` is None: a command), INFO logging, then
    ``train(parse_args(argv))``; Ctrl-C that stopped training exits with status 130, a
    missing file, an image file refused, or a checkpoint that cannot be resumed with one line
    naming it (status 1)."""
    from ..data.images import ImageError

    if argv is None:
        apply_threads(module)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        train(parse_args(argv))
    except KeyboardInterrupt:
        sys.exit(130)
    except (FileNotFoundError, CheckpointError, ImageError) as err:   # a file: one line
        sys.exit(f"gluonkit-{module.rsplit('.', 1)[-1]}: {err}")
