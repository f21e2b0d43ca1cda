"""Callbacks: which checkpoints are kept, when training stops, the learning rates used, logs, plots."""
import csv
import json
import math
import os
import re

import matplotlib
import matplotlib.image
import mxnet as mx
import numpy as np
import pytest
from gluoncv.utils import LRScheduler
from mxnet import autograd, gluon

from conftest import params_of
from gluonkit.callbacks import (Callback, EarlyStopping, HistoryLogger, LRSchedule,
                                      ModelCheckpoint, PlotCurves)
from gluonkit.train.checkpoint import Checkpoint
from gluonkit.train.loop import fit
from gluonkit.trainer import Trainer

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def make_net(seed=1):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=5, activation="relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier())
    return net


def make_loader(n=48, batch_size=8):
    rng = np.random.RandomState(2)
    x = rng.randn(n, 5).astype("float32")
    y = rng.randint(0, 3, n).astype("int32")
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=batch_size)


class Score(Callback):
    """Put ``scores[epoch]`` into the epoch logs under 'score'."""

    def __init__(self, scores):
        self.scores = scores

    def on_epoch_end(self, state):
        state.logs["score"] = self.scores[state.epoch]


class Snapshots(Callback):
    """Record the parameters at the end of every epoch."""

    def __init__(self):
        self.params = {}

    def on_epoch_end(self, state):
        self.params[state.epoch + 1] = params_of(state.net)


def saved_epochs(directory):
    return [int(re.search(r"epoch(\d+)", p).group(1)) for p in Checkpoint(directory).paths]


def test_checkpoint_every_n_epochs_the_best_and_the_last(tmp_path):
    net = make_net()
    snaps = Snapshots()
    ckpt = Checkpoint(tmp_path, keep=10)
    scores = [0.5, 0.4, 0.6, 0.3, 0.2, 0.1]       # best at epochs 1 and 3
    fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}), make_loader(),
        epochs=6, progress=False,
        callbacks=[snaps, Score(scores), ModelCheckpoint(ckpt, every=4, monitor="score")])
    assert saved_epochs(tmp_path) == [1, 3, 4, 6]
    other = make_net(seed=7)
    assert ckpt.load(other, best=True)["epoch"] == 3
    for k, v in params_of(other).items():
        np.testing.assert_array_equal(v, snaps.params[3][k])


def test_monitor_must_name_a_log_key(tmp_path):
    net = make_net()
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    with pytest.raises(KeyError, match="Cannot monitor 'val_accuracy'.*'loss'"):
        fit(net, LOSS, trainer, make_loader(), epochs=1, progress=False,
            callbacks=[ModelCheckpoint(tmp_path, monitor="val_accuracy")])
    with pytest.raises(ValueError, match=r"every \(epochs between saves\) must be a positive integer"):
        ModelCheckpoint(tmp_path, every=0)


@pytest.mark.parametrize("scores, kwargs, epochs_run", [
    ([3, 2, 2.5, 2.1, 2.2, 1.0, 0.5, 0.1], {"patience": 3, "mode": "min"}, 5),
    ([3, 2.8, 2.6, 2.4, 1.0, 0.5], {"patience": 2, "min_delta": 0.5, "mode": "min"}, 3),
    ([0.1, 0.3, 0.2, 0.25, 0.4, 0.1], {"patience": 2, "mode": "max"}, 4),
])
def test_early_stopping(scores, kwargs, epochs_run):
    net = make_net()
    history = fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
                  make_loader(), epochs=len(scores), progress=False,
                  callbacks=[Score(scores), EarlyStopping("score", **kwargs)])
    assert history["epoch"] == list(range(1, epochs_run + 1))


def test_early_stopping_patience_survives_a_resume(tmp_path):
    scores = [1.0] * 10                 # never improves after epoch 1: stop after epoch 4

    def run(epochs, resume):
        net = make_net()
        trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        return fit(net, LOSS, trainer, make_loader(), epochs=epochs, progress=False,
                   callbacks=[Score(scores), EarlyStopping("score", patience=3, mode="min"),
                              ModelCheckpoint(tmp_path, resume=resume)])

    assert run(3, False)["epoch"] == [1, 2, 3]
    assert run(10, True)["epoch"] == [1, 2, 3, 4]


