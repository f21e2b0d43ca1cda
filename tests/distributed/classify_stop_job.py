"""``gluonkit-classify`` with faults in epoch 2: ``python classify_stop_job.py FAULT... RECIPE-OPTIONS...``.

Each FAULT is ``ACTION:RANK:BATCH[:ATTEMPT]``: after its micro-batch ``BATCH`` of the second
epoch, the worker of rank ``RANK``, on the launcher's attempt ``ATTEMPT``
(``GLUONKIT_LAUNCH_ATTEMPT``, default 0), sends itself SIGTERM (``term``, as a scheduler's
preemption notice would: every worker then stops after the update that closes the window of
that micro-batch and writes its checkpoint), SIGINT (``int``: the same stop, on Ctrl-C's signal),
SIGKILL (``kill``: a lost process) or raises ``RuntimeError`` (``raise``: an error in the
program), at the same place on every run.
"""
import os
import signal
import sys

from gluonkit.callbacks import Callback
from gluonkit.recipes import classify, common

_ACTIONS = {"term": signal.SIGTERM, "int": signal.SIGINT, "kill": signal.SIGKILL, "raise": None}


class FaultAt(Callback):
    """``action`` (a key of ``_ACTIONS``) after micro-batch ``batch`` of the second epoch, on rank ``rank``."""

    def __init__(self, action, rank, batch):
        self.action, self.rank, self.batch = action, rank, batch

    def on_batch_end(self, state):
        if state.trainer.rank == self.rank and state.epoch == 1 and state.batch == self.batch:
            if _ACTIONS[self.action] is None:
                raise RuntimeError(f"rank {self.rank} gives up after micro-batch {self.batch} of epoch 2")
            os.kill(os.getpid(), _ACTIONS[self.action])


def faults(specs, attempt):
    """The callbacks of the FAULT arguments ``specs`` that apply to launch attempt ``attempt``."""
    callbacks = []
    for spec in specs:
        action, rank, batch, *on = spec.split(":")
        if int(on[0] if on else 0) == attempt:
            callbacks.append(FaultAt(action, int(rank), int(batch)))
    return callbacks


if __name__ == "__main__":
    count = next(i for i, arg in enumerate(sys.argv[1:]) if arg.startswith("--"))
    chosen = faults(sys.argv[1:1 + count], int(os.environ.get("GLUONKIT_LAUNCH_ATTEMPT", "0")))
    common.run_command("gluonkit.recipes.classify", classify.parse_args,
                       lambda args: classify.train(args, chosen), sys.argv[1 + count:])
