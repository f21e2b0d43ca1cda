"""gluonkit.recipes.classify end to end on a tiny budget: outputs, exact resume, devices, options."""
import csv
import json
import logging
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
import requests

from gluonkit.data import digits
from gluonkit.train.checkpoint import Checkpoint

from gluonkit.params import select
from gluonkit.recipes import common
from gluonkit.recipes import classify as recipe
from gluonkit.recipes.datasets import (dataset_labels, load_dataset, stratified_indices,
                                       stratified_split)
from gluonkit.recipes.models import build_model, small_cnn

from conftest import ROOT, StopAt

SCRIPT = os.path.join(ROOT, "recipes", "classify.py")


def run(tmp_path, *argv):
    return recipe.train(recipe.parse_args(["--no-progress", "--out", str(tmp_path), *argv]))


def history_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_defaults():
    args = recipe.parse_args([])
    assert (args.dataset, args.model, args.ctx, args.optimizer, args.lr_schedule) == \
        ("digits", "cnn", "cpu:0", "sgd", "cosine")
    assert (args.epochs, args.batch_size, args.accumulate, args.out) == \
        (12, 64, 1, os.path.join("runs", "classify"))


def digits_at(dataset, indices):
    """The images and labels of ``dataset`` at ``indices``, stacked as NumPy arrays."""
    return (np.stack(a) for a in zip(*[dataset[int(i)] for i in indices]))


def accuracy_of_export(out, x, y):
    """The accuracy on ``(x, y)`` of the model exported in ``out``, loaded by MXNet alone."""
    model = mx.gluon.SymbolBlock.imports(str(out / "model-symbol.json"), ["data"],
                                         str(out / "model-0000.params"))
    return np.mean(model(mx.nd.array(x)).argmax(axis=1).asnumpy() == y)


def test_the_export_is_chosen_on_validation_images_and_tested_once_on_test_images(tmp_path,
                                                                                  capsys):
    result = run(tmp_path, "--limit", "96", "--epochs", "3", "--batch-size", "32", "--lr", "0.5")
    printed = capsys.readouterr().out.strip().splitlines()
    rows = history_csv(tmp_path / "history.csv")
    assert list(rows[0])[:6] == ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr"]
    scores = [float(row["val_accuracy"]) for row in rows]
    epoch = result["export"]["epoch_trained"]
    assert scores[epoch - 1] == max(scores)
    # the validation split: 10% of every digit of the training images (seed 0), then --limit's
    # 96 of them; val_accuracy of the exported epoch is the exported model's on those, by hand
    train = digits(train=True)
    labels = dataset_labels(train)
    _, held = stratified_split(labels, 0.1, seed=0)
    val = held[stratified_indices(labels[held], 96, seed=0)]
    assert np.bincount(labels[val]).min() >= 9
    assert accuracy_of_export(tmp_path, *digits_at(train, val)) == \
        pytest.approx(scores[epoch - 1], abs=1e-6)
    # the test split is measured once, on the export, and printed last
    test = digits(train=False)
    x, y = digits_at(test, stratified_indices(dataset_labels(test), 96, seed=0))
    assert result["test_accuracy"] == pytest.approx(accuracy_of_export(tmp_path, x, y), abs=1e-6)
    assert printed[-1] == (f"test accuracy: {result['test_accuracy']:.4f} on 96 images of the "
                           f"test split, by the model exported from epoch {epoch} (3 epochs, "
                           f"{result['seconds']:.1f} s)")
    saved = json.loads((tmp_path / "args.json").read_text())
    assert (saved["limit"], saved["epochs"], saved["val_fraction"]) == (96, 3, 0.1)
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_without_a_validation_split_the_last_epoch_is_exported_and_tested(tmp_path, capsys):
    result = run(tmp_path, "--limit", "64", "--epochs", "2", "--batch-size", "32",
                 "--val-fraction", "0")
    assert "val_accuracy" not in result["history"] and result["export"]["epoch_trained"] == 2
    test = digits(train=False)
    x, y = digits_at(test, stratified_indices(dataset_labels(test), 64, seed=0))
    assert result["test_accuracy"] == pytest.approx(accuracy_of_export(tmp_path, x, y), abs=1e-6)
    assert "by the model exported from epoch 2 (2 epochs" in capsys.readouterr().out
    for bad in ("1", "-0.1", "nan", "a"):
        with pytest.raises(SystemExit):
            recipe.parse_args(["--val-fraction", bad])
        assert "--val-fraction" in capsys.readouterr().err


