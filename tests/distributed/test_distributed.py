"""Distributed training over loopback: 1 scheduler, 1 server and 2 workers as real processes."""
import os
import re
import signal
import subprocess
import sys
import threading
import uuid

import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

from command_lines import WAITING_ROLE, leaks, role_files, wait_for_files
from gluonkit.launch import launch
from gluonkit.params import select
from job_check import JOB, assert_trained_like_one_process, load_job
from watch import Watched, no_process_left


def _launch_command(out_dir, mode, timeout):
    return [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", str(timeout), "--",
            sys.executable, JOB, str(out_dir), mode]


def test_two_workers_with_uneven_shards_and_accumulation_match_one_process(tmp_path):
    result = subprocess.run(_launch_command(tmp_path, "train", 90), capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained_like_one_process(tmp_path)


def test_allreduce_grads_then_update_with_local_counts_and_a_zero_ndarray_count_on_dist_sync(tmp_path):
    # GluonNLP's update taken apart, each worker passing its own count; then a worker that got
    # no sample steps mx.nd.array([0]) without a backward
    result = subprocess.run(_launch_command(tmp_path, "split", 90), capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_trained_like_one_process(tmp_path)
    job = load_job()
    net = job.make_net()
    net.load_parameters(str(tmp_path / "initial.params"))
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    x, y = job.dataset()
    updates = [[i for u, _, begin, end in job.micro_batches() if u == update for i in range(begin, end)]
               for update in range(len(job.SIZES))]
    updates += [list(range(4 * u, 4 * u + 4)) * 3 for u in range(job.ZERO_UPDATES)]   # 3 micro-batches, 1 empty
    for rows in updates:
        with autograd.record():
            loss = job.loss_fn(net(nd.array(x[rows])), nd.array(y[rows]))
        loss.backward()
        trainer.step(len(rows))
    for rank in (0, 1):
        got = nd.load(str(tmp_path / f"zero{rank}.params"))
        for name, value in select(net).items():
            assert_allclose(got[name].asnumpy(), value.data().asnumpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_killed_server_ends_the_job_with_a_report_and_no_process_left(tmp_path):
    run = Watched(_launch_command(tmp_path, "slow", 60), timeout=90)
    server_pid = int(run.wait_for(r"server 0 started \(pid (\d+)\)").group(1))
    run.wait_for(r"worker \d step 5")
    os.kill(server_pid, signal.SIGKILL)
    code, output = run.finish()
    assert code == 1, output[-3000:]  # not 124: the death was noticed, not waited out
    assert "server 0 was killed by SIGKILL; ending the job" in output
    assert len(run.pids()) == 4
    assert no_process_left(run.pids()) == []


@pytest.mark.parametrize("how, error", [("raise", "ValueError: worker 1 gives up at step 3"),
                                        ("exit", "worker 1 gives up at step 3")])
def test_a_worker_that_raises_or_exits_with_an_error_ends_the_job_at_once_naming_it(tmp_path, how, error):
    run = Watched(_launch_command(tmp_path, how, 120), timeout=150)
    code, output = run.finish()
    assert code == 1, output[-3000:]  # not 124: without the launcher's help it would hang until the timeout
    report = output[output.index("exited with code 1; ending the job"):]
    assert re.search(r"worker \d exited with code 1; ending the job", output)
    assert error in report   # the error is named in the report
    assert len(run.pids()) == 4 and no_process_left(run.pids()) == []
    assert how == "raise" or (tmp_path / "cleaned-up").exists()   # sys.exit's clean-up ran first


def test_a_missing_program_is_named_before_any_process_starts_training(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "60", "--",
                             "no-such-program-gluonkit", "--flag"], capture_output=True, text=True, timeout=90,
                            cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "could not start: program not found: 'no-such-program-gluonkit'" in result.stderr
    assert "timed out" not in result.stderr


def test_two_jobs_launched_together_get_different_scheduler_ports(tmp_path):
    program = [sys.executable, "-c", "import mxnet as mx; kv = mx.kv.create('dist_sync'); print('rank', kv.rank)"]
    runs = [Watched([sys.executable, "-m", "gluonkit.launch", "-n", "1", "-s", "1", "--timeout", "90", "--",
                     *program], timeout=120) for _ in range(2)]
    results = [run.finish() for run in runs]
    for code, output in results:
        assert code == 0, output[-3000:]
    ports = [re.search(r"scheduler at 127\.0\.0\.1:(\d+)", output).group(1) for _, output in results]
    assert ports[0] != ports[1]


def test_a_second_sigterm_ends_workers_that_ignore_the_first_without_waiting_their_grace(tmp_path):
    command = _launch_command(tmp_path, "deaf", 600)
    run = Watched(command[:3] + ["--stop-timeout", "300"] + command[3:], timeout=90)   # not 300 s of grace
    run.wait_for(r"worker \d step 3")
    run.proc.send_signal(signal.SIGTERM)
    run.wait_for(r"stopping the workers first")
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == 143, output[-3000:]
    assert "interrupted: ending every process now." in output
    assert "every process ended." in output and "could not confirm" not in output
    assert len(run.pids()) == 4 and no_process_left(run.pids()) == []


def test_timeout_ends_every_process_and_names_what_was_running(tmp_path):
    run = Watched(_launch_command(tmp_path, "slow", 8), timeout=90)
    code, output = run.finish()
    assert code == 124, output[-3000:]
    assert re.search(r"timed out after 8 s; still running: .*worker 0", output)
    assert run.pids() and no_process_left(run.pids()) == []


def test_bad_launch_arguments_are_refused_before_starting_anything():
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "0", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == "python -m gluonkit.launch: error: -n/--num-workers must be at least 1, got 0.\n"
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "1", "--launcher", "ssh", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "needs --hostfile" in result.stderr
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "1", "--max-restart", "1", "--", "true"],
                            capture_output=True, text=True, timeout=60)   # no option is taken for a typo of it
    assert result.returncode == 2 and "unrecognized arguments: --max-restart" in result.stderr
    assert "(did you mean --max-restarts?)" in result.stderr and len(result.stderr.splitlines()) == 1
    command = os.path.join(os.path.dirname(sys.executable), "gluonkit-launch")   # named as typed
    result = subprocess.run([command, "-n", "2", "--min-workers", "3", "--max-restarts", "1", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr == (
        "gluonkit-launch: error: --min-workers must be from 1 to -n/--num-workers (2), got 3.\n")


@pytest.mark.parametrize("options, error, message", [
    ({"env": ["1BAD=x"]}, ValueError, "--env takes NAME=VALUE or NAME, got '1BAD=x'"),
    ({"env_worker": ["GLUONKIT_SURELY_UNSET"]}, ValueError,
     "GLUONKIT_SURELY_UNSET is not set on this machine; give GLUONKIT_SURELY_UNSET=VALUE"),
    ({"sync_dst_dir": "copy"}, ValueError, "sync_dst_dir='copy' needs launcher='ssh'"),
    ({"launcher": "ssh", "hostfile": "{hosts}"}, ValueError, "line 2: 'node:port' is not a host"),
    ({"timeout": 0}, ValueError, "timeout must be a positive number of seconds, got 0"),
    ({"port": 0}, ValueError, "port must be a TCP port number (1-65535), got 0"),
    ({"timeout": True}, TypeError, "timeout (seconds) must be a finite number, got True"),
])
def test_bad_environment_options_and_host_files_are_refused_before_starting_anything(tmp_path, options, error,
                                                                                    message):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("node1\nnode:port\n")
    options = {k: v.format(hosts=hosts) if isinstance(v, str) else v for k, v in options.items()}
    with pytest.raises(error) as info:
        launch(["no-such-program-gluonkit"], 1, **options)
    assert message in str(info.value)


def test_classify_recipe_trains_under_the_launcher_and_rank_0_writes(tmp_path):
    recipe = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "recipes", "classify.py")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "150", "--",
               sys.executable, recipe, "--kvstore", "dist_sync", "--epochs", "2", "--limit", "400",
               "--no-progress", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("test accuracy:") == 1
    assert output.count("Training cnn on digits (") == 1                  # the job's images, logged once
    assert output.count("global batch 64 (samples per update over 2 worker(s))") == 1
    assert sorted(os.listdir(out)) == ["args.json", "checkpoints", "curves.png", "history.csv",
                                       "model-0000.params", "model-symbol.json", "model.json",
                                       "model.onnx"]
    with open(out / "history.csv") as f:
        assert len(f.read().strip().splitlines()) == 3     # a header and one row per epoch


def test_environment_values_reach_the_roles_and_no_command_line(tmp_path):
    secret, worker_secret = f"gk-secret-{uuid.uuid4().hex}", f"gk-worker-{uuid.uuid4().hex}"
    result = {}
    job = threading.Thread(target=lambda: result.update(code=launch(
        [sys.executable, "-c", WAITING_ROLE, str(tmp_path)], 2, 1, timeout=60,
        env=[f"GK_SECRET={secret}"], env_worker=[f"GK_WORKER_SECRET={worker_secret}"])))
    job.start()
    try:
        wait_for_files(tmp_path, role_files(2, 1))
        seen = leaks([secret, worker_secret])
    finally:
        (tmp_path / "stop").touch()
        job.join(90)
    assert result == {"code": 0}
    assert seen == []
    for name in role_files(2, 1):
        assert (tmp_path / name).read_text() == f"{secret} {worker_secret if 'worker' in name else '-'}"
