"""What a worker started by the launcher checks before training: the environment the launcher
sets (DMLC_ROLE, DMLC_NUM_WORKER, GLUONKIT_LAUNCH_ATTEMPT) without a job around it."""
import mxnet as mx
import pytest
from mxnet import gluon

import gluonkit
from gluonkit import Checkpoint
from gluonkit.recipes import classify


def test_a_trainer_without_a_distributed_kvstore_in_a_launched_worker_warns(monkeypatch):
    monkeypatch.setenv("DMLC_ROLE", "worker")
    monkeypatch.setenv("DMLC_NUM_WORKER", "2")
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.warns(UserWarning, match=r"worker of a job of 2 workers .* kvstore is 'device': each worker trains "
                                         r"a copy of its own. Pass kvstore='dist_sync'"):
        gluonkit.Trainer(net.collect_params(), "sgd", kvstore="device")


@pytest.mark.parametrize("environment", [{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},   # mpirun
                                         {"PMI_RANK": "0", "PMI_SIZE": "2"}])                          # MPICH
def test_a_trainer_without_a_kvstore_on_a_rank_that_mpirun_started_warns(monkeypatch, environment):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.warns(UserWarning, match=r"a rank of a job of 2 ranks \(started by horovodrun or mpirun\) but its "
                                         r"Trainer's kvstore is 'device': each worker trains a copy of its own. "
                                         r"Pass kvstore='horovod'"):
        gluonkit.Trainer(net.collect_params(), "sgd")


def test_the_recipe_in_a_launched_worker_without_a_distributed_kvstore_is_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DMLC_ROLE", "worker")
    with pytest.raises(SystemExit) as info:
        classify.parse_args(["--out", str(tmp_path / "run")])
    assert info.value.code == 2
    assert "--kvstore device in a worker of gluonkit-launch (DMLC_ROLE=worker)" in capsys.readouterr().err
    assert classify.parse_args(["--kvstore", "dist_sync", "--out", str(tmp_path / "run")]).kvstore == "dist_sync"


def test_a_restart_attempt_continues_the_run_with_the_same_command_line(monkeypatch, tmp_path):
    command = ["--out", str(tmp_path / "run"), "--overwrite"]
    assert not classify.parse_args(command).resume
    monkeypatch.setenv("GLUONKIT_LAUNCH_ATTEMPT", "1")
    args = classify.parse_args(command)      # the first attempt died before its first checkpoint
    assert not args.resume and args.overwrite
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    Checkpoint(tmp_path / "run" / "checkpoints").save(
        net, gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}), 1)
    args = classify.parse_args(command)
    assert args.resume and not args.overwrite   # the first attempt's checkpoints are kept, and resumed


def test_a_recipe_that_does_not_train_across_workers_is_refused_in_a_launched_worker(monkeypatch, tmp_path, capsys):
    from gluonkit.recipes import common
    parser = common.build_parser("A recipe of one process.", prog="one-process")   # no --kvstore
    common.add_output_options(parser, "run")
    monkeypatch.setenv("DMLC_ROLE", "worker")
    with pytest.raises(SystemExit):
        common.check_output_options(parser, parser.parse_args(["--out", str(tmp_path / "run")]))
    assert "one-process does not train across workers, but runs in a worker of gluonkit-launch" in (
        capsys.readouterr().err)


def test_multitask_in_a_launched_worker_needs_a_distributed_kvstore(monkeypatch, tmp_path, capsys):
    from gluonkit.recipes import multitask
    monkeypatch.setenv("DMLC_ROLE", "worker")
    with pytest.raises(SystemExit):
        multitask.parse_args(["--out", str(tmp_path / "run")])
    assert "--kvstore device in a worker of gluonkit-launch (DMLC_ROLE=worker)" in capsys.readouterr().err
    assert multitask.parse_args(["--kvstore", "dist_sync", "--out", str(tmp_path / "run")]).kvstore == "dist_sync"


@pytest.mark.parametrize("environment, kvstore, message", [
    ({}, "dist_sync", "--kvstore dist_sync trains across the processes that gluonkit-launch starts (DMLC_ROLE is "
                      "not set): run `gluonkit-launch -n WORKERS -s SERVERS -- COMMAND ... --kvstore dist_sync`"),
    ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}, "device",
     "--kvstore device in one of 2 ranks that horovodrun started: every rank would train a copy of its own"),
])
def test_a_kvstore_that_does_not_fit_how_the_recipe_was_started_is_one_line_and_writes_nothing(
        monkeypatch, tmp_path, environment, kvstore, message):
    monkeypatch.chdir(tmp_path)
    for name in ("DMLC_ROLE", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as info:     # not MXNet's "Check notnull: DMLC_NUM_WORKER"
        classify.main(["--kvstore", kvstore, "--epochs", "1", "--limit", "40", "--out", "run", "--no-progress"])
    assert str(info.value).startswith(f"gluonkit-classify: {message}") and "\n" not in str(info.value)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