def test_without_out_the_final_network_is_tested(capsys):
    result = recipe.train(recipe.parse_args(["--no-progress", "--out", "", "--limit", "32",
                                             "--epochs", "1"]))
    assert result["export"] is None and 0 <= result["test_accuracy"] <= 1
    assert "on 32 images of the test split, by the final network (1 epochs" in \
        capsys.readouterr().out


def test_resume_equals_an_uninterrupted_run(tmp_path):
    tiny = ["--limit", "96", "--batch-size", "32"]
    straight = run(tmp_path / "a", *tiny, "--epochs", "3")
    run(tmp_path / "b", *tiny, "--epochs", "1")
    resumed = run(tmp_path / "b", *tiny, "--epochs", "3", "--resume")
    assert resumed["test_accuracy"] == straight["test_accuracy"]
    for key in ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr"):
        assert resumed["history"][key] == straight["history"][key], key


def test_a_mid_epoch_resume_under_another_batch_size_says_which_to_pass(tmp_path, capsys):
    tiny = ["--no-progress", "--out", str(tmp_path), "--limit", "200", "--epochs", "2"]
    with pytest.raises(KeyboardInterrupt):       # Ctrl-C after 3 batches of 32
        recipe.train(recipe.parse_args([*tiny, "--batch-size", "32"]), callbacks=[StopAt(0, 3)])
    saved = Checkpoint(tmp_path / "checkpoints").paths
    args_json = (tmp_path / "args.json").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        recipe.main([*tiny, "--resume", "--batch-size", "64"])
    assert refused.value.code == 2
    assert (f"--batch-size 64 differs from the run in {tmp_path}, trained with 32 (its args.json); "
            "a resumed run goes on as it was trained: drop --batch-size") in capsys.readouterr().err
    assert Checkpoint(tmp_path / "checkpoints").paths == saved
    assert (tmp_path / "args.json").read_text() == args_json
    recipe.main([*tiny, "--resume", "--batch-size", "32"])
    assert [int(row["epoch"]) for row in history_csv(tmp_path / "history.csv")] == [1, 2]


def test_two_contexts_accumulating_equal_one_context_with_the_same_micro_batches(tmp_path):
    """Global batches of 32 in micro-batches of 8 per device: 2 devices x 8 samples, 2 steps per
    update == 1 device, steps of 8, 4 per update."""
    tiny = ["--limit", "96", "--epochs", "2", "--out", "", "--batch-size", "32", "--micro-batch", "8"]
    two = recipe.train(recipe.parse_args([*tiny, "--ctx", "cpu:0,cpu:1", "--no-progress"]))
    one = recipe.train(recipe.parse_args([*tiny, "--ctx", "cpu:0", "--no-progress"]))
    np.testing.assert_allclose(two["history"]["loss"], one["history"]["loss"], rtol=1e-4)
    np.testing.assert_allclose(two["history"]["accuracy"], one["history"]["accuracy"])
    assert two["history"]["loss"][1] < two["history"]["loss"][0]


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_config_file_sets_defaults_and_the_command_line_wins(tmp_path, suffix):
    config = {"epochs": 3, "batch-size": 16, "lr": 0.05, "hybridize": True, "progress": False}
    path = tmp_path / f"config.{suffix}"
    if suffix == "json":
        path.write_text(json.dumps(config))
    else:
        path.write_text("".join(f"{k}: {str(v).lower()}\n" for k, v in config.items()))
    args = recipe.parse_args(["--config", str(path), "--epochs", "1"])
    assert (args.epochs, args.batch_size, args.lr, args.hybridize, args.progress) == \
        (1, 16, 0.05, True, False)


