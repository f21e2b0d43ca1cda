"""The tally of a fit run: labels out of the outputs' classes, which MXNet's pick would clip
silently, are refused within one settle."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from conftest import TWO_CPUS
from gluonkit.callbacks import Callback
from gluonkit.train.loop import fit
from gluonkit.train.tally import Tally
from gluonkit.trainer import Trainer


class Batches(Callback):
    """Counts the batches that finished."""

    def __init__(self):
        self.done = 0

    def on_batch_end(self, state):
        self.done += 1


def run(labels, loss=None, ctx=(mx.cpu(),), batch_size=2, metrics=None, outputs=3):
    labels = np.asarray(labels, dtype=np.float32)
    x = np.random.RandomState(0).randn(len(labels), 4).astype(np.float32)
    net = gluon.nn.Dense(outputs, in_units=4)
    net.initialize(ctx=list(ctx))
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, labels), batch_size=batch_size)
    counter = Batches()
    loss = gluon.loss.SoftmaxCrossEntropyLoss() if loss is None else loss
    try:
        return fit(net, loss, trainer, loader, epochs=1, ctx=list(ctx), metrics=metrics,
                   callbacks=[counter], progress=False), counter.done
    except ValueError as err:
        err.batches_done = counter.done
        raise


@pytest.mark.parametrize("bad, ctx", [(7, [mx.cpu()]), (-1, [mx.cpu()]), (3, TWO_CPUS), (np.nan, TWO_CPUS)],
                         ids=["7", "-1", "3-on-the-second-device", "nan"])
def test_a_label_beyond_the_classes_is_refused(bad, ctx):
    labels = [0, 1, 2, 1, 0, 2, 1, bad]          # the last sample: on the last device
    with pytest.raises(ValueError, match=rf"fit: a label {bad:g} reached the loss, but the outputs have 3 "
                                         r"classes along axis -1 \(labels 0..2\), and MXNet's pick would "
                                         r"clip it to a class silently; relabel the data 0..2"):
        run(labels, ctx=ctx, batch_size=4)


def test_it_is_refused_within_one_settle():
    labels = np.tile([0, 1, 2, 1], 20)             # 40 batches of 2
    labels[3] = 7                                  # batch 1
    with pytest.raises(ValueError, match="a label 7 reached the loss") as info:
        run(labels, metrics="acc")                 # the tally settles every METRIC_BATCHES batches
    assert info.value.batches_done < Tally.METRIC_BATCHES


@pytest.mark.parametrize("loss, labels", [
    (gluon.loss.SoftmaxCrossEntropyLoss(), [0, 1, 2, 2]),                          # in range
    (gluon.loss.L2Loss(), [7.0, -3.0, 0.5, 2.0]),                                  # not classes
])
def test_labels_that_are_not_picked_out_of_range_train(loss, labels):
    history, done = run(labels, loss=loss, outputs=3 if not isinstance(loss, gluon.loss.L2Loss) else 1)
    assert done == 2 and np.isfinite(history["loss"][0])


def test_one_hot_labels_are_not_checked():
    labels = np.eye(3, dtype=np.float32)[[0, 1, 2, 2]] * 7      # sparse_label=False: weights, not indices
    x = np.random.RandomState(0).randn(4, 4).astype(np.float32)
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    history = fit(net, gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False),
                  Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
                  gluon.data.DataLoader(gluon.data.ArrayDataset(x, labels), batch_size=2),
                  epochs=1, progress=False)
    assert np.isfinite(history["loss"][0])
