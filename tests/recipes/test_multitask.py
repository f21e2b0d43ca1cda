"""gluonkit.recipes.multitask on a tiny budget: above-chance heads, same result on any devices,
the outputs of fit, exact resume after a stop in mid-epoch, the best checkpoint exported."""
import csv
import json
import os
import signal
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

import gluonkit.data
from gluonkit.callbacks import Callback
from gluonkit.params import select
from gluonkit.train.checkpoint import Checkpoint
from gluonkit.recipes import multitask as recipe

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "recipes", "multitask.py")

# 3 epochs over 480 images, batch 32. Over seeds 0-15 the worst test accuracies measured were
# digit 0.80, parity 0.83, aux 0.69 (chance: 0.10, 0.50, 0.50); the bars leave a margin.
TINY = ["--epochs", "3", "--train-size", "480", "--batch-size", "32"]
ABOVE = {"digit": 0.5, "parity": 0.7, "aux": 0.6}
TEST_IMAGES = 359
pytestmark = pytest.mark.filterwarnings("ignore:Skipping")  # the Trainer's note: aux left alone


def exported_arrays(path):
    """The arrays of an exported parameter file, in file order (names carry Gluon's block
    counters, which differ from one build of the network to the next)."""
    return [array.asnumpy() for array in mx.nd.load(str(path)).values()]


def run(*argv, callbacks=()):
    return recipe.train(recipe.parse_args(["--no-progress", *argv]), callbacks=callbacks)


def digits_test_set():
    test_set = gluonkit.data.digits(train=False)
    return (np.stack([image for image, _ in test_set]),
            np.array([label for _, label in test_set]))


def digits_validation_set():
    """The validation split: 10% of every digit of the training images, carved with seed 0."""
    from gluonkit.recipes.datasets import dataset_labels, stratified_split

    train = gluonkit.data.digits(train=True)
    _, held = stratified_split(dataset_labels(train), 0.1, seed=0)
    return (np.stack([train[int(i)][0] for i in held]),
            np.array([train[int(i)][1] for i in held]))


def head_accuracies(net, images, labels):
    digit, parity, aux = (o.asnumpy().argmax(axis=1) for o in net(mx.nd.array(images)))
    return {"digit": np.mean(digit == labels), "parity": np.mean(parity == labels % 2),
            "aux": np.mean(aux == (labels >= 5))}


def test_tiny_run_beats_chance_agrees_across_devices_and_writes_its_outputs(tmp_path, capsys):
    out = tmp_path / "one"
    one = run(*TINY, "--ctx", "cpu:0", "--hybridize", "--out", str(out))
    accuracy = one["test_accuracy"]
    exported, report = capsys.readouterr().out.strip().split("\n")
    epoch, history = one["export"]["epoch_trained"], one["history"]["val_digit_accuracy"]
    assert report.startswith("test accuracy: " + ", ".join(
        f"{head} {accuracy[head]:.3f}" for head in ("digit", "parity", "aux"))
        + f" on 359 images of the test split, by the model exported from epoch {epoch} (3 epochs")
    assert exported == (f"exported epoch {epoch}, val_digit_accuracy {history[epoch - 1]:.4f} "
                        f"(the last epoch, 3: {history[-1]:.4f}): {out / 'model-symbol.json'}")
    two = recipe.train(recipe.parse_args(TINY + ["--ctx", "cpu:0,cpu:1", "--no-hybridize",
                                                "--out", ""]))
    assert "epoch 1/3" in capsys.readouterr().err  # the progress bars
    assert set(accuracy) == set(ABOVE)
    val_images = len(digits_validation_set()[1])
    for head, bar in ABOVE.items():
        assert isinstance(accuracy[head], float) and accuracy[head] > bar, (head, accuracy[head])
        # same seed, same batches: 2 devices imperative = 1 device hybridized, up to a
        # couple of validation images whose prediction float32 rounding may tip
        np.testing.assert_allclose(one["history"][f"val_{head}_accuracy"],
                                   two["history"][f"val_{head}_accuracy"], atol=2 / val_images)
    assert two["export"] is None

    saved = json.loads((out / "args.json").read_text())
    assert saved["ctx"] == "cpu:0" and saved["hybridize"] is True
    assert saved["epochs"] == 3 and saved["train_size"] == 480 and saved["val_fraction"] == 0.1
    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["epoch"]) for row in rows] == [1, 2, 3]
    for head in ("digit", "parity", "aux"):       # each head, on train and validation batches
        assert 0 < float(rows[-1][f"val_{head}_accuracy"]) <= 1
        assert 0 < float(rows[-1][f"{head}_accuracy"]) <= 1
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"])
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"

    # the exported model is the best checkpoint by validation digit accuracy, whose figures
    # on the validation split are the history's, counted by hand; the test figures are its own
    val_digit = [float(row["val_digit_accuracy"]) for row in rows]
    assert epoch == 1 + val_digit.index(max(val_digit))
    best = recipe.MultiTaskNet()
    best.initialize()
    ckpt = Checkpoint(out / "checkpoints")
    assert ckpt.load(best, best=True)["epoch"] == epoch
    for head, value in head_accuracies(best, *digits_validation_set()).items():
        assert value == pytest.approx(float(rows[epoch - 1][f"val_{head}_accuracy"]), abs=1e-9)
    images, labels = digits_test_set()
    for head, value in head_accuracies(best, images, labels).items():
        assert value == pytest.approx(accuracy[head], abs=1e-9), head
    exported = mx.gluon.SymbolBlock.imports(str(out / "model-symbol.json"), ["data"],
                                            str(out / "model-0000.params"))
    for got, want in zip(exported(mx.nd.array(images)), best(mx.nd.array(images))):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-6)
    metadata = json.loads((out / "model.json").read_text())
    assert [o["name"] for o in metadata["outputs"]] == ["digit", "parity", "aux"]
    before = exported_arrays(out / "model-0000.params")
    (out / "model-0000.params").unlink()
    again = run("--out", str(out), "--export")
    assert again["export"]["epoch_trained"] == one["export"]["epoch_trained"]
    for got, want in zip(exported_arrays(out / "model-0000.params"), before, strict=True):
        np.testing.assert_array_equal(got, want)


