"""Distributed training over loopback: 1 scheduler, 1 server and 2 workers as real processes."""
import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

from conftest import params_of

JOB = os.path.join(os.path.dirname(__file__), "dist_job.py")


def _load_job():
    spec = importlib.util.spec_from_file_location("dist_job", JOB)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def _launch_command(out_dir, mode, timeout):
    return [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", str(timeout), "--",
            sys.executable, JOB, str(out_dir), mode]


def _single_process_reference(job, out_dir):
    """One process, plain gluon.Trainer, one step per update on all the samples of that update."""
    net = job.make_net()
    net.load_parameters(os.path.join(out_dir, "initial.params"), ctx=mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    x, y = job.dataset()
    for update in range(len(job.SIZES)):
        rows = [i for u, _, begin, end in job.micro_batches() if u == update for i in range(begin, end)]
        with autograd.record():
            loss = job.loss_fn(net(nd.array(x[rows])), nd.array(y[rows]))
        loss.backward()
        trainer.step(len(rows))
    return net


def test_two_workers_with_uneven_shards_and_accumulation_match_one_process(tmp_path):
    result = subprocess.run(_launch_command(tmp_path, "train", 90), capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    job = _load_job()
    reference = _single_process_reference(job, tmp_path)
    expected = params_of(reference)
    initial = nd.load(os.path.join(tmp_path, "initial.params"))
    for rank in (0, 1):
        got = nd.load(os.path.join(tmp_path, f"worker{rank}.params"))
        assert set(got) == set(expected)
        for name, value in expected.items():
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"worker {rank} {name}")
            assert not np.allclose(value, initial[name].asnumpy())  # training moved every parameter


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def _read_lines(stream, lines):
    for line in stream:
        lines.put(line)
    lines.put(None)


def _wait_for(lines, pattern, seen, deadline):
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"never saw {pattern!r}; output:\n" + "".join(seen[-40:]))


def test_a_killed_server_ends_the_job_with_a_report_and_no_process_left(tmp_path):
    proc = subprocess.Popen(_launch_command(tmp_path, "slow", 60), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, seen = queue.Queue(), []
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        server_pid = int(_wait_for(lines, r"server 0 started \(pid (\d+)\)", seen, deadline).group(1))
        _wait_for(lines, r"worker \d step 5", seen, deadline)
        started_at = time.monotonic()
        os.kill(server_pid, signal.SIGKILL)
        code = proc.wait(timeout=60)
        elapsed = time.monotonic() - started_at
    finally:
        if proc.poll() is None:
            proc.kill()
    while True:
        line = lines.get(timeout=5)
        if line is None:
            break
        seen.append(line)
    output = "".join(seen)
    assert code == 1, output[-3000:]
    assert "server 0 was killed by SIGKILL; ending the job" in output
    assert elapsed < 60  # well before the launcher's own timeout: the death was noticed, not waited out
    pids = [int(p) for p in re.findall(r"started \(pid (\d+)\)", output)]
    assert len(pids) == 4
    time.sleep(0.5)
    assert [p for p in pids if _alive(p)] == []


def test_timeout_ends_every_process_and_names_what_was_running(tmp_path):
    result = subprocess.run(_launch_command(tmp_path, "slow", 8), capture_output=True, text=True, timeout=90)
    assert result.returncode == 124, result.stderr[-3000:]
    assert re.search(r"timed out after 8 s; still running: .*worker 0", result.stderr)
    pids = [int(p) for p in re.findall(r"started \(pid (\d+)\)", result.stderr)]
    time.sleep(0.5)
    assert pids and [p for p in pids if _alive(p)] == []


def test_bad_launch_arguments_are_refused_before_starting_anything():
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "0", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "num_workers must be a positive integer, got 0" in result.stderr
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "1", "--launcher", "ssh", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "needs --hostfile" in result.stderr


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
    assert output.count("Training cnn on digits (200 images") == 1   # each worker holds half
    assert sorted(os.listdir(out)) == ["args.json", "checkpoints", "curves.png", "history.csv"]
    with open(out / "history.csv") as f:
        assert len(f.read().strip().splitlines()) == 3     # a header and one row per epoch
