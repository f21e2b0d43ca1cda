"""Callbacks written as a GluonCV script's loop body survive a stop and resume.

GluonCV's ``train_cifar10.py`` decays the rate at the start of chosen epochs,
``trainer.set_learning_rate(trainer.learning_rate * lr_decay)``: relative to the current
rate, so running it twice for one epoch decays twice. Ported as ``on_epoch_begin`` with
``ModelCheckpoint(resume=True)``, a stop in such an epoch must resume to the weights and
rates of a run never stopped.
"""
import os
import signal

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import params_of
from gluonkit.callbacks import Callback, LRSchedule, ModelCheckpoint


class LRDecay(Callback):
    """train_cifar10.py's decay as its loop wrote it, moved into ``on_epoch_begin``."""

    def __init__(self, lr_decay_epoch=(2, 3), lr_decay=0.1):
        self.lr_decay_epoch, self.lr_decay = lr_decay_epoch, lr_decay
        self.began = []

    def on_epoch_begin(self, state):
        self.began.append(state.epoch)
        if state.epoch in self.lr_decay_epoch:
            state.trainer.set_learning_rate(state.trainer.learning_rate * self.lr_decay)


class TermAt(Callback):
    """A real SIGTERM to this process after batch ``batch`` of epoch ``epoch`` (0-based)."""

    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, state):
        if (state.epoch, state.batch) == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


class Watch(Callback):
    """Records what the hooks saw of a resume."""

    def __init__(self):
        self.resumed_at = []
        self.at_train_begin = []

    def on_train_begin(self, state):
        self.at_train_begin.append(state.resumed)

    def on_resume(self, state):
        self.resumed_at.append((state.resumed, state.position, state.trainer.learning_rate))


def train(directory, *callbacks, resume=False, epochs=4):
    np.random.seed(0)
    mx.random.seed(1 if not resume else 7)    # a resumed run's own initial weights must not matter
    rng = np.random.RandomState(3)
    data = gluon.data.ArrayDataset(rng.rand(96, 10).astype("float32"),
                                   rng.randint(0, 4, 96).astype("float32"))
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu", in_units=10), gluon.nn.Dense(4, in_units=16))
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9,
                                                             "wd": 1e-4})
    history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer,
                           gluon.data.DataLoader(data, batch_size=16, shuffle=True), epochs=epochs,
                           metrics="acc", progress=False,
                           callbacks=[*callbacks, ModelCheckpoint(directory, resume=resume)])
    return params_of(net), history


@pytest.mark.parametrize("stop_batch", [1, 6], ids=["early", "last-batch"])
def test_relative_lr_decay_on_epoch_begin_resumes_bit_for_bit(tmp_path, stop_batch):
    straight, history = train(tmp_path / "straight", LRDecay())
    np.testing.assert_allclose(history["lr"], [0.1, 0.1, 0.01, 0.001], rtol=1e-12)
    with pytest.raises(SystemExit):
        train(tmp_path / "run", LRDecay(), TermAt(2, stop_batch))
    decay = LRDecay()
    resumed, resumed_history = train(tmp_path / "run", decay, resume=True)
    assert decay.began == [3]                  # epoch 2 began before the stop: it does not again
    assert resumed_history["lr"] == history["lr"]
    assert resumed_history["loss"] == history["loss"]
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


def test_callbacks_can_tell_that_the_run_resumed(tmp_path):
    watch = Watch()
    with pytest.raises(SystemExit):
        train(tmp_path, watch, LRDecay(), TermAt(2, 3))
    assert watch.at_train_begin == [None] and watch.resumed_at == []
    watch = Watch()
    train(tmp_path, watch, LRDecay(), resume=True)
    assert watch.at_train_begin == [None]      # ModelCheckpoint, after it, restores the run
    (resumed, position, lr), = watch.resumed_at
    assert resumed == position == (2, 3)
    assert lr == pytest.approx(0.01)           # the rate epoch 2 trains at, from the checkpoint


def test_a_run_resumed_at_an_epochs_end_begins_the_next_epoch(tmp_path):
    train(tmp_path, LRDecay(), epochs=2)
    decay, watch = LRDecay(), Watch()
    _, history = train(tmp_path, decay, watch, resume=True)
    assert decay.began == [2, 3]
    assert [r for r, _, _ in watch.resumed_at] == [(2, 0)]
    np.testing.assert_allclose(history["lr"], [0.1, 0.1, 0.01, 0.001], rtol=1e-12)


def test_lr_schedule_placed_before_the_checkpoint_resumes_at_its_step(tmp_path):
    """LRSchedule runs its on_train_begin before ModelCheckpoint restores the step: its
    on_resume sets the rate of the restored step."""
    schedule = lambda: LRSchedule(mx.lr_scheduler.FactorScheduler(step=5, factor=0.5, base_lr=0.1))
    straight, history = train(tmp_path / "straight", schedule())
    with pytest.raises(SystemExit):
        train(tmp_path / "run", schedule(), TermAt(1, 2))
    resumed, resumed_history = train(tmp_path / "run", schedule(), resume=True)
    assert resumed_history["lr"] == history["lr"]
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
