"""The command-line kit and shared steps of the recipes (and the benchmarks), public so that a
recipe copied out of the package still runs.

One ``--config`` loader (JSON or YAML) that sets a parser's defaults, and the options a run
in ``--out`` recorded when a command resumes or exports it; one device-list parser, the
thread settings of a benchmark that imports MXNet first, argparse types built on
:mod:`gluonkit.validate`, and a recipe's outputs in ``--out`` (a :mod:`run folder
<gluonkit.recipes.runs>`): the resolved arguments, the callbacks that write checkpoints,
history and curves, and the best checkpoint exported.
"""
import argparse
import contextlib
import difflib
import json
import logging
import math
import os
import shlex
import signal
import sys
import warnings

import mxnet as mx
import numpy as np

from gluonkit import validate
from gluonkit.arguments import OneLineParser
from gluonkit.commands import thread_settings
from gluonkit.data import DataFileError
from gluonkit.train.callbacks import Callback
from gluonkit.train.checkpoint import Checkpoint, CheckpointError
from gluonkit.train.resume import BatchSizeError
from gluonkit.recipes import runs
from gluonkit.recipes.runs import RunFolderError, save_args
from gluonkit.trainer import Horovod
from gluonkit.trainer.horovod import launched_ranks

__all__ = ["OptionError", "check_positive_int", "optimizer_params", "lr_schedule", "updates_per_epoch",
           "create_kvstore", "worker_shard",
           "build_parser", "parse_with_config", "parse_ctx", "ctx_type", "positive_int",
           "non_negative_int", "non_negative_float", "one_of", "sizes_type", "apply_threads",
           "save_args", "add_device_options", "add_output_options", "check_out",
           "check_output_options", "check_multiscale_interval", "output_callbacks", "finish_init",
           "export_best", "export_summary", "run_command", "add_image_limits", "fraction", "splits_note",
           "test_summary", "CONTINUING", "RecordArgs", "path_type", "dataset_type",
           "warnings_logged"]

#: Options that say how a resumed run goes on, not what it trains: the only ones ``--resume``
#: may change (besides ``--epochs``, the epoch to reach), so that a run's args.json describes it.
CONTINUING = ("epochs", "ctx", "kvstore", "num_workers", "progress", "hybridize", "data_dir",
              "max_image_pixels", "max_aspect_ratio")
log = logging.getLogger("gluonkit")
_REEXEC = "GLUONKIT_THREADS_SET"
# the kvstores a recipe can train with (asynchronous ones cannot normalize by the global count)
_KVSTORES = ("device", "local", "nccl", "dist_sync", "dist_device_sync", "horovod")
_CONFIG_BYTES = 1 << 20     # a config is a page of options: anything larger is not one


class OptionError(ValueError):
    """A command-line option whose value cannot be used (a dataset or model that does not exist,
    a pretrained file of another network): the commands print its message as one line."""


def check_positive_int(value, name, meaning=None):
    """``value`` as an int >= 1, else the ``TypeError`` or ``ValueError`` that names ``name``: the
    check of a recipe's own arguments (``HeadSchedule(every=...)``), worded as gluonkit's."""
    return validate.positive_int(value, name, meaning)


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in --help, once: not for options whose help gives its own default,
    for switches (``--no-progress`` would say 'default: True') or for options without one."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, True, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def build_parser(description, **kwargs):
    """An ``ArgumentParser`` with ``--config FILE`` (option defaults from JSON or YAML).

    Options must be spelled out (``--epoch`` is not taken for ``--epochs``), and one it does
    not know is refused with the closest names (``--epcohs``: did you mean ``--epochs``?).
    """
    parser = OneLineParser(description=description, allow_abbrev=False, **kwargs)
    parser.add_argument("--config", metavar="FILE",
                        help="JSON or YAML file of option defaults (keys as in --help, e.g. "
                             "batch_size); options on the command line override it")
    return parser


