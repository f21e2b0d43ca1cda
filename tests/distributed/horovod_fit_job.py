"""``fit`` on Horovod ranks, started by horovodrun: ``python horovod_fit_job.py OUT_DIR [stop]``.

Each rank trains its own shard of the digits. By default it validates on the whole test
split; early stopping (no val_loss improvement counts, min_delta 10) must stop every rank
after the same epoch, and every rank must reach the end of the program.

With ``stop``, rank 0 sends itself SIGTERM after its third batch (both stop after the
fourth); rank 1 gets no signal and takes ``SLOW_END`` seconds in ``on_train_end`` (a
checkpoint that is slow to write), then writes ``OUT_DIR/ended1``. horovodrun ends the other
ranks as soon as one exits, so rank 1 writes that file only if rank 0 waits for it before
leaving ``fit``. Each rank saves its checkpoint (``ModelCheckpoint``) as it stops.
"""
import json
import os
import signal
import sys
import time

import mxnet as mx
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import Callback, EarlyStopping, ModelCheckpoint

EPOCHS, PATIENCE = 6, 2
SLOW_END = 8.0   # more than horovodrun's 5 s between its SIGTERM and its SIGKILL


class _StopAndSlowEnd(Callback):
    def __init__(self, rank, out_dir):
        self.rank, self.out_dir = rank, out_dir

    def on_batch_end(self, state):
        if self.rank == 0 and state.epoch == 0 and state.batch == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_end(self, state):
        if self.rank == 1:
            time.sleep(SLOW_END)
            with open(os.path.join(self.out_dir, "ended1"), "w") as f:
                f.write(f"{state.epoch} {state.batch}")


def main(out_dir, mode):
    mx.random.seed(0)
    net = gluon.nn.Dense(10, in_units=64)
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="horovod")
    shard = gluonkit.data.digits().shard(trainer.num_workers, trainer.rank)
    train = gluon.data.DataLoader(shard, batch_size=32, shuffle=True, last_batch="discard")
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    if mode == "stop":
        gluonkit.fit(net, loss, trainer, train, epochs=EPOCHS, progress=False,
                     callbacks=[ModelCheckpoint(os.path.join(out_dir, "checkpoints")),
                                _StopAndSlowEnd(trainer.rank, out_dir)])
        return
    val = gluon.data.DataLoader(gluonkit.data.digits(train=False), batch_size=64)
    history = gluonkit.fit(net, loss, trainer, train, epochs=EPOCHS,
                           val_data=val, metrics="acc", progress=False,
                           callbacks=[EarlyStopping("val_loss", patience=PATIENCE, min_delta=10)])
    with open(os.path.join(out_dir, f"fit{trainer.rank}.json"), "w") as f:
        json.dump({"epochs": history["epoch"], "val_loss": history["val_loss"],
                   "val_accuracy": history["val_accuracy"], "shard": len(shard)}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "early-stopping")
