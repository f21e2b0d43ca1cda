"""gluonkit-bench's command line: the options, and every check made before anything is measured.

:func:`parse_args` returns the options with the lists split (``devices``, ``workers``,
``contestants``, ``input_shapes``), the network's spec and its labels' shape (from a forward
pass on two samples: :func:`gluonkit.bench.network.probe`), and the contestants that apply.
A value that cannot work raises :class:`~gluonkit.recipes.common.OptionError` (the command
prints it as one line) or ends argparse's way.
"""
import argparse
import json
import os

from ..recipes import common
from .contestants import DEFAULT_TOOLS, TOOLS, applies
from .network import LOSSES, NetworkError, network_spec, probe

__all__ = ["KVSTORES", "WORKER_KVSTORES", "WORKER_TOOLS", "QUICK", "build_parser", "parse_args", "check"]

#: --kvstore of several devices in one process, and of several workers
KVSTORES = ("device", "local")
WORKER_KVSTORES = ("dist_sync", "horovod")
#: the contestants a job of workers runs (a gluonkit.Trainer on the job's kvstore)
WORKER_TOOLS = ("gluonkit", "fit")
#: what --quick sets (a run of seconds for the test suite; its figures mean nothing)
QUICK = {"repeats": 2, "steps": 2, "batch_size": 4}


def _shape(text):
    try:
        shape = [int(part) for part in text.split(",")]
    except ValueError:
        shape = []
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected a shape like 3,224,224, got {text!r}")
    return shape


def _counts(text):
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"expected distinct counts like 1,2,4, got {text!r}")
    return sorted(counts)


def _json_object(text):
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON ({err}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object like '{{\"classes\": 10}}', got {text!r}")
    return value


def build_parser():
    parser = common.build_parser("Benchmark your own network's training throughput on 1, 2 or N "
                                 "devices and workers: a hand-written Gluon loop, gluonkit.Trainer, "
                                 "gluonkit.fit, Module.fit and forward+backward alone, each in its own "
                                 "process, repeats interleaved, ratios paired by repeat.")
    net = parser.add_argument_group("network")
    net.add_argument("--net", help="a GluonCV model-zoo name (no pretrained weights), module:callable "
                     "returning a gluon.Block, or an export's NAME-symbol.json")
    net.add_argument("--params", help="the export's parameters (NAME-0000.params; without it, initialized)")
    net.add_argument("--net-args", type=_json_object, default=None,
                     help="keyword arguments of the model-zoo network or the callable, as JSON")
    net.add_argument("--input-shape", type=_shape, action="append", dest="input_shapes",
                     help="one sample's shape, C,H,W (default 3,224,224); once per input of the network")
    net.add_argument("--classes", type=common.positive_int, default=10, help="output classes")
    net.add_argument("--loss", type=common.one_of(*LOSSES), default="softmax",
                     help=f"{', '.join(LOSSES)}: softmax cross-entropy (labels: class indices), L2, or "
                     "sigmoid binary cross-entropy (labels of the output's shape)")
    net.add_argument("--dtype", type=common.one_of("float32", "float16"), default="float32")
    net.add_argument("--hybridize", type=common.one_of("none", "dynamic", "static"), default="dynamic",
                     help="none, hybridize(), or hybridize(static_alloc=True, static_shape=True)")
    run = parser.add_argument_group("run")
    run.add_argument("--batch-size", type=common.positive_int, help="samples per device and step (default 32)")
    run.add_argument("--accumulate", type=common.positive_int, default=1,
                     help="micro-batches per update (gluonkit.Trainer(accumulate=...); the Gluon loop adds "
                     "its gradients as users do)")
    run.add_argument("--steps", type=common.positive_int, help="updates per timed epoch (default 10)")
    run.add_argument("--repeats", type=common.positive_int,
                     help="timed epochs per contestant, or launches per worker count (default 5)")
    run.add_argument("--contestants", help=f"comma-separated, among {', '.join(TOOLS)} (default: "
                     f"{','.join(DEFAULT_TOOLS)}, those that apply)")
    run.add_argument("--seed", type=common.non_negative_int, default=0)
    run.add_argument("--quick", action="store_true", help="a run of seconds (figures not meaningful)")
    devices = parser.add_argument_group("devices and workers")
    devices.add_argument("--device", type=common.one_of("cpu", "gpu"), default="cpu",
                         help="cpu(i) contexts (simulated devices sharing the cores) or gpu(i)")
    devices.add_argument("--devices", type=_counts, default=[1],
                         help="device counts per process, each a run, e.g. 1,2,4 (paired with 1 by repeat)")
    devices.add_argument("--kvstore", help=f"{', '.join(KVSTORES)} on several devices (default device); "
                         f"{', '.join(WORKER_KVSTORES)} with --workers (default dist_sync)")
    devices.add_argument("--workers", type=_counts, help="worker counts, each a job started through "
                         "gluonkit-launch (dist_sync) or horovodrun (horovod), e.g. 1,2")
    devices.add_argument("--threads", type=common.positive_int,
                         help="OMP_NUM_THREADS of every process of a job, the 1-worker job's too (default: "
                         "the cores over the largest worker count)")
    devices.add_argument("--timeout", type=float, default=600.0, help="seconds before a job is ended")
    out = parser.add_argument_group("output (the table always goes to stdout)")
    out.add_argument("--json", metavar="FILE", help="the results, for --compare")
    out.add_argument("--csv", metavar="FILE", help="one line per row")
    out.add_argument("--chart", metavar="FILE", help="a PNG chart of samples/s")
    out.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                     help="measure nothing: lay two runs' --json files side by side")
    return parser