def _yaml_error(err):
    """A YAML parse error in one line: what is wrong and where."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return (getattr(err, "problem", None) or " ".join(str(err).split())) + where


def _read_config(path, parser, label="--config"):
    """The mapping in the JSON or YAML file ``path``; ``parser.error`` (one line naming the
    file) if it cannot be read, is not UTF-8, JSON or YAML, or holds no mapping."""
    try:
        with open(path, "rb") as f:
            data = f.read(_CONFIG_BYTES + 1)
    except OSError as err:
        parser.error(f"{label} {path}: cannot read it ({err.strerror}).")
    if len(data) > _CONFIG_BYTES:
        parser.error(f"{label} {path} is over {_CONFIG_BYTES >> 20} MiB: not a file of options.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        parser.error(f"{label} {path} is not UTF-8 text (byte {err.start}: "
                     f"{data[err.start:err.start + 1]!r}); save it as UTF-8.")
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            parser.error(f"{label} {path}: reading YAML needs PyYAML (pip install pyyaml), "
                         "or write the file as JSON.")
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as err:
            parser.error(f"{label} {path} is not valid YAML ({_yaml_error(err)}).")
    else:
        try:
            config = json.loads(text)
        except ValueError as err:
            parser.error(f"{label} {path} is not valid JSON ({err}).")
    if not isinstance(config, dict):
        parser.error(f"{label} {path} must hold a mapping of option names to values.")
    return config


def _config_defaults(parser, path, config, dests, label="--config"):
    """Parser defaults from the mapping ``config`` read from ``path``: each value as text that
    goes through the option's own type when parsed (a switch takes true/false)."""
    defaults = {}
    for key, value in config.items():
        dest = str(key).replace("-", "_")
        if dest not in dests:
            close = difflib.get_close_matches(dest, dests, n=3)
            parser.error(f"{label} {path}: unknown option {key!r}"
                         + (f" (did you mean {', '.join(close)}?)" if close else "")
                         + f"; valid: {', '.join(dests)}.")
        if isinstance(parser.get_default(dest), bool):
            if not isinstance(value, bool):
                parser.error(f"{label} {path}: {key} is a switch; write true or false, "
                             f"got {value!r}.")
            defaults[dest] = value
        elif value is None:
            defaults[dest] = None
        elif isinstance(value, (list, tuple)) and all(
                isinstance(v, (str, int, float)) for v in value):
            defaults[dest] = ",".join(map(str, value))
        elif isinstance(value, (str, int, float)):
            defaults[dest] = str(value)
        else:
            parser.error(f"{label} {path}: {key} must be a value or a list of values, got "
                         f"{type(value).__name__}.")
    return defaults


