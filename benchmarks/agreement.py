"""How far 2 Horovod ranks end from one process on the same samples, with SGD and with Adam.

    python -m benchmarks.agreement           # the table below (about a minute; Horovod from make horovod)
    python -m benchmarks.agreement --quick   # seconds of training, for a look; figures not meaningful

The recipes' digits (8x8 images), an MLP (64-32-10, tanh) from the same initial weights,
``UPDATES`` updates of a global batch of 64 split unevenly over 2 ranks (40 and 24 samples)
by ``gluonkit.Trainer(kvstore='horovod')`` under ``horovodrun --gloo -np 2`` on loopback,
against ``gluon.Trainer`` in one process stepping each update's 64 samples. Each optimizer's
row gives the largest difference of a weight between a rank and the one process, the largest
weight, and (Adam) the gradient magnitude where the difference is largest: Adam divides by the
root of the squared gradient, so a weight whose gradients are near zero turns the float32
rounding of the all-reduce (the sums are added in another order) into a visible step.
Results go to a JSON file and the "agreement" section of benchmarks/README.md.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

from ._common import (ROOT, add_output_options, apply_defaults, benchmark_parser, parse_with_config,
                      thread_settings, write_outputs)
from gluonkit.bench.harness import machine, markdown_table, measured_on
from gluonkit.bench.workers import HOROVODRUN, horovod_available

__all__ = ["OPTIMIZERS", "job", "one_process", "measure", "parse_args", "main"]

SECTION = "agreement"
UPDATES = 40
SHARES = (40, 24)   # samples of each rank per update
OPTIMIZERS = {"sgd": {"learning_rate": 0.1, "momentum": 0.9}, "adam": {"learning_rate": 0.01}}


def _net():
    import mxnet as mx
    from mxnet import gluon

    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, in_units=64, activation="tanh"), gluon.nn.Dense(10, in_units=32))
    net.initialize(mx.init.Xavier())
    return net


def _data():
    import gluonkit

    digits = gluonkit.data.digits()
    x = np.stack([np.asarray(digits[i][0], dtype="float32").reshape(-1) for i in range(len(digits))])
    y = np.array([digits[i][1] for i in range(len(digits))], dtype="float32")
    return x, y


def _rows(update, rank):
    """The rows of ``rank`` in ``update`` (both ranks' rows are the update's 64 samples)."""
    begin = (update * sum(SHARES)) % 1024 + sum(SHARES[:rank])   # the digits hold 1438 training images
    return slice(begin, begin + SHARES[rank])


def _train(trainer_of, updates, rows_of, count_of):
    from mxnet import autograd, gluon, nd
    from gluonkit.params import select

    x, y = _data()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    results = {}
    for name in OPTIMIZERS:
        net = _net()
        trainer = trainer_of(net, name)
        for update in range(updates):
            rows = rows_of(update)
            with autograd.record():
                loss = loss_fn(net(nd.array(x[rows])), nd.array(y[rows]))
            loss.backward()
            grads = {k: p.grad().asnumpy() for k, p in select(net).items()}
            trainer.step(count_of(rows))
        results[name] = ({k: p.data().asnumpy() for k, p in select(net).items()}, grads)
    return results


def job(out_dir, updates):
    """A rank's part, under horovodrun: train with each optimizer, save the weights."""
    import gluonkit
    from mxnet import nd

    def trainer_of(net, name):
        return gluonkit.Trainer(net.collect_params(), name, dict(OPTIMIZERS[name]), kvstore="horovod")

    rank = int(os.environ["HOROVOD_RANK"])
    results = _train(trainer_of, updates, lambda u: _rows(u, rank), lambda rows: rows.stop - rows.start)
    for name, (weights, _) in results.items():
        nd.save(os.path.join(out_dir, f"{name}-{rank}.params"), {k: nd.array(v) for k, v in weights.items()})


def one_process(updates):
    """``{optimizer: (weights, last gradients)}`` of plain gluon.Trainer on every update's samples."""
    from mxnet import gluon

    def trainer_of(net, name):
        return gluon.Trainer(net.collect_params(), name, dict(OPTIMIZERS[name]))

    def rows_of(update):
        return np.concatenate([np.arange(1024 + sum(SHARES))[_rows(update, rank)] for rank in range(len(SHARES))])

    return _train(trainer_of, updates, rows_of, len)


def measure(updates, timeout=600):
    """Run the job on 2 ranks and compare; a dict per optimizer."""
    from mxnet import nd

    reference = one_process(updates)
    with tempfile.TemporaryDirectory() as out_dir:
        command = [HOROVODRUN, "--gloo", "-np", str(len(SHARES)), "-H", f"localhost:{len(SHARES)}",
                   "--network-interface", "lo", sys.executable, "-m", "benchmarks.agreement", "job", out_dir,
                   str(updates)]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        if result.returncode != 0:
            raise RuntimeError(f"horovodrun failed (exit code {result.returncode}):\n{result.stderr[-3000:]}")
        rows = []
        for name, (weights, grads) in reference.items():
            worst = (0.0, None, None)
            for rank in range(len(SHARES)):
                got = {k: v.asnumpy() for k, v in nd.load(os.path.join(out_dir, f"{name}-{rank}.params")).items()}
                for key, value in weights.items():
                    diff = np.abs(got[key] - value)
                    where = np.unravel_index(np.argmax(diff), diff.shape)
                    if diff[where] > worst[0]:
                        worst = (float(diff[where]), key, float(abs(grads[key][where])))
            rows.append({"optimizer": name, "max_difference": worst[0], "parameter": worst[1],
                         "gradient_there": worst[2],
                         "max_weight": max(float(np.abs(v).max()) for v in weights.values())})
    return rows


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--updates", type=int, help=f"updates per optimizer (default {UPDATES}; --quick 3)")
    add_output_options(parser, SECTION)
    args = parse_with_config(parser, argv)
    apply_defaults(args, {"updates": 3 if args.quick else UPDATES}, SECTION)
    return args


def main(args):
    if not horovod_available():
        sys.exit("benchmarks.agreement needs Horovod for MXNet and horovodrun beside this Python: make horovod")
    info = machine()
    rows = measure(args.updates)
    info["load_average_end"] = os.getloadavg()
    table = markdown_table(rows, [("optimizer", "optimizer"),
                                  ("largest difference", lambda r: f"{r['max_difference']:.1e}"),
                                  ("at", "parameter"),
                                  ("its last gradient", lambda r: f"{r['gradient_there']:.1e}"),
                                  ("largest weight", lambda r: f"{r['max_weight']:.2f}")])
    print(table)
    section = "\n\n".join([
        "## Horovod against one process (`agreement.py`)",
        "```bash\npython -m benchmarks.agreement           # the table below (about a minute)\n```",
        f"{args.updates} updates of a global batch of 64 digits, split 40 + 24 over 2 Horovod ranks "
        "(`gluonkit.Trainer(kvstore='horovod')`), against `gluon.Trainer` in one process on the same "
        "samples, the same initial weights (an MLP 64-32-10):",
        table,
        measured_on(info, ", ".join(f"{k}={v}" for k, v in thread_settings().items()) or "default threads")])
    write_outputs(args, SECTION, {"machine": info, "updates": args.updates, "rows": rows}, section)


if __name__ == "__main__":
    if sys.argv[1:2] == ["job"]:
        job(sys.argv[2], int(sys.argv[3]))
    else:
        main(parse_args())