class StopAt(Callback):
    """Sends this process SIGINT after batch ``batch`` of epoch ``epoch`` (both from 1)."""

    def __init__(self, epoch, batch):
        self.epoch, self.batch = epoch, batch

    def on_batch_end(self, state):
        if (state.epoch + 1, state.batch) == (self.epoch, self.batch):
            os.kill(os.getpid(), signal.SIGINT)


def test_resume_after_a_stop_in_mid_epoch_equals_an_uninterrupted_run(tmp_path):
    # 15 batches per epoch; the aux head trains on batches 3, 6, ...: the stop after batch 5
    # of epoch 2 falls inside a window, so the resumed run must pick the heads by position
    straight = run(*TINY, "--out", str(tmp_path / "a"))
    with pytest.raises(KeyboardInterrupt, match=r"after 1 epoch\(s\) and 5 update\(s\)$"):
        run(*TINY, "--out", str(tmp_path / "b"), callbacks=[StopAt(2, 5)])
    assert not (tmp_path / "b" / "model.json").exists()
    resumed = run(*TINY, "--out", str(tmp_path / "b"), "--resume")

    assert resumed["test_accuracy"] == straight["test_accuracy"]
    for key, values in straight["history"].items():
        if key not in ("time", "samples_per_sec"):
            assert resumed["history"][key] == values, key
    ours, theirs = select(resumed["net"]), select(straight["net"])
    assert list(ours) == list(theirs) and "aux.weight" in ours
    for name, param in ours.items():
        np.testing.assert_array_equal(param.data().asnumpy(), theirs[name].data().asnumpy(),
                                      err_msg=name)
    assert resumed["export"]["epoch_trained"] == straight["export"]["epoch_trained"]
    for got, want in zip(exported_arrays(tmp_path / "b" / "model-0000.params"),
                         exported_arrays(tmp_path / "a" / "model-0000.params"), strict=True):
        np.testing.assert_array_equal(got, want)
    with open(tmp_path / "b" / "history.csv") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [1, 2, 3]


def test_head_schedule_trains_aux_on_every_nth_update_only():
    schedule = recipe.HeadSchedule(every=3)
    assert [len(schedule.heads(i)) for i in range(7)] == [2, 2, 3, 2, 2, 3, 2]
    with pytest.raises(TypeError, match="state"):   # fit passes the run's state; a bare call cannot
        schedule(recipe.MultiTaskNet(), (mx.nd.zeros((2, 1, 8, 8)), mx.nd.zeros(2)), [mx.cpu()])
    with pytest.raises(ValueError, match=r"every \(.*\) must be a positive integer, got 0"):
        recipe.HeadSchedule(every=0)
    with pytest.raises(ValueError, match=r"accumulate \(the steps of an update\) must be a positive integer, "
                                         r"got 0"):
        recipe.HeadSchedule(every=3, accumulate=0)