def parse_with_config(parser, argv=None, fixed=(), without=None):
    """Parse ``argv`` (default ``sys.argv[1:]``) after a ``--config FILE`` set the defaults.

    A config value goes through the option's own type check, as if typed on the command line
    (a flag takes ``true``/``false``); an unknown key is an error that names close matches.
    A run's ``args.json`` is such a file: ``--config runs/a/args.json`` replays that run.

    With ``--resume`` or ``--export``, the options the run in ``--out`` recorded (its
    ``args.json``) are the defaults, under any ``--config`` file and the command line: so
    ``--out DIR --resume`` continues the run as it was started, and ``--epochs`` given again
    extends it. Any other option whose value differs from the run's, except those of
    :data:`CONTINUING` (devices, workers, progress bars, ...), is an error that names it:
    those of ``fixed`` build the network or choose the data, the others say how it trains,
    and the run's args.json must keep describing what it trained. An option the run did not
    set is named as such ("trained without --micro-batch"), with what ``without[dest](out)``
    says the run did instead, for the dests ``without`` maps.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    known, _ = parser.parse_known_args(argv)
    dests = sorted(key for key in vars(known) if key != "config")
    config = {}
    if getattr(known, "config", None):
        values = _read_config(known.config, parser)
        values.pop("config", None)         # a run's args.json of an earlier version has it
        config = _config_defaults(parser, known.config, values, dests)
        parser.set_defaults(**config)
        known, _ = parser.parse_known_args(argv)
    run, recorded = None, {}
    out = getattr(known, "out", None)
    if out and (getattr(known, "resume", False) or getattr(known, "export", False)):
        path = os.path.join(out, runs.ARGS_FILE)
        if os.path.isfile(path):
            label = f"--out {out}:"
            values = {key: value for key, value in _read_config(path, parser, label).items()
                      if str(key).replace("-", "_") not in runs.INVOCATION}
            recorded = _config_defaults(parser, path, values, dests, label)
            parser.set_defaults(**{d: v for d, v in recorded.items() if d not in CONTINUING})
            run = parser.parse_args([])    # what the run trains (its --ctx may be absent here)
            parser.set_defaults(**recorded)
            parser.set_defaults(**config)  # under the --config file's
    args = parser.parse_args(argv)
    for dest in dests if run else ():
        given, made = getattr(args, dest), getattr(run, dest)
        if dest in CONTINUING and dest in recorded and str(given) != str(recorded[dest]) \
                and getattr(args, "resume", False) and dest not in ("epochs", "progress"):
            log.info("--%s %s applies from here on (the run in %s had %s).",
                     dest.replace("_", "-"), given, out, recorded[dest])
        if dest in CONTINUING or dest in runs.INVOCATION or given == made:
            continue
        name = "--" + dest.replace("_", "-")
        was = f"with {made}" if made is not None else _without(name, (without or {}).get(dest), out)
        if dest in fixed:
            parser.error(f"{name} {given} differs from the run in {out}, made {was} (its "
                         f"{runs.ARGS_FILE}), and changes the network or the data: drop {name} to "
                         "continue that run, or pass another --out.")
        parser.error(f"{name} {given} differs from the run in {out}, trained {was} (its "
                     f"{runs.ARGS_FILE}); a resumed run goes on as it was trained: drop {name}, "
                     f"or start a new run with it (--config {path} {name} ... --out NEW).")
    return args


def _without(name, describe, out):
    """'without --name', and what ``describe(out)`` says the run in ``out`` did instead, if anything."""
    instead = describe(out) if describe else None
    return f"without {name}" + (f", {instead}" if instead else "")


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
    return validate.argument_type(check, convert, expected)(text)


def positive_int(text):
    """argparse type: an integer >= 1."""
    return _checked(validate.positive_int, text)


def non_negative_int(text):
    """argparse type: an integer >= 0."""
    return _checked(validate.non_negative_int, text)


def non_negative_float(text):
    """argparse type: a finite number >= 0 (a learning rate, momentum, weight decay, epochs)."""
    return _checked(lambda value, name: validate.finite_real(value, name, minimum=0.0), text,
                    convert=float, expected="a number")


def fraction(text):
    """argparse type: a number in [0, 1) (a share of the data)."""
    def check(value, name):
        value = validate.finite_real(value, name, minimum=0.0)
        if value >= 1:
            raise ValueError(f"{name} must be below 1 (a share of the data), got {value!r}.")
        return value
    return _checked(check, text, convert=float, expected="a number")


def one_of(*choices):
    """argparse type: one of ``choices`` (checked for --config values too, unlike ``choices=``)."""
    def parse(text):
        try:
            return validate.choice(text, choices, "the value")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    parse.__name__ = "choice"
    return parse


def path_type(text):
    """argparse type: a file or folder, as an absolute path (``~`` expanded), so that a run's
    args.json names it from any working directory."""
    return os.path.abspath(os.path.expanduser(text)) if text else text


def dataset_type(text):
    """argparse type: a dataset ``KIND`` or ``KIND:PATH[,PATH]``, its paths absolute
    (:func:`path_type`): ``imagefolder:photos`` -> ``imagefolder:/home/me/photos``."""
    kind, _, where = str(text).partition(":")
    if not where:
        return text
    return f"{kind}:" + ",".join(path_type(part) if part else part for part in where.split(","))


def sizes_type(text):
    """argparse type: positive sizes, ``'16,20,24'`` -> ``[16, 20, 24]``."""
    try:
        sizes = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 16,20,24,28, got {text!r}") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def apply_threads(module, argv=None):
    """Give MXNet the thread settings of a command (:func:`gluonkit.commands.thread_settings`)
    in a program run as ``python -m module`` that imports MXNet before it can set them: the
    benchmarks. MXNet reads them when it loads, so when it is already imported, the program
    restarts once as ``python -m module argv`` with them set; the user's own values are kept.

    The gluonkit commands need none of this: they set them before MXNet loads
    (:func:`gluonkit.commands.prepare_command`), and start once.
    """
    unset = {name: value for name, value in thread_settings().items() if name not in os.environ}
    os.environ.update(unset)
    if unset and "mxnet" in sys.modules and _REEXEC not in os.environ:
        os.environ[_REEXEC] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", module,
                                  *(sys.argv[1:] if argv is None else argv)])


def add_device_options(parser):
    """The ``devices`` group of the training recipes: ``--ctx`` and ``--kvstore``."""
    devices = parser.add_argument_group("devices")
    devices.add_argument("--ctx", type=ctx_type, default="cpu:0",
                         help="devices, e.g. cpu:0,cpu:1 or gpu:0,1")
    devices.add_argument("--kvstore", default="device",
                         help="how gradients are reduced: device, local, dist_sync under "
                              "gluonkit-launch, or horovod under horovodrun")
    return devices


def add_image_limits(group):
    """``--max-image-pixels`` and ``--max-aspect-ratio``: the limits on the image files a
    command reads (``gluonkit.data.images``), added to the argument ``group``."""
    from gluonkit.deploy.imagefiles import add_limit_options

    return add_limit_options(group)


def add_num_workers(group):
    """``--num-workers``, added to the argument ``group``: None unless given, for
    ``workers.choose_num_workers``."""
    group.add_argument("--num-workers", type=non_negative_int,
                       help="data loading processes (default: what this machine has room for, 0 for "
                            "data in memory; any number gives the same run)")


def add_output_options(parser, default_out, export=True):
    """The ``output`` group every training recipe shares: ``--out``, ``--resume``,
    ``--overwrite``, ``--export`` (unless ``export`` is False), ``--no-progress``; returns the
    group (a recipe may add to it)."""
    output = parser.add_argument_group("output")
    output.add_argument("--out", default=default_out, metavar="DIR",
                        help="the run folder: checkpoints, history.csv, curves.png, args.json, "
                             "the exported model ('' for none)")
    output.add_argument("--resume", action="store_true",
                        help="continue the run in --out (its options from its args.json, "
                             "unless given again) from its latest checkpoint, if there is one")
    output.add_argument("--overwrite", action="store_true",
                        help="replace the run that --out holds (its files are removed first); "
                             "without it, or --resume, such a folder is refused")
    if export:
        output.add_argument("--export", action="store_true",
                            help="train nothing: export the best (else the latest) checkpoint "
                                 "of the run in --out as --out/model-*")
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
    """``parser.error`` if ``--resume`` or ``--export`` is given without an ``--out`` or with
    ``--overwrite``, if ``--out`` cannot be written (:func:`check_out`), or if it cannot be
    taken now (:func:`runs.check_folder`: in use, or holding a run that would be overwritten);
    in a worker of ``gluonkit-launch``, if ``--kvstore`` is not distributed. On a restart
    attempt of ``gluonkit-launch --max-restarts`` (``GLUONKIT_LAUNCH_ATTEMPT`` above 0) the
    run in ``--out`` is continued, as with ``--resume``, if it saved a checkpoint (else it
    starts again).
    """
    export = getattr(args, "export", False)
    if args.out and not export and os.environ.get("GLUONKIT_LAUNCH_ATTEMPT", "0") != "0":
        checkpoints = os.path.join(args.out, "checkpoints")  # a restart of gluonkit-launch:
        if os.path.isdir(checkpoints) and Checkpoint(checkpoints).latest_epoch is not None:
            args.resume, args.overwrite = True, False        # continue the run it checkpointed
    if (args.resume or export) and not args.out:
        parser.error(f"--{'resume' if args.resume else 'export'} reads the checkpoints in "
                     "--out; pass --out DIR.")
    if args.overwrite and (args.resume or export):
        parser.error(f"--overwrite starts a new run, --{'resume' if args.resume else 'export'} "
                     "continues the one in --out: pass one of them.")
    check_out(parser, args.out)
    launched = os.environ.get("DMLC_ROLE") == "worker"
    kvstore = getattr(args, "kvstore", None)
    if launched and kvstore is None:
        parser.error(f"{parser.prog} does not train across workers, but runs in a worker of gluonkit-launch "
                     "(DMLC_ROLE=worker); run it without the launcher.")
    if launched and not kvstore.startswith("dist"):
        parser.error(f"--kvstore {kvstore} in a worker of gluonkit-launch (DMLC_ROLE=worker): every worker would "
                     "train a copy of its own and write into --out; pass --kvstore dist_sync.")
    if launched:
        return   # its rank is not known yet: the worker of rank 0 takes the folder, the others only read it
    try:
        runs.check_folder(args.out, resume=args.resume or export, overwrite=args.overwrite)
    except RunFolderError as err:
        parser.error(f"--out {err}")
    if args.resume:
        _check_resumable(parser, args.out, args.epochs, exports=hasattr(args, "export"))


def check_multiscale_interval(parser, args):
    """``parser.error`` for ``--multiscale-interval`` (not 1) without ``--multiscale``: it would
    do nothing. A resume or an export goes on with what the run recorded."""
    if args.multiscale_interval != 1 and not args.multiscale and not (args.resume or getattr(args, "export", False)):
        parser.error(f"--multiscale-interval {args.multiscale_interval} is the batches per size drawn from "
                     "--multiscale, which is not given; pass --multiscale SIZES too, or drop --multiscale-interval.")


def _check_resumable(parser, out, epochs, exports):
    """``parser.error`` if ``out`` holds no checkpoint to resume (a typo in the path must not
    start a new run); exit 0 with a line that says so if the run has trained ``epochs``
    already and holds an export (nothing to train, nothing changed), offering ``--export`` if
    the recipe has that option (``exports``); a run stopped after its last epoch's checkpoint but
    before its first export goes on to the export."""
    directory = os.path.join(out, "checkpoints")
    done = Checkpoint(directory).latest_epoch if os.path.isdir(directory) else None
    if done is None:
        parser.error(f"--resume: {out} holds no checkpoint to continue from (none in "
                     f"{directory}); check --out, or start the run without --resume.")
    if epochs <= done and not os.path.exists(os.path.join(out, "model.json")):
        log.info("The run in %s has trained its %d epoch(s) but was stopped before its export: exporting it.",
                 out, done)
    elif epochs <= done:
        parser.exit(0, f"{parser.prog}: the run in {out} has trained {done} epoch(s) and --epochs "
                       f"{epochs} asks for no more: nothing was trained or changed. Pass --epochs "
                       f"{done + 1} or more to train it further"
                       + (", or --export to export it again.\n" if exports else ".\n"))


class RecordArgs(Callback):
    """Write the resolved options ``args`` into the run folder ``out`` (``args.json``) when
    training begins: after a resume has loaded its checkpoint, so that a resume refused by
    its checkpoint leaves the folder as it was."""

    main_process_only = True

    def __init__(self, args, out):
        self.args, self.out = args, out

    def on_train_begin(self, state):
        save_args(self.args, self.out)


def output_callbacks(out, monitor, resume, held_out="val", curves=None, args=None):
    """``fit`` callbacks that write into ``out``: checkpoints/ (the last few, and the best by
    the history key ``monitor``; ``resume`` continues from the latest), args.json (the
    resolved options ``args``, if given; written once the checkpoint is loaded),
    history.csv and curves.png: ``curves(path)`` makes the callback that draws it (default
    ``PlotCurves``, whose ``val_`` curves are labelled ``held_out``)."""
    from gluonkit.callbacks import HistoryLogger, ModelCheckpoint, PlotCurves

    curves = curves or (lambda path: PlotCurves(path, held_out=held_out))
    return [ModelCheckpoint(os.path.join(out, "checkpoints"), monitor=monitor, resume=resume),
            *([RecordArgs(args, out)] if args is not None else []),
            HistoryLogger(os.path.join(out, "history.csv")),
            curves(os.path.join(out, "curves.png"))]


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

    from gluonkit.deploy.export import export_model
    from gluonkit.train.checkpoint import Checkpoint

    ckpt = Checkpoint(checkpoints)
    if ckpt.best is None and ckpt.latest is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoints} to export; train first (same "
                                "--out).")
    params = net.collect_params()
    finish_init(net, input_shape, params.list_ctx()[0] if params else mx.cpu())
    state = ckpt.load(net, best=ckpt.best is not None)
    return export_model(net, prefix, input_shape, epoch_trained=state.get("epoch"),
                        **export_options)


def export_summary(metadata, history, monitor):
    """One line that says which epoch the exported model (``metadata`` from
    :func:`export_best`) comes from, with its value of the history key ``monitor`` beside the
    last epoch's: the final network and the exported one may differ."""
    epoch, path = metadata["epoch_trained"], metadata["files"]["symbol"]
    epochs, values = list(history.get("epoch", ())), list(history.get(monitor, ()))
    if epoch not in epochs or len(values) != len(epochs):
        return f"exported epoch {epoch}: {path}"
    return (f"exported epoch {epoch}, {monitor} {values[epochs.index(epoch)]:.4f} "
            f"(the last epoch, {epochs[-1]}: {values[-1]:.4f}): {path}")


