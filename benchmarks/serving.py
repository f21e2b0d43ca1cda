"""Inference with the exported model.onnx in onnxruntime against the MXNet export.

Latency at batch 1 and throughput at batch 16 of three exports: the recipe's classifier
(``small_cnn``, 1x8x8), ``resnet18_v1`` (3x224x224) and the detect recipe's default detector
(``yolo3_mobilenet0.25_custom``, 3x96x96, NMS included). Each is exported once by
``gluonkit.export_model`` (random weights: the speed does not depend on them) and run by
five contestants, each in its own process, repeats interleaved: the MXNet export loaded as a
``gluon.SymbolBlock`` (hybridized with static memory) and as an ``mx.mod.Module``,
``model.onnx`` in onnxruntime in the serving environment (``benchmarks.serving_env``), the
same file in onnxruntime-node (Node.js), and the export that takes uint8 pixels and
normalizes in its graph (``pixels='NCHW'``) in onnxruntime.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from ._common import (HERE, add_output_options, apply_defaults, benchmark_parser,
                      parse_with_config, set_env, thread_settings, write_outputs)
from gluonkit.bench.harness import machine, markdown_table, measured_on

SECTION = "serving"
MODELS = {"cnn": (1, 8, 8), "resnet18_v1": (3, 224, 224),
          "yolo3_mobilenet0.25_custom": (3, 96, 96)}
CONTESTANTS = ("symbolblock", "module", "onnxruntime", "onnxruntime-node", "onnxruntime-uint8")
#: (batch, calls per repeat) in a full run and with --quick; one process of a contestant times
#: every batch of a model, one after the other
BATCHES = {False: ((1, 20), (16, 4)), True: ((1, 2), (16, 1))}


def _export(name, shape, folder):
    """Export ``name`` with random weights to ``folder/name/model``; returns the prefix."""
    import mxnet as mx
    import gluoncv

    import gluonkit
    from gluonkit.recipes.models import small_cnn

    kind, outputs = "classifier", None
    if name == "cnn":
        net = small_cnn(10)
    elif name.startswith("yolo3"):
        net = gluoncv.model_zoo.get_model(name, classes=["a", "b", "c"], pretrained_base=False)
        net.set_nms(0.45, 400, 100)
        kind, outputs = "detector", ["a", "b", "c"]
    else:
        net = gluoncv.model_zoo.get_model(name)
    net.initialize()
    net(mx.nd.zeros((1,) + shape))
    prefix = os.path.join(folder, name, "model")
    preprocessing = {"channels": shape[0], "resize": list(shape[1:])}
    gluonkit.export_model(net, prefix, shape, outputs=outputs, kind=kind, onnx=True,
                          preprocessing=preprocessing)
    gluonkit.export_model(net, prefix + "-uint8", shape, outputs=outputs, kind=kind, onnx=True,
                          preprocessing=preprocessing, pixels="NCHW")
    return prefix


def _mxnet_times(prefix, shape, batches, repeats, contestant):
    """Seconds per call of the MXNet export, per repeat, for each (batch, calls) of ``batches``."""
    return [_mxnet_batch_times(prefix, shape, batch, calls, repeats, contestant)
            for batch, calls in batches]


def _mxnet_batch_times(prefix, shape, batch, calls, repeats, contestant):
    """Seconds per call of the MXNet export at ``batch``, per repeat."""
    import mxnet as mx
    import numpy as np

    x = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (batch,) + shape))
    if contestant == "symbolblock":
        net = mx.gluon.SymbolBlock.imports(f"{prefix}-symbol.json", ["data"],
                                           f"{prefix}-0000.params")
        net.hybridize(static_alloc=True, static_shape=True)
        run = lambda: [o.wait_to_read() for o in _as_list(net(x))]   # noqa: E731
    else:
        symbol, args, auxs = mx.model.load_checkpoint(prefix, 0)
        module = mx.mod.Module(symbol, data_names=["data"], label_names=None)
        module.bind([("data", x.shape)], for_training=False)
        module.set_params(args, auxs)
        batch_data = mx.io.DataBatch([x])

        def run():
            module.forward(batch_data, is_train=False)
            for o in module.get_outputs():
                o.wait_to_read()
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - tic) / calls)
    return times


def _batches(text):
    """The workers' BATCHES argument, ``1x20,16x4``: a list of (batch, calls per repeat)."""
    return [tuple(int(n) for n in item.split("x")) for item in text.split(",")]


def _as_list(outputs):
    return outputs if isinstance(outputs, (list, tuple)) else [outputs]


