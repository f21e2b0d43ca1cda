"""The recipes' command-line kit: --config files, device lists, thread settings, args.json."""
import csv
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from gluonkit.atomic import writer_place
from gluonkit.recipes import common


def parser():
    p = common.build_parser("test")
    p.add_argument("--epochs", type=common.positive_int, default=3)
    p.add_argument("--schedule", type=common.one_of("cosine", "step"), default="cosine")
    p.add_argument("--sizes", type=common.sizes_type)
    p.add_argument("--ctx", type=common.ctx_type, default="cpu:0")
    p.add_argument("--fast", action="store_true")
    p.add_argument("--no-bars", dest="bars", action="store_false")
    return p


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_config_sets_defaults_through_the_options_types(tmp_path, suffix):
    config = {"epochs": 5, "schedule": "step", "sizes": [8, 12], "fast": True, "bars": False,
              "ctx": "cpu:0,1"}
    path = tmp_path / f"c.{suffix}"
    path.write_text(json.dumps(config) if suffix == "json" else
                    "epochs: 5\nschedule: step\nsizes: [8, 12]\nfast: true\nbars: false\nctx: cpu:0,1\n")
    args = common.parse_with_config(parser(), ["--config", str(path)])
    assert (args.epochs, args.schedule, args.sizes, args.fast, args.bars, args.ctx) == \
        (5, "step", [8, 12], True, False, "cpu:0,1")
    args = common.parse_with_config(parser(), ["--config", str(path), "--epochs", "1"])
    assert args.epochs == 1     # the command line wins


@pytest.mark.parametrize("config, message", [
    ({"epochs": 0}, "must be a positive integer, got 0"),
    ({"schedule": "linear"}, "must be one of 'cosine', 'step'; got 'linear'"),
    ({"fast": "yes"}, "fast is a switch; write true or false"),
    ({"epoch": 2}, "unknown option 'epoch' (did you mean epochs?)"),
    ({"ctx": "tpu:0"}, "cannot read 'tpu:0'"),
])
def test_bad_config_values_are_refused_like_bad_options(tmp_path, capsys, config, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SystemExit):
        common.parse_with_config(parser(), ["--config", str(path)])
    assert message in capsys.readouterr().err


def test_parse_ctx():
    assert common.parse_ctx("cpu:0,cpu:1") == common.parse_ctx("cpu:0,1") == [mx.cpu(0), mx.cpu(1)]
    assert common.parse_ctx("cpu") == [mx.cpu(0)]
    with pytest.raises(ValueError, match="names a device twice"):
        common.parse_ctx("cpu:0,cpu:0")
    if mx.context.num_gpus() == 0:
        with pytest.raises(ValueError, match="asks for GPUs but 0 are visible"):
            common.parse_ctx("gpu:0,1")


def test_save_args_records_the_run_and_replays_it(tmp_path):
    args = common.parse_with_config(parser(), ["--sizes", "4,6", "--epochs", "5", "--no-bars"])
    path = common.save_args(args, str(tmp_path / "out"))
    recorded = {**vars(args), "sizes": [4, 6]}
    del recorded["config"]      # how this command was invoked, not what the run is
    assert json.loads(open(path).read()) == recorded
    replayed = common.parse_with_config(parser(), ["--config", path])
    assert {**vars(replayed), "config": None} == vars(args)


def clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}


def test_importing_a_recipe_leaves_the_environment_alone():
    code = ("import os, gluonkit.recipes.classify, gluonkit.recipes.multitask; "
            "print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('OMP_WAIT_POLICY'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None"]


