"""A batch_fn that takes a ``state`` keyword sees where the run is, also after a resume."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import ModelCheckpoint

from conftest import StopAt


def make_net():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    return net


def make_loader():
    rng = np.random.RandomState(1)
    x = rng.rand(20, 4).astype("float32")
    y = rng.randint(0, 3, size=20).astype("float32")
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=4, shuffle=True)


class Recorder:
    """A batch_fn that records (epoch, batch, step) before training on the batch."""

    def __init__(self):
        self.seen = []
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def __call__(self, net, batch, ctx_list, *, state):
        self.seen.append((state.epoch, state.batch, state.step))
        x, y = batch
        return [self.loss(net(x.as_in_context(ctx_list[0])), y.as_in_context(ctx_list[0]))], x.shape[0]




def train(recorder, callbacks=()):
    net = make_net()
    trainer = gluonkit.Trainer(net, "sgd", {"learning_rate": 0.1}, accumulate=2)
    gluonkit.fit(net, None, trainer, make_loader(), epochs=2, batch_fn=recorder,
                 callbacks=list(callbacks), progress=False)
    return net


def test_a_batch_fn_with_a_state_keyword_sees_epoch_batch_and_update():
    recorder = Recorder()
    train(recorder)
    # 5 batches per epoch, one update per 2 batches, the partial window flushed at the epoch's end
    expected = [(0, 0, 0), (0, 1, 0), (0, 2, 1), (0, 3, 1), (0, 4, 2),
                (1, 0, 3), (1, 1, 3), (1, 2, 4), (1, 3, 4), (1, 4, 5)]
    assert recorder.seen == expected


def test_a_resumed_run_gives_the_batch_fn_the_positions_of_a_run_never_stopped(tmp_path):
    straight = Recorder()
    np.random.seed(0)
    train(straight)
    first, resumed = Recorder(), Recorder()
    np.random.seed(0)
    with pytest.raises(KeyboardInterrupt):
        train(first, [StopAt(1, 2), ModelCheckpoint(tmp_path / "ckpt", resume=True)])
    np.random.seed(5)
    train(resumed, [ModelCheckpoint(tmp_path / "ckpt", resume=True)])
    assert first.seen + resumed.seen == straight.seen


def test_a_batch_fn_without_a_state_keyword_is_called_as_before():
    seen = []

    def batch_fn(net, batch, ctx_list):
        seen.append(len(batch[0]))
        x, y = batch
        return [gluon.loss.L2Loss()(net(x), mx.nd.one_hot(y, 3))], x.shape[0]

    net = make_net()
    gluonkit.fit(net, None, gluonkit.Trainer(net, "sgd"), make_loader(), epochs=1,
                 batch_fn=batch_fn, progress=False)
    assert seen == [4, 4, 4, 4, 4]
