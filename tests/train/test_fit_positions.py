"""Where FitState.epoch counts from, against the history and the checkpoint names."""
import os

import numpy as np
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import Callback, ModelCheckpoint


class Positions(Callback):
    def __init__(self):
        self.seen = []

    def on_epoch_begin(self, state):
        self.seen.append(("begin", state.epoch))

    def on_epoch_end(self, state):
        self.seen.append(("end", state.epoch, state.logs["epoch"]))


def test_state_epoch_is_0_based_where_the_history_and_checkpoints_count_from_1(tmp_path):
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(
        np.random.RandomState(0).randn(8, 3).astype("float32"), np.arange(8) % 2), batch_size=4)
    positions = Positions()
    history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(),
                           gluonkit.Trainer(net.collect_params(), "sgd"), data, epochs=2,
                           callbacks=[positions, ModelCheckpoint(tmp_path)], progress=False)
    assert positions.seen == [("begin", 0), ("end", 0, 1), ("begin", 1), ("end", 1, 2)]
    assert history["epoch"] == [1, 2]
    assert sorted(os.listdir(tmp_path)) == ["000001-epoch0001.ckpt", "000002-epoch0002.ckpt"]