def splits_note(val_images, test_images, monitor, exported=True):
    """What each held-out split is for, in a recipe's opening log line: the validation split
    (``val_images``, None for none) chooses the checkpoint to export by the history key
    ``monitor``; the test split (``test_images``) is evaluated once, at the end, on the model
    exported (or, not ``exported``, the final network)."""
    model = "the exported model" if exported else "the final network (nothing is exported)"
    test = f"the test split ({test_images} images) is evaluated once, at the end, on {model}."
    if val_images is None:
        return f"no validation split: the last epoch is exported; {test}"
    return (f"val_* in the history and the epoch lines are on the validation split ({val_images} "
            f"images), whose {monitor} chooses the checkpoint to export; {test}")


def test_summary(figures, images, metadata, history, seconds):
    """A recipe's last line: the test split's ``figures`` (e.g. 'test accuracy: 0.9861') on
    ``images`` images, measured by the model exported (``metadata`` from :func:`export_best`)
    or, with None, the final network; then the epochs of ``history`` and the ``seconds``."""
    model = (f"the model exported from epoch {metadata['epoch_trained']}" if metadata
             else "the final network")
    return (f"{figures} on {images} images of the test split, by {model} "
            f"({len(history.get('epoch', []))} epochs, {seconds:.1f} s)")