class LRSeen(Callback):
    """The learning rate each update used (put it before LRSchedule)."""

    def __init__(self):
        self.rates, self.steps = [], 0

    def on_batch_end(self, state):
        if state.step > self.steps:
            self.rates.append(state.trainer.learning_rate)
            self.steps = state.step


def cosine(t, n, base, final):
    return final + (base - final) * (1 + math.cos(math.pi * t / n)) / 2


@pytest.mark.parametrize("kind", ["mxnet", "gluoncv"])
def test_lr_schedule_warmup_then_scheduler_per_update(kind):
    updates, warmup = 6, 2                     # 2 epochs of 3 updates of 2 batches of 8
    if kind == "mxnet":
        scheduler = mx.lr_scheduler.CosineScheduler(max_update=updates - warmup, base_lr=0.4,
                                                    final_lr=0.01)
        after = [cosine(t, updates - warmup, 0.4, 0.01) for t in range(1, updates - warmup + 1)]
    else:   # gluoncv's holds the last rate from niters - 1 on
        scheduler = LRScheduler("cosine", base_lr=0.4, target_lr=0.01, niters=updates - warmup)
        after = [cosine(min(t, updates - warmup - 1), updates - warmup - 1, 0.4, 0.01)
                 for t in range(1, updates - warmup + 1)]
    # schedulers count updates from 1, as an optimizer calls them; the warm-up ramps to the first
    expected = [0.1, 0.1 + (after[0] - 0.1) / 2] + after
    seen = LRSeen()
    net = make_net()
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0}, accumulate=2)
    fit(net, LOSS, trainer, make_loader(), epochs=2, progress=False,
        callbacks=[seen, LRSchedule(scheduler, warmup_steps=warmup, warmup_begin_lr=0.1)])
    np.testing.assert_allclose(seen.rates, expected, rtol=1e-12)

    ref = make_net()                           # the same updates by hand, with these rates
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 1.0})
    x, y = (np.concatenate(a) for a in zip(*[(b[0].asnumpy(), b[1].asnumpy()) for b in make_loader()]))
    for t in range(updates):
        begin = (t % 3) * 16
        with autograd.record():
            loss = LOSS(ref(mx.nd.array(x[begin:begin + 16])), mx.nd.array(y[begin:begin + 16]))
        loss.backward()
        ref_trainer.set_learning_rate(expected[t])
        ref_trainer.step(16)
    for k, v in params_of(ref).items():
        np.testing.assert_allclose(params_of(net)[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("make,at_base", [   # updates at the base rate: MXNet decays after n
    (lambda n: mx.lr_scheduler.MultiFactorScheduler(step=[n, 2 * n], factor=0.1, base_lr=1.0), 5),
    (lambda n: mx.lr_scheduler.FactorScheduler(step=n, factor=0.5, base_lr=1.0), 5),
    (lambda n: LRScheduler("step", base_lr=1.0, niters=4 * n, step_iter=[n, 2 * n], step_factor=0.1), 4),
], ids=["multifactor", "factor", "gluoncv-step"])
def test_lr_schedule_equals_the_same_scheduler_given_to_the_optimizer(make, at_base):
    """A script's lr_scheduler= moved into LRSchedule: the same updates at the same rates."""
    n = 5                                      # 6 updates per epoch (no accumulation), 2 epochs
    runs = []
    for in_optimizer in (True, False):
        net, seen = make_net(), LRSeen()
        optimizer_params = {"learning_rate": 1.0, "momentum": 0.9}
        if in_optimizer:
            optimizer_params["lr_scheduler"] = make(n)
        trainer = Trainer(net.collect_params(), "sgd", optimizer_params)
        fit(net, LOSS, trainer, make_loader(), epochs=2, progress=False,
            callbacks=[seen] + ([] if in_optimizer else [LRSchedule(make(n))]))
        runs.append((params_of(net), seen.rates))
    (given, given_rates), (moved, rates) = runs
    assert rates == given_rates and next(i for i, r in enumerate(rates) if r < 1.0) == at_base
    for name, value in given.items():
        np.testing.assert_array_equal(moved[name], value, err_msg=name)


def test_lr_schedule_refuses_a_second_scheduler():
    net = make_net()
    trainer = Trainer(net.collect_params(), "sgd",
                      {"learning_rate": 0.1, "lr_scheduler": mx.lr_scheduler.FactorScheduler(2)})
    with pytest.raises(ValueError, match="already has an lr_scheduler"):
        fit(net, LOSS, trainer, make_loader(), epochs=1, progress=False, callbacks=[LRSchedule(0.1)])
    with pytest.raises(TypeError, match="scheduler must be"):
        LRSchedule("cosine")


def test_history_logger_writes_csv_and_json_equal_to_the_history(tmp_path):
    net = make_net()
    history = fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
                  make_loader(), epochs=3, val_data=make_loader(16), metrics="acc", progress=False,
                  callbacks=[HistoryLogger(tmp_path / "h.csv"),
                             HistoryLogger(tmp_path / "out" / "h.json")])
    with open(tmp_path / "h.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(history)
    for key, values in history.items():
        assert [float(r[key]) for r in rows] == values
    assert json.loads((tmp_path / "out" / "h.json").read_text()) == history
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        HistoryLogger(tmp_path / "h.txt")


def test_history_logger_writes_missing_values_as_json_null(tmp_path):
    class State:
        history = {"epoch": [1, 2, 3], "val_loss": [math.nan, 0.5, math.inf]}

    logger = HistoryLogger(tmp_path / "h.json")
    logger.on_epoch_end(State())

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    written = json.loads((tmp_path / "h.json").read_text(), parse_constant=refuse)
    assert written == {"epoch": [1, 2, 3], "val_loss": [None, 0.5, None]}


def test_plot_curves_png_has_a_panel_per_quantity_and_keeps_the_backend(tmp_path):
    backend = matplotlib.get_backend()
    net = make_net()
    fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}), make_loader(),
        epochs=2, val_data=make_loader(16), metrics="acc", progress=False,
        callbacks=[PlotCurves(tmp_path / "curves.png")])
    image = matplotlib.image.imread(tmp_path / "curves.png")
    assert image.shape[:2] == (round(3.2 * 90), 3 * 4 * 90)     # loss, accuracy, lr
    assert matplotlib.get_backend() == backend


