"""What ``--resume`` does with a run folder, as a user meets it on the command line: a refused
resume leaves the folder as it was, every option is applied or refused by name, a folder with
no checkpoint is neither resumed nor protected."""
import csv
import json
import logging
import os

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluonkit.recipes import classify

TINY = ["--limit", "32", "--batch-size", "16", "--lr-schedule", "none", "--warmup-epochs", "0"]


def classify_main(*argv):
    """``gluonkit-classify ARGV`` in this process: its exit status, or 0."""
    try:
        classify.main(["--no-progress", *argv])
    except SystemExit as stop:
        return stop.code
    return 0


def tree(directory):
    """Every file under ``directory`` and its bytes."""
    return {os.path.relpath(os.path.join(root, name), directory):
            open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(directory) for name in names}


def history(out):
    with open(os.path.join(out, "history.csv")) as f:
        return [{k: v for k, v in row.items() if k not in ("time", "samples_per_sec")}
                for row in csv.DictReader(f)]


def last_error(capsys):
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    """A run of 2 epochs, made once: copy it before changing it."""
    out = tmp_path_factory.mktemp("run") / "a"
    assert classify_main(*TINY, "--epochs", "2", "--out", str(out)) == 0
    return tree(out)


def materialize(files, out):
    for name, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    return str(out)


def test_a_refused_resume_leaves_the_run_folder_as_it_was_and_names_the_option(
        tmp_path, capsys, two_epochs):
    out = materialize(two_epochs, tmp_path / "a")
    for option, value, was in [("--momentum", "0.0", "0.9"), ("--lr", "0.5", "0.1"),
                               ("--optimizer", "adam", "sgd")]:
        assert classify_main("--out", out, "--resume", "--epochs", "5", option, value) == 2
        assert last_error(capsys) == (
            f"gluonkit-classify: error: {option} {value} differs from the run in {out}, trained "
            f"with {was} (its args.json); a resumed run goes on as it was trained: drop {option}, "
            f"or start a new run with it (--config {os.path.join(out, 'args.json')} {option} ... "
            "--out NEW).")
        assert tree(out) == two_epochs
    # a run whose args.json is gone: the checkpoint refuses the optimizer, and nothing is written
    os.remove(os.path.join(out, "args.json"))
    before = tree(out)
    code = classify_main(*TINY, "--out", out, "--resume", "--epochs", "5", "--momentum", "0.0")
    assert "does not fit the trainer: the state holds a momentum buffer for " in str(code)
    assert "but this SGD has momentum 0; resume with the momentum" in str(code)
    assert tree(out) == before
    # the plain resume still works, and args.json describes the run: --config replays it
    materialize(two_epochs, out)
    assert classify_main("--out", out, "--resume", "--epochs", "3") == 0
    replay = str(tmp_path / "replay")
    assert classify_main("--config", os.path.join(out, "args.json"), "--out", replay) == 0
    assert history(replay) == history(out)


def test_a_resume_that_trains_nothing_says_so_and_changes_nothing(tmp_path, capsys, two_epochs):
    out = materialize(two_epochs, tmp_path / "a")
    for epochs in ("2", "1"):
        assert classify_main("--out", out, "--resume", "--epochs", epochs) == 0
        assert capsys.readouterr().err.strip() == (
            f"gluonkit-classify: the run in {out} has trained 2 epoch(s) and --epochs {epochs} "
            "asks for no more: nothing was trained or changed. Pass --epochs 3 or more to train "
            "it further, or --export to export it again.")
        assert tree(out) == two_epochs


def test_a_run_stopped_after_its_last_checkpoint_but_before_its_export_is_exported_by_resume(tmp_path, two_epochs):
    exported = ("model-symbol.json", "model-0000.params", "model.json")
    out = materialize({name: data for name, data in two_epochs.items() if name not in exported}, tmp_path / "a")
    reference = materialize(two_epochs, tmp_path / "b")
    assert classify_main("--out", out, "--resume", "--epochs", "2") == 0
    files = tree(out)
    arrays = [list(mx.nd.load(os.path.join(run, "model-0000.params")).values()) for run in (out, reference)]
    assert len(arrays[0]) == len(arrays[1]) > 0
    for got, want in zip(*arrays):   # the model the run exported (its layers' names count from this process's)
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
    assert {name: files[name] for name in two_epochs if name.startswith("checkpoints")} == \
        {name: data for name, data in two_epochs.items() if name.startswith("checkpoints")}