def optimizer_params(optimizer, lr, momentum, wd):
    """The optimizer's keyword arguments (momentum only for the optimizers that take it)."""
    params = {"learning_rate": lr, "wd": wd}
    if optimizer in ("sgd", "nag"):
        params["momentum"] = momentum
    return params


def updates_per_epoch(trainer, loader, accumulate):
    """The updates of an epoch: ``ceil(batches / accumulate)`` of the worker with the most
    batches under a distributed kvstore (the others take part in every update), so that a
    schedule gives every worker the same rates."""
    batches = [0] * trainer.num_workers
    batches[trainer.rank] = len(loader)
    if trainer.num_workers > 1:
        batches = trainer.sum_over_workers(batches)
    return math.ceil(int(max(batches)) / accumulate)


def lr_schedule(kind, lr, epochs, warmup_epochs, updates_per_epoch):
    """An ``LRSchedule`` callback (GluonCV schedulers after a linear warm-up), or None.

    ``kind`` is 'none', 'step' (x0.1 at 50% and 75% of the updates after the warm-up),
    'cosine' or 'poly', each decaying to 0 over the updates after the warm-up.
    """
    from gluonkit.callbacks import LRSchedule

    warmup = int(round(warmup_epochs * updates_per_epoch))
    if kind == "none" and not warmup:
        return None
    if kind == "none":
        return LRSchedule(lr, warmup_steps=warmup)
    from gluoncv.utils import LRScheduler

    steps = max(2, epochs * updates_per_epoch - warmup)     # GluonCV divides by steps - 1
    options = {"step_iter": [int(steps * 0.5), int(steps * 0.75)]} if kind == "step" else {}
    # LRSchedule counts updates from 1, as optimizers do: offset=1 starts the curve at its base
    return LRSchedule(LRScheduler(kind, base_lr=lr, target_lr=0.0, niters=steps, offset=1, **options),
                      warmup_steps=warmup)


