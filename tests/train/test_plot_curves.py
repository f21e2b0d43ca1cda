"""PlotCurves draws the learning rate per batch (a warm-up shows) and names the held-out split."""
import matplotlib.image
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import LRSchedule, PlotCurves


def _fit(tmp_path, callbacks, accumulate=1):
    mx.random.seed(1)
    net = gluon.nn.Dense(3, in_units=5)
    net.initialize()
    rng = np.random.RandomState(2)
    data = gluon.data.ArrayDataset(rng.randn(32, 5).astype("float32"),
                                   rng.randint(0, 3, 32).astype("int32"))
    loader = gluon.data.DataLoader(data, batch_size=8)            # 4 batches per epoch
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                               accumulate=accumulate)
    return gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, loader, epochs=3,
                        val_data=loader, metrics="acc", progress=False, callbacks=callbacks)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_learning_rate_is_recorded_after_every_batch(tmp_path, accumulate):
    plot = PlotCurves(tmp_path / "curves.png", held_out="test")
    history = _fit(tmp_path, [LRSchedule(0.1, warmup_steps=5), plot], accumulate)
    # after batch b of epoch e the schedule has set the rate of the next update, the
    # warm-up's 0.1 * t / 5 for t updates done so far, then 0.1 (by hand, not by LRSchedule)
    expected = []
    for e in range(3):
        for b in range(1, 5):
            updates = (4 * e + b) // accumulate
            expected.append((e + b / 4, 0.1 * min(updates, 5) / 5))
    assert [x for x, _ in plot.learning_rates] == [x for x, _ in expected]
    np.testing.assert_allclose([lr for _, lr in plot.learning_rates],
                               [lr for _, lr in expected], rtol=1e-12)
    assert history["lr"] == [lr for x, lr in expected if x == int(x)]
    image = matplotlib.image.imread(tmp_path / "curves.png")
    assert image.shape[:2] == (round(3.2 * 90), 3 * 4 * 90)          # loss, accuracy, lr


class _FileAtEpochEnd(gluonkit.callbacks.Callback):
    """Whether ``path`` exists at the end of each epoch (after the callbacks before it)."""

    def __init__(self, path):
        self.path, self.seen = path, []

    def on_epoch_end(self, state):
        self.seen.append(self.path.exists())


@pytest.mark.parametrize("min_seconds, drawn", [(0, [True, True, True]), (3600, [False, False, False])])
def test_epochs_are_drawn_once_min_seconds_have_passed_and_always_when_training_ends(tmp_path, min_seconds, drawn):
    path = tmp_path / "curves.png"
    files = _FileAtEpochEnd(path)
    _fit(tmp_path, [PlotCurves(path, min_seconds=min_seconds), files])
    assert files.seen == drawn
    assert matplotlib.image.imread(path).shape[:2] == (round(3.2 * 90), 3 * 4 * 90)   # drawn at the end


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (float("inf"), ValueError), ("10", TypeError)])
def test_min_seconds_must_be_a_finite_number_of_seconds(tmp_path, bad, error):
    with pytest.raises(error, match=rf"min_seconds \(the seconds between drawings\) must be a finite number >= 0.0, "
                                    rf"got {bad!r}"):
        PlotCurves(tmp_path / "c.png", min_seconds=bad)


def test_held_out_must_be_a_name(tmp_path):
    with pytest.raises(TypeError, match="held_out must be a non-empty str.*got None"):
        PlotCurves(tmp_path / "c.png", held_out=None)


def test_held_out_values_without_a_training_twin_get_a_panel(tmp_path):
    # a detector's history: mAP and AP per class on the validation set only (they were
    # not drawn at all), next to the training loss and the learning rate
    history = {"epoch": [1, 2], "loss": [84.0, 30.0], "val_circle": [0.1, 0.3],
               "val_square": [0.2, 0.4], "val_mAP": [0.15, 0.35], "lr": [0.01, 0.005],
               "samples_per_sec": [10.0, 11.0], "time": [3.0, 3.0]}
    PlotCurves(tmp_path / "curves.png").draw(history)
    image = matplotlib.image.imread(tmp_path / "curves.png")
    assert image.shape[:2] == (round(3.2 * 90), 3 * 4 * 90)     # loss, held-out values, lr
