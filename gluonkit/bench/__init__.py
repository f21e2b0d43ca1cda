"""gluonkit-bench: benchmark your own network's training on 1, 2 or N devices and workers.

Usage::

    gluonkit-bench --net resnet18_v1b --input-shape 3,64,64 --batch-size 16 --devices 1,2 --repeats 3
    gluonkit-bench --net mypkg.nets:two_branch_cnn --input-shape 3,32,32 --input-shape 3,16,16
    gluonkit-bench --net cifar_resnet20_v1 --input-shape 3,32,32 --workers 1,2 --kvstore horovod
    gluonkit-bench --compare before.json after.json

Which module holds what:

- :mod:`~gluonkit.bench.network`: the network (model-zoo name, ``module:callable``, export),
  checked by a forward pass before anything is measured;
- :mod:`~gluonkit.bench.contestants`: the same training under each tool (the hand-written
  Gluon loop, gluonkit.Trainer, gluonkit.fit, Module.fit, the forward+backward floor);
- :mod:`~gluonkit.bench.harness`: the timing method (a process per contestant, interleaved
  repeats, paired ratios), shared with the scripts of ``benchmarks/``;
- :mod:`~gluonkit.bench.devices` and :mod:`~gluonkit.bench.workers`: runs on N devices of one
  process, and jobs of N workers (:mod:`~gluonkit.bench.job` is one of their processes);
- :mod:`~gluonkit.bench.report`: the table, JSON, CSV, chart and ``--compare``;
- :mod:`~gluonkit.bench.options` and :mod:`~gluonkit.bench.command`: the command line.
"""
from ..commands import prepare_command

prepare_command()   # a command's OpenMP settings, before anything imports MXNet (gluonkit.commands)

from .command import main  # noqa: E402

__all__ = ["main"]