def create_kvstore(name):
    """The kvstore ``--kvstore`` names, as the Trainer takes it: a distributed one is created
    now (its rank and worker count shard the data), a local one stays a name.

    'horovod' gives ``gluonkit.trainer.Horovod`` (the process must run under ``horovodrun``),
    'dist_*' an MXNet kvstore (under ``gluonkit-launch``).
    """
    if name.lower() not in _KVSTORES:
        close = difflib.get_close_matches(name.lower(), _KVSTORES, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise OptionError(f"--kvstore {name} is not a kvstore{hint}; use one of {', '.join(_KVSTORES)}.")
    if name.lower() == "horovod":
        try:
            return Horovod()
        except (ImportError, RuntimeError) as err:   # not installed, or not under horovodrun
            raise OptionError(f"--kvstore horovod: {err}") from None
    ranks = launched_ranks()
    if ranks is not None and ranks > 1:
        raise OptionError(f"--kvstore {name} in one of {ranks} ranks that horovodrun started: every rank "
                          "would train a copy of its own and write into --out; pass --kvstore horovod.")
    if name.startswith("dist") and "DMLC_ROLE" not in os.environ:
        raise OptionError(f"--kvstore {name} trains across the processes that gluonkit-launch starts "
                          f"(DMLC_ROLE is not set): run `gluonkit-launch -n WORKERS -s SERVERS -- "
                          f"COMMAND ... --kvstore {name}` (docs/distributed.md), or pass --kvstore device "
                          "in a single process.")
    return mx.kv.create(name) if name.startswith("dist") else name


def worker_shard(dataset, kvstore):
    """This worker's contiguous share of ``dataset`` under a distributed kvstore: every sample
    in one shard, shard sizes differing by at most one (a worker out of data takes part in the
    others' updates with a count of 0, see ``gluonkit.Trainer.flush``)."""
    return dataset.shard(kvstore.num_workers, kvstore.rank)


def worker_seed(seed, kvstore):
    """The seed of this worker's data order and per-sample augmentations: ``seed`` in one
    process and on worker 0; on worker r > 0 one drawn from (``seed``, r), so that workers do
    not make the same augmentations of their different samples."""
    rank = 0 if isinstance(kvstore, str) else kvstore.rank
    return seed if rank == 0 else int(np.random.default_rng([seed, rank]).integers(2 ** 31))


def _checkpoint_fix(err):
    """A ``CheckpointError``'s message for a command-line user: for a damaged file, the
    checkpoint the command falls back on once it is deleted."""
    if not err.damaged:
        return str(err)
    directory = os.path.dirname(err.damaged)
    earlier = [p for p in Checkpoint(directory).paths if p != err.damaged]
    if not earlier:
        return f"{err.reason}; delete it, then start the run again with --overwrite."
    return (f"{err.reason}; delete it (rm {err.damaged}), and the same command goes on from the "
            f"checkpoint before it, {earlier[-1]}.")


@contextlib.contextmanager
def warnings_logged(leave=()):
    """Within the block, Python warnings become the recipe's log lines (WARNING), each text
    once, when the block ends (or fails); those of the categories ``leave`` are dropped, for
    a recipe that reports them itself."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            texts = {str(w.message): None for w in caught if not issubclass(w.category, leave)}
            for text in texts:
                log.warning("%s", text)


def _say_how_to_continue(command, args):
    """After a training run's stop by a signal, one line of its only process (not of a launched
    worker or a Horovod rank, whose launcher says it): the command that continues the run."""
    out = getattr(args, "out", "")
    training = args is not None and not getattr(args, "export", False)
    if training and out and os.path.isfile(os.path.join(out, runs.ARGS_FILE)) and \
            os.environ.get("DMLC_ROLE") != "worker" and launched_ranks() is None:
        print(f"{command}: stopped with its checkpoint in {out}; {command} --out {shlex.quote(out)} --resume "
              "continues the run (its options recorded in args.json).", file=sys.stderr)


def run_command(module, parse_args, train, argv=None):
    """A recipe's ``main``: INFO logging, then ``train(parse_args(argv))``. Ctrl-C (SIGINT) or
    SIGTERM that stopped training exits with status 130 or 143 after a line saying the command
    that continues the run; a file that cannot be read or written (a full disk too), a refused
    data file, a checkpoint that cannot be resumed (under another batch size: with the
    ``--batch-size`` to pass) or a run folder that cannot be taken, with one line naming it
    (status 1)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    command = f"gluonkit-{module.rsplit('.', 1)[-1]}"
    args = None
    try:
        args = parse_args(argv)
        train(args)
    except KeyboardInterrupt:
        _say_how_to_continue(command, args)
        sys.exit(130)
    except SystemExit as stop:
        if stop.code == 128 + signal.SIGTERM:   # fit stopped on SIGTERM, its checkpoint written
            _say_how_to_continue(command, args)
        raise
    except BatchSizeError as err:       # the option that resumes: the interrupted run's size
        fix = f": pass --batch-size {err.saved}." if err.saved else "."
        sys.exit(f"{command}: {str(err).rstrip('.')}{fix}")
    except CheckpointError as err:
        sys.exit(f"{command}: {_checkpoint_fix(err)}")
    except (OSError, RunFolderError, DataFileError, OptionError) as err:   # a file or a folder: one line
        sys.exit(f"{command}: {err}")