def _contestants(args, hybrid):
    """The contestants to run and those skipped, each with why."""
    asked = args.contestants.split(",") if args.contestants else None
    unknown = [name for name in asked or () if name not in TOOLS]
    if unknown:
        raise common.OptionError(f"--contestants: unknown {', '.join(unknown)}; choose among {', '.join(TOOLS)}.")
    if args.workers:
        names = asked or list(WORKER_TOOLS)
        wrong = [name for name in names if name not in WORKER_TOOLS]
        if wrong:
            raise common.OptionError(f"--contestants {','.join(wrong)}: a job of workers runs "
                                     f"{' and '.join(WORKER_TOOLS)} (a gluonkit.Trainer on its kvstore).")
        return names, {}
    names = asked or list(DEFAULT_TOOLS)
    config = {"loss": args.loss, "input_shapes": args.input_shapes, "accumulate": args.accumulate,
              "dtype": args.dtype}
    skipped = {name: applies(name, config, hybrid) for name in names}
    skipped = {name: why for name, why in skipped.items() if why}
    if asked and skipped:
        name = next(iter(skipped))
        raise common.OptionError(f"--contestants {name}: does not apply here ({skipped[name]}).")
    if "gluon" not in names:
        raise common.OptionError("--contestants must include gluon: the ratios are to the hand-written loop.")
    return [name for name in names if name not in skipped], skipped


def _float16(args):
    import mxnet as mx

    if args.dtype == "float16" and (args.device != "gpu" or not mx.runtime.Features().is_enabled("CUDA")):
        raise common.OptionError("--dtype float16: this MXNet build has no float16 kernels for "
                                 f"{args.device} training (convolutions); use --dtype float32, or a CUDA "
                                 "build with --device gpu.")


def _device_options(args):
    import mxnet as mx

    if args.device == "gpu" and mx.context.num_gpus() < max(args.devices):
        raise common.OptionError(f"--devices {max(args.devices)} asks for that many GPUs but "
                                 f"{mx.context.num_gpus()} are visible.")
    if args.workers:
        kvstore = args.kvstore or "dist_sync"
        if kvstore not in WORKER_KVSTORES:
            raise common.OptionError(f"--kvstore {kvstore} with --workers: use {' or '.join(WORKER_KVSTORES)}.")
        if len(args.devices) != 1:
            raise common.OptionError("--workers runs jobs of one device count per worker: give one --devices.")
        if args.workers[0] != 1:
            raise common.OptionError("--workers must include 1: N workers are measured against N times one.")
        if kvstore == "horovod":
            from .workers import horovod_available

            if not horovod_available():
                raise common.OptionError("--kvstore horovod needs Horovod for MXNet and horovodrun beside "
                                         "this Python (make horovod).")
    else:
        kvstore = args.kvstore or "device"
        if kvstore not in KVSTORES:
            raise common.OptionError(f"--kvstore {kvstore} without --workers: use {' or '.join(KVSTORES)} "
                                     f"(or --workers 1,2 for {' or '.join(WORKER_KVSTORES)}).")
        if args.devices[0] != 1:
            raise common.OptionError("--devices must include 1: N devices are measured against one.")
    args.kvstore = kvstore
    if args.threads and not args.workers:
        raise common.OptionError("--threads applies to --workers jobs; set OMP_NUM_THREADS for one process.")
    if not args.timeout > 0:
        raise common.OptionError(f"--timeout must be a positive number of seconds, got {args.timeout}.")


def _outputs(args):
    for option in ("json", "csv", "chart"):
        path = getattr(args, option)
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise common.OptionError(f"--{option} {path}: the folder {folder} does not exist.")
        if option == "chart" and not path.endswith(".png"):
            raise common.OptionError(f"--chart {path}: the chart is a PNG; name it NAME.png.")


def check(args):
    """Check every option and fill in what follows from them (``net_spec``, ``label_shape``,
    ``contestants``, ``skipped``, the kvstore); OptionError on the first that cannot work."""
    for key, value in QUICK.items() if args.quick else ():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key, value in {"repeats": 5, "steps": 10, "batch_size": 32}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.net:
        raise common.OptionError("--net is required (a model-zoo name, module:callable or NAME-symbol.json), "
                                 "unless --compare A.json B.json.")
    args.input_shapes = args.input_shapes or [[3, 224, 224]]
    _outputs(args)
    _float16(args)
    _device_options(args)
    try:
        args.net_spec = network_spec(args.net, args.params, args.net_args)
        args.label_shape, hybrid = probe(args.net_spec, args.input_shapes, args.classes, args.loss)
    except NetworkError as err:
        raise common.OptionError(str(err)) from None
    args.contestants, args.skipped = _contestants(args, hybrid)
    return args


def parse_args(argv=None):
    """The checked options of ``argv`` (default: the command line)."""
    parser = build_parser()
    args = common.parse_with_config(parser, argv)
    if args.compare:
        return args
    return check(args)