class Batches(Callback):
    """Count the batches trained."""

    def __init__(self):
        self.count = 0

    def on_batch_end(self, state):
        self.count += 1


@pytest.mark.parametrize("make", [lambda p: ModelCheckpoint(p / "checkpoints"),
                                  lambda p: HistoryLogger(p / "history.csv"),
                                  lambda p: PlotCurves(p / "curves.png")],
                         ids=["ModelCheckpoint", "HistoryLogger", "PlotCurves"])
def test_a_destination_that_cannot_be_a_directory_is_refused_before_training(tmp_path, make):
    (tmp_path / "taken").write_text("a file where a directory should go")
    net = make_net()
    before = params_of(net)
    batches = Batches()
    with pytest.raises(NotADirectoryError, match="taken.*pass a directory"):
        fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
            make_loader(), epochs=1, progress=False, callbacks=[batches, make(tmp_path / "taken")])
    assert batches.count == 0
    for k, v in params_of(net).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize("make, name", [(HistoryLogger, "history.csv"), (PlotCurves, "curves.png")])
def test_a_file_destination_that_is_a_directory_is_refused_before_training(tmp_path, make, name):
    (tmp_path / name).mkdir()
    net = make_net()
    batches = Batches()
    with pytest.raises(IsADirectoryError) as refused:
        fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
            make_loader(), epochs=1, progress=False, callbacks=[batches, make(tmp_path / name)])
    assert refused.value.strerror == (f"{make.__name__} cannot write {str(tmp_path / name)!r}: "
                                      "it is a directory; remove it or pass another path.")
    assert batches.count == 0 and os.listdir(tmp_path / name) == []


