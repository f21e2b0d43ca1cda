"""The commands' habits: options spelled out, close names suggested, failures in one line,
warnings once per run."""
import logging
import subprocess
import sys
import warnings

import pytest

from gluonkit.recipes import classify, detect, multitask, predict

from conftest import CLONE_ENV

RECIPES = [classify, multitask, detect]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("typed, meant", [("--epcohs", "--epochs"), ("--epoch", "--epochs"),
                                          ("--no-progres", "--no-progress")])
def test_a_misspelled_or_abbreviated_option_is_refused_with_the_option_meant(recipe, typed, meant,
                                                                             capsys):
    # argparse took '--epoch 1' for '--epochs 1' (allow_abbrev) and suggested nothing
    with pytest.raises(SystemExit) as stop:
        recipe.parse_args([typed] + ([] if "progres" in typed else ["1"]))
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"unrecognized arguments: {typed}"
                          + ("" if "progres" in typed else " 1") + f" (did you mean {meant}?)")


def test_an_unknown_option_without_a_close_name_gets_no_guess(capsys):
    with pytest.raises(SystemExit):
        classify.parse_args(["--frobnicate"])
    assert capsys.readouterr().err == ("gluonkit-classify: error: unrecognized arguments: --frobnicate "
                                       "(gluonkit-classify --help lists the options)\n")


@pytest.mark.parametrize("parse, argv, line", [
    (classify.parse_args, ["--micro-batch", "80"], "gluonkit-classify: error: --micro-batch 80 is larger than"),
    (multitask.parse_args, ["--micro-batch", "8", "--per-worker-batch"],
     "gluonkit-multitask: error: --micro-batch cuts a global batch"),
    (detect.parse_args, ["--batch-size", "4", "--micro-batch", "8"],
     "gluonkit-detect: error: --micro-batch 8 is larger than the global --batch-size 4"),
    (detect.parse_args, ["--batch-size", "x"], "gluonkit-detect: error: argument --batch-size: expected an integer"),
    (predict.parse_args, ["--model", "m"], "gluonkit-predict: error: the following arguments are required: "
                                           "IMAGE_OR_DIR"),
])
def test_a_refused_option_is_one_line_without_the_usage_block(parse, argv, line, capsys):
    with pytest.raises(SystemExit) as stop:
        parse(argv if parse is predict.parse_args else [*argv, "--out", ""])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith(line) and err.count("\n") == 1, err


def test_a_download_that_fails_is_one_line_without_the_retries(tmp_path):
    # a real download from an address that refuses connections; gluon retries five times
    env = dict(CLONE_ENV, MXNET_GLUON_REPO="http://127.0.0.1:9/")
    result = subprocess.run([sys.executable, "-m", "gluonkit.recipes.classify", "--dataset",
                             "cifar10", "--data-dir", str(tmp_path / "cifar"), "--out", "",
                             "--no-progress"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "retrying" not in result.stdout + result.stderr
    last = result.stderr.strip().splitlines()
    assert last[-1].startswith(f"gluonkit-classify: CIFAR-10 is not in {tmp_path / 'cifar'} and "
                               "downloading it failed (")
    assert last[-1].endswith("or use --dataset digits (embedded, no download).")
    assert result.stdout == ""


def test_the_multitask_recipe_says_once_that_the_aux_head_is_skipped(tmp_path, caplog):
    args = multitask.parse_args(["--epochs", "2", "--train-size", "64", "--batch-size", "32",
                                 "--out", "", "--no-progress"])
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO, "gluonkit"):
        warnings.simplefilter("always")
        multitask.train(args)
    assert [str(w.message) for w in caught if "aux" in str(w.message)] == []
    said = [r.getMessage() for r in caplog.records if "aux head" in r.getMessage()]
    assert said == ["Training on 64 images; the aux head trains on one update in 3, the Trainer "
                    "leaves it unchanged on the others; val_* in the history and the epoch lines "
                    "are on the validation split (143 images), whose val_digit_accuracy chooses "
                    "the checkpoint to export; the test split (359 images) is evaluated once, at "
                    "the end, on the final network (nothing is exported)."]


@pytest.mark.parametrize("argv, message", [
    (["gluonkit.recipes.classify", "--dataset", "cifar"],
     "gluonkit-classify: --dataset 'cifar' is not one of digits, cifar10"),
    (["gluonkit.recipes.detect", "--dataset", "voc"],
     "gluonkit-detect: --dataset 'voc' is not 'shapes', 'voc:DIR'"),
    (["gluonkit.recipes.detect", "--dataset", "rec:only.rec"],
     "gluonkit-detect: --dataset rec:{wrong.parent}/only.rec: pass two files"),
    (["gluonkit.recipes.classify", "--model", "cifar_resnet20_v1", "--pretrained-file", "{wrong}"],
     "gluonkit-classify: --pretrained-file {wrong} does not hold the weights of 'cifar_resnet20_v1'"),
])
def test_an_option_value_that_cannot_be_used_is_one_line(tmp_path, argv, message):
    import mxnet as mx

    wrong = tmp_path / "dense.params"
    dense = mx.gluon.nn.Dense(2, in_units=3)
    dense.initialize()
    dense.save_parameters(str(wrong))
    argv = [part.format(wrong=wrong) for part in argv]
    result = subprocess.run([sys.executable, "-m", *argv, "--epochs", "1", "--out", "",
                             "--no-progress"], capture_output=True, text=True, timeout=300,
                            env=CLONE_ENV, cwd=str(tmp_path))
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(message.format(wrong=wrong)), result.stderr
    assert "Traceback" not in result.stderr