def _measure(contestant, prefix, shape, batches, repeats, serve_python, node_path):
    """One contestant's seconds per call, per repeat, for each (batch, calls) of ``batches``,
    in a process of its own."""
    env = None
    if contestant in ("onnxruntime", "onnxruntime-uint8"):
        model = f"{prefix}-uint8.onnx" if contestant.endswith("uint8") else f"{prefix}.onnx"
        command = [serve_python, os.path.join(HERE, "onnx_worker.py"), model]
    elif contestant == "onnxruntime-node":
        command = ["node", os.path.join(HERE, "onnx_worker.js"), f"{prefix}.onnx"]
        env = dict(os.environ, NODE_PATH=node_path)
    else:
        command = [sys.executable, "-m", "benchmarks.serving", "--worker", contestant, prefix]
    command += [",".join(map(str, shape)), ",".join(f"{b}x{c}" for b, c in batches), str(repeats)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                            cwd=os.path.dirname(HERE), env=env)
    if result.returncode:
        raise RuntimeError(f"{contestant} failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _median(values):
    values = sorted(values)
    return values[len(values) // 2]


def run(args, serve_python, node_path):
    """Every model, batch and contestant (onnxruntime-node where ``node_path`` is given);
    rows of medians and ranges."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, shape in MODELS.items():
            if args.quick and name == "resnet18_v1":
                continue
            prefix = _export(name, shape, folder)
            batches = BATCHES[args.quick]
            contestants = [c for c in CONTESTANTS if node_path or c != "onnxruntime-node"]
            times = {(b, c): [] for b, _ in batches for c in contestants}
            for _ in range(args.rounds):          # interleaved
                for contestant in contestants:
                    measured = _measure(contestant, prefix, shape, batches, args.repeats,
                                        serve_python, node_path)
                    for (batch, _), seconds in zip(batches, measured):
                        times[batch, contestant] += seconds
            for batch, _ in batches:
                for contestant in contestants:
                    seconds = times[batch, contestant]
                    rows.append({"model": name, "batch": batch, "contestant": contestant,
                                 "ms_per_call": 1e3 * _median(seconds),
                                 "ms_min": 1e3 * min(seconds), "ms_max": 1e3 * max(seconds),
                                 "images_per_s": batch / _median(seconds),
                                 "vs_symbolblock":
                                     _median(times[batch, "symbolblock"]) / _median(seconds),
                                 "vs_onnxruntime":
                                     _median(times[batch, "onnxruntime"]) / _median(seconds)})
    return rows


def report(results):
    """The Markdown section: the table and when it was measured."""
    table = markdown_table(results["rows"], [
        ("model", "model"), ("batch", "batch"), ("contestant", "contestant"),
        ("ms per call (min-max)", lambda r: f"{r['ms_per_call']:.2f} ({r['ms_min']:.2f}-{r['ms_max']:.2f})"),
        ("images/s", lambda r: f"{r['images_per_s']:.0f}"),
        ("speed vs SymbolBlock", lambda r: f"{r['vs_symbolblock']:.2f}x"),
        ("speed vs onnxruntime (Python)", lambda r: f"{r['vs_onnxruntime']:.2f}x")])
    return ("## Serving: model.onnx in onnxruntime vs the MXNet export (`serving.py`)\n\n"
            + __doc__.split("\n\n")[1].replace("\n", " ") + "\n\n" + table + "\n\n"
            + measured_on(results["machine"], results["settings"]))


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per process (default 5)")
    parser.add_argument("--serve-python", help="the serving environment's Python "
                        "(default: benchmarks.serving_env builds or finds it)")
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    apply_defaults(args, {"rounds": 1 if args.quick else 3, "repeats": 1 if args.quick else 5},
                   SECTION)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:                  # one MXNet contestant, in its own process
        contestant, prefix, shape, batches, repeats = argv[1:6]
        print(json.dumps(_mxnet_times(prefix, tuple(int(n) for n in shape.split(",")),
                                      _batches(batches), int(repeats), contestant)))
        return
    set_env("benchmarks.serving")
    args = parse_args(argv)
    from .serving_env import node_modules, serving_python

    info = machine()
    try:
        node_path = node_modules()
    except (OSError, subprocess.SubprocessError) as err:     # no node, npm or network
        print(f"benchmarks.serving: onnxruntime-node left out ({err})", file=sys.stderr)
        node_path = None
    rows = run(args, args.serve_python or serving_python(), node_path)
    info["load_average_end"] = machine()["load_average"]
    settings = ", ".join(f"{k}={v}" for k, v in thread_settings().items()) or "default threads"
    results = {"machine": info, "settings": settings + ", onnxruntime (Python and Node.js) "
               "default threads",
               "rows": rows}
    write_outputs(args, SECTION, results, report(results))
    print(report(results))


if __name__ == "__main__":
    main()