def test_option_errors(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"batchsize": 8}))
    with pytest.raises(SystemExit):
        recipe.parse_args(["--config", str(bad)])
    assert "unknown option 'batchsize' (did you mean batch_size?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--resume", "--out", ""])
    assert "--resume reads the checkpoints in --out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--lr-schedule", "linear"])
    with pytest.raises(SystemExit):
        recipe.parse_args(["--multiscale-interval", "3", "--out", ""])   # it would do nothing
    assert capsys.readouterr().err.endswith("error: --multiscale-interval 3 is the batches per size drawn from "
                                            "--multiscale, which is not given; pass --multiscale SIZES too, or "
                                            "drop --multiscale-interval.\n")
    with pytest.raises(ValueError, match="neither 'cnn' nor a GluonCV model-zoo name.*"
                                         "resnet18_v1.*get_model_list"):
        build_model("resnet18-v1", 10)
    with pytest.raises(ValueError, match="--dataset 'mnist' is not one of"):
        load_dataset("mnist", str(tmp_path), 32)


def test_parse_ctx():
    assert common.parse_ctx("cpu:0,cpu:1") == common.parse_ctx("cpu:0,1") == [mx.cpu(0), mx.cpu(1)]
    assert common.parse_ctx("cpu") == [mx.cpu(0)]
    with pytest.raises(ValueError, match="cannot read 'tpu:0'"):
        common.parse_ctx("tpu:0")
    with pytest.raises(ValueError, match="names a device twice"):
        common.parse_ctx("cpu:0,cpu:0")
    if mx.context.num_gpus() == 0:
        with pytest.raises(ValueError, match="asks for GPUs but 0 are visible"):
            common.parse_ctx("gpu:0,1")


def test_lr_schedules():
    # 4 epochs of 5 updates, 1 warm-up epoch: 15 scheduled updates after 5 warm-up ones
    step = common.lr_schedule("step", 0.1, 4, 1, 5)
    assert [step.learning_rate(t) for t in (0, 4, 5, 11, 12, 16)] == pytest.approx(
        [0.0, 0.08, 0.1, 0.1, 0.01, 0.001])
    cosine = common.lr_schedule("cosine", 0.1, 4, 1, 5)
    assert [cosine.learning_rate(t) for t in (5, 12, 19)] == pytest.approx([0.1, 0.05, 0.0])
    poly = common.lr_schedule("poly", 0.1, 4, 0, 5)
    assert poly.learning_rate(5) == pytest.approx(0.1 * (1 - 5 / 19) ** 2)
    assert common.lr_schedule("none", 0.1, 4, 0, 5) is None
    assert common.lr_schedule("none", 0.1, 4, 1, 5).learning_rate(9) == 0.1


def test_gluoncv_model(tmp_path):
    result = run(tmp_path, "--model", "cifar_resnet20_v1", "--limit", "32", "--epochs", "1",
                 "--batch-size", "16", "--hybridize")
    assert type(result["net"]).__name__ == "CIFARResNetV1"
    assert result["net"](mx.nd.zeros((1, 1, 8, 8))).shape == (1, 10)