def test_command_line_entry_point(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run([sys.executable, SCRIPT, "--epochs", "1", "--train-size", "64",
                           "--out", str(tmp_path), "--no-progress"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("test accuracy: digit ")
    assert "epoch 1/1: loss" in done.stderr          # the summary line, through logging
    assert (tmp_path / "model-symbol.json").exists()


def test_config_file_sets_defaults_and_flags_win(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"epochs": 7, "lr": 0.05, "ctx": "cpu:0,cpu:1"}))
    args = recipe.parse_args(["--config", str(config), "--lr", "0.2"])
    assert (args.epochs, args.lr, args.ctx) == (7, 0.2, "cpu:0,cpu:1")
    assert args.out == os.path.join("runs", "multitask")
    config.write_text(json.dumps({"epoch": 7}))
    with pytest.raises(SystemExit):
        recipe.parse_args(["--config", str(config)])


@pytest.mark.parametrize("argv", [["--ctx", "cpu0"], ["--ctx", "tpu:0"], ["--epochs", "-1"],
                                  ["--aux-every", "-1"], ["--missing-labels", "1"], ["--missing-labels", "-0.1"],
                                  ["--resume", "--out", ""],
                                  ["--export", "--out", ""]])
def test_bad_options_are_rejected(argv, capsys):
    with pytest.raises(SystemExit):
        recipe.parse_args(argv)
    assert argv[0] in capsys.readouterr().err


def test_missing_labels_are_seeded_and_each_lacks_the_parity_or_the_aux_label():
    data = gluonkit.data.digits()
    masks = recipe.MissingLabels(data, 0.5, seed=3)
    again = recipe.MissingLabels(data, 0.5, seed=3)
    np.testing.assert_array_equal(masks.has_aux, again.has_aux)
    missing = (masks.has_parity == 0) | (masks.has_aux == 0)
    assert not ((masks.has_parity == 0) & (masks.has_aux == 0)).any()   # never both
    assert abs(missing.mean() - 0.5) < 0.05 and 0.3 < (masks.has_aux == 0).mean() / missing.mean() < 0.7
    image, digit, has_parity, has_aux = masks[7]
    assert digit == data[7][1] and (has_parity, has_aux) == (masks.has_parity[7], masks.has_aux[7])


def test_missing_labels_train_every_head_normalized_by_its_own_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    history = run("--epochs", "2", "--train-size", "160", "--batch-size", "32", "--missing-labels", "0.6",
                  "--out", "")["history"]
    for epoch in range(2):
        heads = [history[f"loss_{head}"][epoch] for head in ("digit", "parity", "aux")]
        assert all(0 < value < 5 for value in heads)
        assert history["loss"][epoch] == pytest.approx(sum(heads))
    assert history["loss"][1] < history["loss"][0]
    # the counts by head against each head's samples: a batch's counts are its labelled samples
    batch = [mx.nd.zeros((4, 1, 8, 8)), mx.nd.arange(4), mx.nd.array([1, 0, 1, 1]), mx.nd.array([0, 0, 1, 1])]
    assert recipe.LabelledHeads.head_counts(batch) == {"digit": 4, "parity": 3.0, "aux": 2.0}


def test_missing_labels_training_accuracy_counts_only_the_samples_that_carry_the_label(tmp_path, monkeypatch):
    # a learning rate of 0: the network the epoch ends with is the one every batch ran, so the
    # history's training accuracy is NumPy's accuracy of that network on the training images
    from gluonkit.recipes.datasets import split_off

    monkeypatch.chdir(tmp_path)
    result = run("--epochs", "1", "--train-size", "160", "--batch-size", "25", "--missing-labels", "0.6",
                 "--lr", "0", "--momentum", "0", "--wd", "0", "--ctx", "cpu:0,cpu:1", "--out", "")
    train_set = split_off(gluonkit.data.digits(train=True), 0.1, 0)[0].take(160)
    flags = recipe.MissingLabels(train_set, 0.6, seed=0)
    images = np.stack([image for image, _ in train_set])
    labels = np.array([label for _, label in train_set])
    targets = {"digit": labels, "parity": labels % 2, "aux": labels >= 5}
    labelled = {"digit": np.ones(len(labels), bool), "parity": flags.has_parity == 1, "aux": flags.has_aux == 1}
    outputs = dict(zip(recipe.HEADS, (o.asnumpy() for o in result["net"](mx.nd.array(images)))))
    for head in recipe.HEADS:
        right = outputs[head].argmax(axis=1) == targets[head]
        expected = right[labelled[head]].mean()
        if head != "digit":   # the unlabelled samples would move it: the test can tell
            assert abs(right.mean() - expected) > 1e-3
        assert result["history"][f"{head}_accuracy"][0] == pytest.approx(expected, abs=1e-9), head
