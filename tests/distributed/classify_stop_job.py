"""``gluonkit-classify`` whose rank 0 sends itself SIGTERM after a given micro-batch of epoch 2,
as a scheduler's preemption notice would: ``python classify_stop_job.py BATCH RECIPE-OPTIONS...``.

Every worker then stops after the same update (the one that closes the window of that
micro-batch) and writes its checkpoint, at the same place on every run.
"""
import os
import signal
import sys

from gluonkit.callbacks import Callback
from gluonkit.recipes import classify, common


class SignalAt(Callback):
    """SIGTERM to this process after micro-batch ``batch`` of the second epoch, on rank 0."""

    def __init__(self, batch):
        self.batch = batch

    def on_batch_end(self, state):
        if state.trainer.rank == 0 and state.epoch == 1 and state.batch == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    batch = int(sys.argv[1])
    common.run_command("gluonkit.recipes.classify", classify.parse_args,
                       lambda args: classify.train(args, [SignalAt(batch)]), sys.argv[2:])