def test_a_resume_that_adds_validation_keeps_one_entry_per_epoch(tmp_path):
    """Epochs trained before val_data was given have NaN under the val_ keys: every list of
    the history, history.csv and the plot keep one entry per epoch, aligned with 'epoch'."""
    def run(epochs, val_data, directory, writers=()):
        net = make_net()
        trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        return fit(net, LOSS, trainer, make_loader(), epochs=epochs, val_data=val_data,
                   metrics="acc", progress=False,
                   callbacks=[ModelCheckpoint(directory, resume=True), *writers])

    straight = run(4, make_loader(16), tmp_path / "straight")
    run(2, None, tmp_path / "resumed")
    history = run(4, make_loader(16), tmp_path / "resumed",
                  [HistoryLogger(tmp_path / "h.csv"), PlotCurves(tmp_path / "curves.png")])
    assert {len(v) for v in history.values()} == {4}
    assert history["epoch"] == [1, 2, 3, 4]
    assert history["loss"] == straight["loss"]
    assert np.isnan(history["val_loss"][:2]).all() and np.isnan(history["val_accuracy"][:2]).all()
    assert history["val_loss"][2:] == straight["val_loss"][2:]
    assert history["val_accuracy"][2:] == straight["val_accuracy"][2:]
    with open(tmp_path / "h.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4]
    assert [float(r["val_loss"]) for r in rows][2:] == straight["val_loss"][2:]
    assert (tmp_path / "curves.png").exists()


def test_model_checkpoint_refuses_a_plain_gluon_trainer_before_training(tmp_path):
    net = make_net()
    batches = Batches()
    with pytest.raises(TypeError, match="trainer must be a gluonkit.Trainer.*got Trainer"):
        fit(net, LOSS, gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
            make_loader(), epochs=1, progress=False, callbacks=[batches, ModelCheckpoint(tmp_path)])
    assert batches.count == 0


def test_callback_arguments_are_checked_when_made():
    cases = [
        (lambda: EarlyStopping(monitor=None), TypeError, "monitor must be a key of the epoch logs"),
        (lambda: ModelCheckpoint("ckpt", monitor=3), TypeError, "monitor must be a key.*got 3"),
        (lambda: EarlyStopping(min_delta=math.nan), ValueError, "min_delta .*finite number, got nan"),
        (lambda: EarlyStopping(min_delta="0.1"), TypeError, "min_delta .*got '0.1'"),
        (lambda: LRSchedule(-0.1), ValueError,
         r"scheduler \(a constant learning rate\) must be a finite number >= 0"),
        (lambda: LRSchedule(math.inf), ValueError, "finite number >= 0.*inf"),
        (lambda: LRSchedule(0.1, warmup_begin_lr=math.nan), ValueError, "warmup_begin_lr .*nan"),
    ]
    for make, error, message in cases:
        with pytest.raises(error, match=message):
            make()


class Logged(Callback):
    """Put ``values[epoch]`` into the epoch logs under ``key``."""

    def __init__(self, key, values):
        self.key, self.values = key, values

    def on_epoch_end(self, state):
        state.logs[self.key] = self.values[state.epoch]


@pytest.mark.parametrize("key, lower_is_better", [
    ("val_loss", True), ("val_mae", True), ("val_rmse", True), ("val_mse", True),
    ("val_cross-entropy", True), ("val_perplexity", True), ("val_error", True),
    ("val_accuracy", False), ("val_top_k_accuracy_5", False), ("val_mIoU", False),
    ("val_mAP", False), ("val_f1", False)])
def test_auto_mode_knows_which_metrics_are_errors(tmp_path, key, lower_is_better):
    """'auto' minimizes losses and errors (MAE, RMSE, cross-entropy, ...), maximizes scores:
    with an error metric improving every epoch, 'max' would keep the worst epoch as best."""
    values = [0.9, 0.7, 0.5, 0.3, 0.2] if lower_is_better else [0.2, 0.3, 0.5, 0.7, 0.9]
    net = make_net()
    ckpt = Checkpoint(tmp_path, keep=10)
    history = fit(net, LOSS, Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}),
                  make_loader(), epochs=5, progress=False,
                  callbacks=[Logged(key, values), EarlyStopping(key, patience=1),
                             ModelCheckpoint(ckpt, monitor=key)])
    assert history["epoch"] == [1, 2, 3, 4, 5]                 # improved every epoch: no stop
    assert ckpt.load(make_net(seed=7), best=True)["epoch"] == 5