def test_cifar10_offline_fails_with_a_clear_message(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise requests.exceptions.ConnectionError("Name or service not known")

    monkeypatch.setattr(mx.gluon.data.vision.datasets, "download", offline)
    with pytest.raises(RuntimeError, match="downloading it failed.*--dataset digits"):
        run(tmp_path, "--dataset", "cifar10", "--data-dir", str(tmp_path / "cifar"))


def write_images(directory, classes, per_class, seed):
    import cv2

    rng = np.random.RandomState(seed)
    for c in classes:
        os.makedirs(directory / c, exist_ok=True)
        for i in range(per_class):
            image = rng.randint(0, 255, (10, 12, 3), dtype=np.uint8)
            cv2.imwrite(str(directory / c / f"{i}.png"), image)


def test_imagefolder_and_recordio_datasets(tmp_path):
    write_images(tmp_path / "folder" / "train", "abc", 4, seed=0)
    write_images(tmp_path / "folder" / "val", "abc", 2, seed=1)
    result = run(tmp_path / "out1", "--dataset", f"imagefolder:{tmp_path / 'folder'}",
                 "--image-size", "8", "--epochs", "1", "--batch-size", "4")
    assert result["history"]["epoch"] == [1]
    assert result["net"](mx.nd.zeros((1, 3, 8, 8))).shape == (1, 3)

    rec = mx.recordio.MXIndexedRecordIO(str(tmp_path / "d.idx"), str(tmp_path / "d.rec"), "w")
    rng = np.random.RandomState(2)
    for i in range(20):
        header = mx.recordio.IRHeader(0, float(i % 4), i, 0)
        rec.write_idx(i, mx.recordio.pack_img(header, rng.randint(0, 255, (9, 9, 3), dtype=np.uint8),
                                              img_fmt=".png"))
    rec.close()
    result = run(tmp_path / "out2", "--dataset", f"rec:{tmp_path / 'd.rec'}",
                 "--image-size", "8", "--epochs", "1", "--batch-size", "6")
    assert result["net"](mx.nd.zeros((1, 3, 8, 8))).shape == (1, 4)       # 4 classes found
    with pytest.raises(FileNotFoundError, match="its .idx index"):
        load_dataset(f"rec:{tmp_path / 'missing.rec'}", "", 8)


def test_command_line_entry_point(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, SCRIPT, "--limit", "64", "--epochs", "1", "--out",
                           str(tmp_path), "--no-progress"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "test accuracy: " in done.stdout
    assert "epoch 1/1: loss" in done.stderr          # the summary line, through logging


def test_multiscale_trains_each_batch_at_one_of_the_sizes(tmp_path):
    train, (test,) = recipe.make_loaders(digits(), [digits(train=False)], 32, [12, 16, 20], 1, 32, 4,
                                         0, 0)
    sizes = [x.shape[2:] for x, _ in train]
    assert set(sizes) == {(12, 12), (16, 16), (20, 20)}
    assert sum(x.shape[0] for x, _ in train) == len(digits())
    assert {x.shape[2:] for x, _ in test} == {(20, 20)}
    result = run(tmp_path, "--multiscale", "12,16,20", "--epochs", "1", "--limit", "128",
                 "--batch-size", "16", "--hybridize")
    assert result["history"]["epoch"] == [1] and 0 <= result["test_accuracy"] <= 1


def test_images_of_their_own_sizes_are_bucketed(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gluonkit")
    import cv2

    rng = np.random.RandomState(3)
    for split, per_class in (("train", 6), ("val", 2)):
        for c in "ab":
            os.makedirs(tmp_path / "folder" / split / c, exist_ok=True)
            for i in range(per_class):
                height, width = rng.randint(8, 20, size=2)
                cv2.imwrite(str(tmp_path / "folder" / split / c / f"{i}.png"),
                            rng.randint(0, 255, (height, width, 3), dtype=np.uint8))
    data = load_dataset(f"imagefolder:{tmp_path / 'folder'}", "", 0)
    train, _ = recipe.make_loaders(data.train, [data.val, data.test], 4, None, 1, 0, 2, 0, 0)
    shapes = {x.shape[2:] for x, _ in train}
    assert 1 <= len(shapes) <= 2 and all(h % 4 == 0 and w % 4 == 0 for h, w in shapes)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Batches in")]
    buckets = train.batch_sampler.sampler.buckets          # the samples seeded: SeededSamples
    assert logged == [f"Batches in {len(buckets)} shapes: " + ", ".join(
        "x".join(map(str, s)) for s in buckets.shapes) + "."]
    result = run(tmp_path / "out", "--dataset", f"imagefolder:{tmp_path / 'folder'}",
                 "--image-size", "0", "--buckets", "2", "--epochs", "1", "--batch-size", "4", "--hybridize")
    assert result["history"]["epoch"] == [1]


def test_epochs_0_evaluates_saves_and_exports(tmp_path, capsys):
    result = run(tmp_path, "--limit", "40", "--epochs", "0")
    assert result["history"].get("epoch", []) == []
    assert "test accuracy: " in capsys.readouterr().out
    assert (tmp_path / "model-symbol.json").exists() and Checkpoint(tmp_path / "checkpoints").latest


def test_unknown_model_is_refused_while_parsing(capsys):
    with pytest.raises(SystemExit):
        recipe.parse_args(["--model", "resnet18-v1"])
    err = capsys.readouterr().err
    assert "neither 'cnn' nor a GluonCV model-zoo name (close: resnet18_v1" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--pretrained"])
    assert "--pretrained needs a GluonCV model-zoo --model" in capsys.readouterr().err


def test_export_option_exports_the_best_checkpoint(tmp_path):
    """--export rebuilds the network from the best checkpoint: it predicts like the model
    the training run exported, and like the network loaded from that checkpoint."""
    tiny = ["--limit", "64", "--batch-size", "16"]
    run(tmp_path, *tiny, "--epochs", "2")
    x = mx.nd.array(np.stack([digits(train=False)[i][0] for i in range(20)]))

    def exported():
        block = mx.gluon.SymbolBlock.imports(str(tmp_path / "model-symbol.json"), ["data"],
                                             str(tmp_path / "model-0000.params"))
        return block(x).asnumpy()

    first = exported()
    for name in ("model-symbol.json", "model-0000.params", "model.json"):
        (tmp_path / name).unlink()
    result = run(tmp_path, *tiny, "--export")
    assert result["export"]["epoch_trained"] in (1, 2)
    np.testing.assert_array_equal(exported(), first)
    net = small_cnn(10)
    net.initialize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    Checkpoint(tmp_path / "checkpoints").load(net, best=True)
    np.testing.assert_allclose(first, net(x).asnumpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="no checkpoint in .* to export"):
        run(tmp_path / "empty", *tiny, "--export")


def test_label_smoothing_and_no_wd_on_bias(tmp_path):
    from gluonkit.recipes.classify import _SmoothedLoss

    pred, label = mx.nd.array([[2.0, 0.5, -1.0]]), mx.nd.array([0])
    log_p = mx.nd.log_softmax(pred).asnumpy()[0]
    expected = -(0.9 * log_p[0] + 0.05 * log_p[1] + 0.05 * log_p[2])
    assert _SmoothedLoss(3, 0.1)(pred, label).asscalar() == pytest.approx(expected, rel=1e-6)
    net = small_cnn(3)
    changed = recipe.no_wd_on_bias(net)
    assert changed and all(n.endswith(("beta", "gamma", "bias")) for n in changed)
    assert {p.wd_mult for n, p in net.collect_params().items() if n.endswith("weight")} == {1.0}
    result = run(tmp_path, "--limit", "64", "--epochs", "1", "--label-smoothing", "0.1",
                 "--no-wd-on-bias")
    assert np.isfinite(result["history"]["loss"][0])


def test_pretrained_file_starts_from_those_weights(tmp_path):
    from gluoncv import model_zoo

    source = model_zoo.get_model("cifar_resnet20_v1", pretrained=False)
    source.initialize(mx.init.Xavier())
    source(mx.nd.zeros((1, 3, 8, 8)))
    source.save_parameters(str(tmp_path / "w.params"))
    write_images(tmp_path / "folder" / "train", "abc", 4, seed=0)
    result = run(tmp_path / "out", "--dataset", f"imagefolder:{tmp_path / 'folder'}",
                 "--image-size", "8", "--epochs", "1", "--batch-size", "6", "--model",
                 "cifar_resnet20_v1", "--pretrained-file", str(tmp_path / "w.params"), "--lr", "0")
    net = result["net"]
    trained, loaded = select(net.features), select(source.features)
    assert set(trained) == set(loaded)
    for name, param in trained.items():        # lr 0: the weights as loaded
        if "running" not in name:              # (BatchNorm's statistics follow the data)
            np.testing.assert_array_equal(param.data().asnumpy(), loaded[name].data().asnumpy(), name)
    assert net(mx.nd.zeros((2, 3, 8, 8))).shape == (2, 3)


def test_amp_on_a_cpu_context_or_cpu_only_build_fails_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit):
        recipe.parse_args(["--amp", "--out", str(tmp_path / "a")])
    assert "--amp: mixed precision (AMP) runs on GPUs only" in capsys.readouterr().err
    if not mx.runtime.Features().is_enabled("CUDA"):
        with pytest.raises(SystemExit):
            recipe.parse_args(["--amp", "--ctx", "gpu:0", "--out", str(tmp_path / "a")])
        assert "CPU-only" in capsys.readouterr().err    # --ctx itself finds no GPU
    args = recipe.parse_args(["--no-progress", "--out", str(tmp_path / "a"), "--limit", "32"])
    args.amp = True                     # as a caller of train() could set it
    with pytest.raises(ValueError, match="GPUs only"):
        recipe.train(args)
    assert not os.path.exists(tmp_path / "a")
