"""``fit`` on Horovod ranks: ``python horovod_fit_job.py OUT_DIR``, started by horovodrun.

Each rank trains its own shard of the digits and validates on the whole test split; early
stopping (no val_loss improvement counts, min_delta 10) must stop every rank after the same
epoch, and every rank must reach the end of the program.
"""
import json
import os
import sys

import mxnet as mx
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import EarlyStopping

EPOCHS, PATIENCE = 6, 2


def main(out_dir):
    mx.random.seed(0)
    net = gluon.nn.Dense(10, in_units=64)
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="horovod")
    shard = gluonkit.data.digits().shard(trainer.num_workers, trainer.rank)
    train = gluon.data.DataLoader(shard, batch_size=32, shuffle=True, last_batch="discard")
    val = gluon.data.DataLoader(gluonkit.data.digits(train=False), batch_size=64)
    history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, train, epochs=EPOCHS,
                           val_data=val, metrics="acc", progress=False,
                           callbacks=[EarlyStopping("val_loss", patience=PATIENCE, min_delta=10)])
    with open(os.path.join(out_dir, f"fit{trainer.rank}.json"), "w") as f:
        json.dump({"epochs": history["epoch"], "val_loss": history["val_loss"],
                   "val_accuracy": history["val_accuracy"], "shard": len(shard)}, f)


if __name__ == "__main__":
    main(sys.argv[1])