def test_a_benchmark_that_imported_mxnet_restarts_once_with_the_thread_settings(tmp_path):
    """MXNet reads them when it loads: a benchmark that finds it loaded runs again with them."""
    (tmp_path / "probe.py").write_text(
        "import os, sys\nprint(os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'], "
        "sys.argv[1:], 'mxnet' in sys.modules)\n")
    code = "import mxnet\nfrom gluonkit.recipes import common\ncommon.apply_threads('probe', ['a', 'b'])"
    env = dict(clean_env(), PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(os.sched_getaffinity(0))), "PASSIVE", "['a',", "'b']", "False"]
    env.update(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="ACTIVE")      # set by the user: kept, no restart
    done = subprocess.run([sys.executable, "-c", code + "\nprint('same process')"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert done.stdout.split() == ["same", "process"]


RECIPES = ["classify", "multitask", "detect"]


def recipe(name):
    from importlib import import_module
    return import_module(f"gluonkit.recipes.{name}")


@pytest.mark.parametrize("name, option, value", [
    (name, option, value) for name in RECIPES
    for option, value in [("--lr", "-1"), ("--lr", "nan"), ("--momentum", "inf"), ("--wd", "-0.1"),
                          ("--warmup-epochs", "-2")]
    if not (name == "multitask" and option == "--warmup-epochs")])   # multitask has no warm-up
def test_bad_rates_are_refused_by_the_parser(capsys, name, option, value):
    with pytest.raises(SystemExit) as stop:
        recipe(name).parse_args([option, value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"gluonkit-{name}: error: argument {option}" in err
    assert f"must be a finite number >= 0.0, got {float(value)!r}" in err


@pytest.mark.parametrize("name", RECIPES)
def test_an_out_through_a_file_is_refused_by_the_parser(tmp_path, capsys, name):
    (tmp_path / "taken").write_text("")
    with pytest.raises(SystemExit) as stop:
        recipe(name).parse_args(["--out", str(tmp_path / "taken" / "run")])
    assert stop.value.code == 2
    taken = tmp_path / "taken"
    assert f"--out {taken / 'run'}: {taken} is a file" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["taken"]


@pytest.mark.parametrize("name", ["classify", "multitask"])
def test_export_without_a_checkpoint_is_one_line(tmp_path, name):
    with pytest.raises(SystemExit) as stop:
        recipe(name).main(["--export", "--out", str(tmp_path)])
    assert stop.value.code == (f"gluonkit-{name}: no checkpoint in {tmp_path / 'checkpoints'} "
                               "to export; train first (same --out).")


def test_resuming_from_a_checkpoint_of_another_network_is_one_line(tmp_path):
    classify = recipe("classify")
    tiny = ["--limit", "32", "--batch-size", "16", "--out", str(tmp_path)]
    classify.main(tiny + ["--epochs", "1"])
    saved = sorted(os.listdir(tmp_path / "checkpoints"))
    (tmp_path / "args.json").unlink()   # no record of the run: only the checkpoint can tell
    with pytest.raises(SystemExit) as stop:
        classify.main(tiny + ["--epochs", "2", "--resume", "--model", "cifar_resnet20_v1"])
    message = str(stop.value.code)
    assert message.startswith("gluonkit-classify: Checkpoint ") and "does not match the network" in message
    assert "\n" not in message
    assert sorted(os.listdir(tmp_path / "checkpoints")) == saved   # nothing written over


def classify_main(*argv):
    """``gluonkit-classify ARGV`` in this process: its exit status, or 0."""
    try:
        recipe("classify").main(["--no-progress", *argv])
    except SystemExit as stop:
        return stop.code
    return 0


def tree(directory):
    """Every file under ``directory`` and its bytes."""
    return {os.path.relpath(os.path.join(root, name), directory):
            open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(directory) for name in names}


RUN = ["--limit", "64", "--batch-size", "16", "--lr", "0.05", "--seed", "3", "--lr-schedule",
       "step"]


def test_resume_export_and_replay_reuse_the_options_the_run_recorded(tmp_path, capsys):
    from gluonkit.train.checkpoint import Checkpoint

    straight, part, again = (str(tmp_path / name) for name in ("straight", "part", "again"))
    assert classify_main(*RUN, "--epochs", "2", "--out", straight) == 0
    assert classify_main(*RUN, "--epochs", "1", "--out", part) == 0
    stale = tmp_path / "part" / "checkpoints" / f".tmp-new@{writer_place()}-999999999-0123abcd"
    stale.write_bytes(bytes(100))
    capsys.readouterr()
    # only --out: the recorded --limit, --batch-size, --lr, --seed, ...; --epochs extends the run
    assert classify_main("--out", part, "--resume", "--epochs", "2") == 0
    assert not stale.exists()
    assert history(part) == history(straight)
    assert json.loads(open(os.path.join(part, "args.json")).read()) == \
        json.loads(open(os.path.join(straight, "args.json")).read())
    # an option that changes the data or the network, given again with another value: refused
    before = tree(part)
    assert classify_main("--out", part, "--resume", "--epochs", "3", "--limit", "32") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gluonkit-classify: error: --limit 32 differs from the run in {part}, made with 64 (its "
        "args.json), and changes the network or the data: drop --limit to continue that run, or "
        "pass another --out.")
    assert tree(part) == before
    assert classify_main("--out", part, "--resume", "--epochs", "2", "--limit", "64") == 0
    # --config DIR/args.json replays the run into another folder
    assert classify_main("--config", os.path.join(straight, "args.json"), "--out", again) == 0
    assert history(again) == history(straight)
    for a, b in zip(exported_model(again)[1], exported_model(straight)[1]):
        np.testing.assert_array_equal(a, b)
    assert Checkpoint(os.path.join(again, "checkpoints")).latest.endswith("epoch0002.ckpt")


def history(out):
    with open(os.path.join(out, "history.csv")) as f:
        return [{k: v for k, v in row.items() if k not in ("time", "samples_per_sec")}
                for row in csv.DictReader(f)]


def test_export_with_only_the_out_rebuilds_the_runs_network(tmp_path):
    out = tmp_path / "run"
    assert classify_main("--model", "cifar_resnet20_v1", "--limit", "32", "--batch-size", "16",
                         "--epochs", "1", "--out", str(out)) == 0
    trained = exported_model(out)
    for name in ("model-symbol.json", "model-0000.params", "model.json"):
        (out / name).unlink()
    assert classify_main("--out", str(out), "--export") == 0
    again = exported_model(out)
    # the same metadata but for the digests (the rebuilt network's layer names are in the files)
    assert again[0]["model"] == "cifar_resnet20_v1"
    assert dict(again[0], sha256=None) == dict(trained[0], sha256=None)
    assert len(again[1]) == len(trained[1]) > 60
    for a, b in zip(again[1], trained[1]):
        np.testing.assert_array_equal(a, b)


def exported_model(out):
    """model.json (less the file names) and the arrays of the exported parameters, in order
    (their names carry Gluon's block counters)."""
    meta = json.loads(open(os.path.join(out, "model.json")).read())
    meta.pop("files")
    arrays = mx.nd.load(os.path.join(out, "model-0000.params")).values()
    return meta, [a.asnumpy() for a in arrays]


def test_a_folder_that_holds_a_run_is_not_overwritten_without_overwrite(tmp_path, capsys):
    from gluonkit.train.checkpoint import Checkpoint

    out = tmp_path / "run"
    tiny = ["--limit", "32", "--batch-size", "16", "--out", str(out)]
    assert classify_main(*tiny, "--epochs", "2") == 0
    (out / "notes.txt").write_text("mine")
    before = tree(out)
    capsys.readouterr()
    assert classify_main(*tiny, "--epochs", "1") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gluonkit-classify: error: --out {out} holds a run (args.json, checkpoints/, "
        "history.csv, curves.png, model-symbol.json, model-0000.params, model.json); pass "
        "--resume to continue it, or --overwrite to replace it (or another --out).")
    assert tree(out) == before
    assert classify_main(*tiny, "--epochs", "1", "--overwrite", "--resume") == 2
    assert "--overwrite starts a new run, --resume continues" in capsys.readouterr().err
    assert classify_main(*tiny, "--epochs", "1", "--overwrite") == 0
    assert [os.path.basename(p) for p in Checkpoint(out / "checkpoints").paths] == \
        ["000001-epoch0001.ckpt"]       # the earlier run's epoch 2 is gone
    assert len(history(out)) == 1 and (out / "notes.txt").read_text() == "mine"


def test_the_recipe_says_which_epoch_it_exported_and_its_score_beside_the_last(tmp_path, capsys):
    from gluonkit.data import digits
    from gluonkit.recipes.datasets import dataset_labels, stratified_indices

    out = tmp_path / "run"
    assert classify_main("--limit", "48", "--batch-size", "16", "--lr", "0.5", "--epochs", "4",
                         "--out", str(out)) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    scores = [float(row["val_accuracy"]) for row in history(out)]
    epoch = json.loads((out / "model.json").read_text())["epoch_trained"]
    assert scores[epoch - 1] == max(scores)
    assert printed[-2] == (f"exported epoch {epoch}, val_accuracy {scores[epoch - 1]:.4f} (the "
                           f"last epoch, 4: {scores[-1]:.4f}): {out / 'model-symbol.json'}")
    # the test figure printed last is the exported model's, counted by hand
    test = digits(train=False)
    chosen = stratified_indices(dataset_labels(test), 48, seed=0)
    x, y = (np.stack(a) for a in zip(*[test[int(i)] for i in chosen]))
    model = mx.gluon.SymbolBlock.imports(str(out / "model-symbol.json"), ["data"],
                                         str(out / "model-0000.params"))
    accuracy = np.mean(model(mx.nd.array(x)).argmax(axis=1).asnumpy() == y)
    assert printed[-1].startswith(f"test accuracy: {accuracy:.4f} on 48 images of the test split, "
                                  f"by the model exported from epoch {epoch} (4 epochs, ")


@pytest.mark.parametrize("name, content, message", [
    ("c.yaml", b"epochs: [1, 2\nlr: 0.1\n", "is not valid YAML (expected ',' or ']', but got"),
    ("c.yaml", b"epochs: 2\nlr: \xff\n", "not UTF-8 text (byte 14: b'\\xff'); save it as UTF-8."),
    ("c.json", b'{"epochs": 2, "lr": "\xe9"}', "is not UTF-8 text (byte 21: b'\\xe9')"),
    ("c.yaml", b"multiscale: [&a [1, 1], *a, *a]\n",
     "multiscale must be a value or a list of values, got list."),
])
def test_a_config_that_cannot_be_read_is_one_line_naming_it(tmp_path, capsys, name, content,
                                                             message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SystemExit) as stop:
        recipe("classify").parse_args(["--config", str(path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"gluonkit-classify: error: --config {path}") and message in err[-1]
    assert "Traceback" not in "".join(err)


def test_history_csv_that_is_a_directory_is_refused_before_training(tmp_path):
    (tmp_path / "history.csv").mkdir()
    code = classify_main("--limit", "32", "--epochs", "1", "--out", str(tmp_path))
    assert code == (f"gluonkit-classify: [Errno 21] HistoryLogger cannot write "
                    f"{str(tmp_path / 'history.csv')!r}: it is a directory; remove it or pass "
                    "another path.")
    assert os.listdir(tmp_path / "checkpoints") == []      # no epoch ended


@pytest.mark.parametrize("name, recorded, option, value", [
    ("classify", {"model": "cifar_resnet20_v1", "epochs": 3, "ctx": "gpu:7"}, "--model", "cnn"),
    ("multitask", {"train_size": 64, "epochs": 3, "ctx": "gpu:7"}, "--train-size", "32"),
    ("detect", {"image_size": 96, "epochs": 3, "ctx": "gpu:7"}, "--image-size", "64"),
])
def test_every_recipe_resumes_its_folder_by_path_and_refuses_it_otherwise(tmp_path, capsys, name,
                                                                         recorded, option, value):
    (tmp_path / "args.json").write_text(json.dumps(recorded))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "000001-epoch0001.ckpt").write_bytes(b"")   # only its name is read
    with pytest.raises(SystemExit) as stop:
        recipe(name).parse_args(["--out", str(tmp_path)])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"gluonkit-{name}: error: --out {tmp_path} holds a run (args.json, checkpoints/); pass "
        "--resume to continue it, or --overwrite to replace it (or another --out).")
    # options given again win (a GPU run goes on on the CPU)
    args = recipe(name).parse_args(["--out", str(tmp_path), "--resume", "--epochs", "5", "--ctx",
                                    "cpu:0"])
    assert {key: getattr(args, key) for key in recorded} == \
        {**recorded, "epochs": 5, "ctx": "cpu:0"}
    with pytest.raises(SystemExit):
        recipe(name).parse_args(["--out", str(tmp_path), "--resume", option, value, "--ctx",
                                 "cpu"])
    assert f"error: {option} {value} differs from the run in {tmp_path}, made with " \
        f"{next(iter(recorded.values()))}" in capsys.readouterr().err
    assert recipe(name).parse_args(["--out", str(tmp_path), "--overwrite"]).ctx == "cpu:0"
