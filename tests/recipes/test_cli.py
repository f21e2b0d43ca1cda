"""The recipes' command-line kit: --config files, device lists, thread settings, args.json."""
import json
import os
import subprocess
import sys

import mxnet as mx
import pytest

from gluonkit.recipes import _cli


def parser():
    p = _cli.build_parser("test")
    p.add_argument("--epochs", type=_cli.positive_int, default=3)
    p.add_argument("--schedule", type=_cli.one_of("cosine", "step"), default="cosine")
    p.add_argument("--sizes", type=_cli.sizes_type)
    p.add_argument("--ctx", type=_cli.ctx_type, default="cpu:0")
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
    args = _cli.parse_with_config(parser(), ["--config", str(path)])
    assert (args.epochs, args.schedule, args.sizes, args.fast, args.bars, args.ctx) == \
        (5, "step", [8, 12], True, False, "cpu:0,1")
    args = _cli.parse_with_config(parser(), ["--config", str(path), "--epochs", "1"])
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
        _cli.parse_with_config(parser(), ["--config", str(path)])
    assert message in capsys.readouterr().err


def test_parse_ctx():
    assert _cli.parse_ctx("cpu:0,cpu:1") == _cli.parse_ctx("cpu:0,1") == [mx.cpu(0), mx.cpu(1)]
    assert _cli.parse_ctx("cpu") == [mx.cpu(0)]
    with pytest.raises(ValueError, match="names a device twice"):
        _cli.parse_ctx("cpu:0,cpu:0")
    if mx.context.num_gpus() == 0:
        with pytest.raises(ValueError, match="asks for GPUs but 0 are visible"):
            _cli.parse_ctx("gpu:0,1")


def test_save_args(tmp_path):
    args = _cli.parse_with_config(parser(), ["--sizes", "4,6"])
    path = _cli.save_args(args, str(tmp_path / "out"))
    assert json.loads(open(path).read()) == {**vars(args), "sizes": [4, 6]}


def clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}


def test_importing_a_recipe_leaves_the_environment_alone():
    code = ("import os, gluonkit.recipes.classify, gluonkit.recipes.multitask; "
            "print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('OMP_WAIT_POLICY'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None"]


def test_a_command_restarts_once_with_the_thread_settings(tmp_path):
    """MXNet reads them when it loads: a command that finds it loaded runs again with them."""
    (tmp_path / "probe.py").write_text(
        "import os, sys\nprint(os.environ['OMP_NUM_THREADS'], os.environ['OMP_WAIT_POLICY'], "
        "sys.argv[1:], 'mxnet' in sys.modules)\n")
    code = "import mxnet\nfrom gluonkit.recipes import _cli\n_cli.apply_threads('probe', ['a', 'b'])"
    env = dict(clean_env(), PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(os.cpu_count()), "PASSIVE", "['a',", "'b']", "False"]
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
    with pytest.raises(SystemExit) as stop:
        classify.main(tiny + ["--epochs", "2", "--resume", "--model", "cifar_resnet20_v1"])
    message = str(stop.value.code)
    assert message.startswith("gluonkit-classify: Checkpoint ") and "does not match the network" in message
    assert "\n" not in message
    assert sorted(os.listdir(tmp_path / "checkpoints")) == saved   # nothing written over