def test_resume_of_a_folder_without_a_checkpoint_is_refused(tmp_path, capsys, two_epochs):
    typo = tmp_path / "typo"
    assert classify_main(*TINY, "--out", str(typo), "--resume") == 2
    assert last_error(capsys) == (
        f"gluonkit-classify: error: --resume: {typo} holds no checkpoint to continue from (none "
        f"in {typo / 'checkpoints'}); check --out, or start the run without --resume.")
    assert not typo.exists()
    # checkpoints gone: history.csv and the export are not trained over from scratch
    out = materialize(two_epochs, tmp_path / "a")
    for name in os.listdir(os.path.join(out, "checkpoints")):
        os.remove(os.path.join(out, "checkpoints", name))
    before = tree(out)
    assert classify_main("--out", out, "--resume", "--epochs", "3") == 2
    assert "holds no checkpoint to continue from" in last_error(capsys)
    assert tree(out) == before


def image_folder(data):
    """DIR/train and DIR/val: two classes of three random 36x36 PNGs each."""
    rng = np.random.RandomState(0)
    for split in ("train", "val"):
        for name in ("a", "b"):
            os.makedirs(data / split / name)
            for i in range(3):
                cv2.imwrite(str(data / split / name / f"{i}.png"),
                            rng.randint(0, 256, (36, 36, 3), dtype=np.uint8))
    return data


def test_a_run_that_failed_before_its_first_checkpoint_does_not_block_the_retry(tmp_path, capsys):
    data = image_folder(tmp_path / "photos")
    (data / "train" / "a" / "broken.png").write_bytes(b"not an image")
    out = tmp_path / "run"
    argv = ["--dataset", f"imagefolder:{data}", "--batch-size", "4", "--epochs", "1",
            "--out", str(out)]
    assert "broken.png cannot be decoded" in str(classify_main(*argv))
    assert sorted(os.listdir(out)) == ["args.json", "checkpoints"]      # no checkpoint yet
    (data / "train" / "a" / "broken.png").unlink()
    # a network that cannot take the images: one line, before the folder is touched
    code = classify_main(*argv, "--model", "inceptionv3", "--image-size", "32")
    assert code == ("gluonkit-classify: --model inceptionv3 cannot take 32x32 images: its layers "
                    "shrink them to nothing; pass a larger --image-size (the size it was "
                    "designed for, e.g. 299 for inceptionv3, 224 for ImageNet networks) or "
                    "another --model.")
    assert json.loads((out / "args.json").read_text())["model"] == "cnn"
    assert classify_main(*argv) == 0        # the corrected retry, without --overwrite
    assert len(os.listdir(out / "checkpoints")) >= 1


def test_a_run_made_with_a_relative_dataset_path_resumes_from_another_directory(
        tmp_path, monkeypatch, caplog):
    image_folder(tmp_path / "photos")
    monkeypatch.chdir(tmp_path)
    assert classify_main("--dataset", "imagefolder:photos", "--batch-size", "4", "--epochs", "1",
                         "--out", "run") == 0
    recorded = json.loads((tmp_path / "run" / "args.json").read_text())
    assert recorded["dataset"] == f"imagefolder:{tmp_path / 'photos'}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with caplog.at_level(logging.INFO, logger="gluonkit"):
        assert classify_main("--out", str(tmp_path / "run"), "--resume", "--epochs", "2",
                             "--hybridize") == 0
    assert [row["epoch"] for row in history(tmp_path / "run")] == ["1", "2"]
    # an option that may change on a resume is applied, and said so
    assert f"--hybridize True applies from here on (the run in {tmp_path / 'run'} had False)." \
        in caplog.messages
    assert json.loads((tmp_path / "run" / "args.json").read_text())["hybridize"] is True


def test_a_damaged_checkpoint_is_named_with_the_one_the_command_falls_back_on(tmp_path, two_epochs):
    out = materialize(two_epochs, tmp_path / "a")
    first, latest = sorted(os.path.join(out, "checkpoints", name)
                           for name in os.listdir(os.path.join(out, "checkpoints"))
                           if name != "best.ckpt")
    with open(latest, "r+b") as f:
        f.truncate(100)
    code = str(classify_main("--out", out, "--resume", "--epochs", "3"))
    assert code.startswith(f"gluonkit-classify: Checkpoint {latest!r} is corrupted or truncated")
    assert code.endswith(f"; delete it (rm {latest}), and the same command goes on from the "
                         f"checkpoint before it, {first}.")
    assert "load(..., path=...)" not in code and "\n" not in code
    os.remove(latest)
    assert classify_main("--out", out, "--resume", "--epochs", "3") == 0
    assert [row["epoch"] for row in history(out)] == ["1", "2", "3"]
