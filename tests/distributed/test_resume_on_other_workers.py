"""A ``gluonkit-classify`` checkpoint of N workers on global batches resumes on M workers (one
included), in mid-epoch too, and ends with the weights of the run never stopped: real launcher,
scheduler, server and workers over loopback, and Horovod ranks under horovodrun."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose

from gluonkit import Checkpoint
from gluonkit.params import select
from gluonkit.recipes.models import build_model
from horovod_run import horovodrun, require_horovod
from watch import Shared, Watched

CLASSIFY = os.path.join(os.path.dirname(sys.executable), "gluonkit-classify")
STOP_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classify_stop_job.py")
# 200 images: 13 global batches of 16 an epoch, each 4 micro-batches of 4 (the default CNN has BatchNorm)
OPTIONS = ["--epochs", "2", "--limit", "200", "--batch-size", "16", "--micro-batch", "4", "--no-progress"]


def _launch(workers, *command):
    return [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1", "--timeout", "200", "--",
            *command, "--kvstore", "dist_sync"]


def _one_process(*command):
    return [*command, "--kvstore", "device"]


def _finish(job, code=0):
    returned, output = job.finish()
    assert returned == code, output[-3000:]
    return output


def _latest(folder):
    """The epoch and the parameters (BatchNorm's running statistics too) of the latest checkpoint."""
    net = build_model("cnn", 10)
    state = Checkpoint(folder).load(net)
    return state["epoch"], {name: p.data().asnumpy() for name, p in select(net).items()}


def _assert_like(expected, folder):
    epoch, got = _latest(folder)
    assert epoch == 2, folder
    for name, value in expected.items():   # the updates after the resume add float32 sums in another order
        if "running" in name:
            assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{folder} {name}")
        else:
            assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{folder} {name}")


@pytest.fixture(scope="module")
def never_on_two(tmp_path_factory):
    """The run on 2 workers never stopped that the resumes of 2 workers' and of one process's
    checkpoints compare with: run once, alongside the first of them; ``(job, folder)``."""
    out = tmp_path_factory.mktemp("reference") / "never"
    job = Shared(_launch(2, CLASSIFY, *OPTIONS, "--out", str(out)), timeout=300, cwd=out.parent)
    yield job, out
    job.finish()


def test_two_workers_stopped_mid_epoch_resume_on_one_and_on_three_like_the_run_never_stopped(tmp_path,
                                                                                            never_on_two):
    never, never_out = never_on_two
    # rank 0 gets SIGTERM after its 5th micro-batch of epoch 2, inside its 3rd window: both stop after update 3
    stopped = Watched(_launch(2, sys.executable, STOP_JOB, "term:0:5", *OPTIONS, "--out", str(tmp_path / "two")),
                      timeout=300, cwd=tmp_path)
    output = _finish(stopped, code=143)   # the launcher did not get the signal: a worker's stop ends the job
    assert "ended first (exit code 143" in output and "Its last lines" not in output, output[-3000:]
    assert "training stopped by SIGTERM after 1 epoch(s) and 3 update(s)" in output, output[-3000:]
    saved = [Checkpoint(tmp_path / "two" / "checkpoints" / rank).latest for rank in ("", "rank-1")]
    assert [Checkpoint.saved_at(path) for path in saved] == [(1, 13 + 3)] * 2    # epoch 1, then 3 updates
    for workers in (1, 3):
        shutil.copytree(tmp_path / "two", tmp_path / f"two-on-{workers}")
    one = Watched(_one_process(CLASSIFY, *OPTIONS, "--resume", "--out", str(tmp_path / "two-on-1")),
                  timeout=300, cwd=tmp_path)
    output = _finish(one)
    assert "Resumed from" in output and "1 epoch(s) and 3 update(s) done" in output   # in 12 micro-batches of its own
    assert "It was saved by 2 worker(s); this job's 1 worker(s) continue after 3 update(s) of epoch 2" in output
    three = Watched(_launch(3, CLASSIFY, *OPTIONS, "--resume", "--out", str(tmp_path / "two-on-3")),
                    timeout=300, cwd=tmp_path)
    output = _finish(three)
    assert output.count("Resumed from") == 1 and "1 epoch(s) and 3 update(s) done" in output  # rank 0: 2 of each 4
    assert "in micro-batches: 2 (100 samples an epoch), 1 (52 samples an epoch), 1 (48 samples an epoch)" in output
    _finish(never)

    epoch, expected = _latest(never_out / "checkpoints")
    assert epoch == 2
    _, at_stop = _latest(tmp_path / "two" / "checkpoints")
    assert max(float(np.abs(at_stop[k] - v).max()) for k, v in expected.items() if "running" not in k) > 1e-2
    for run in ("two-on-1/checkpoints", "two-on-3/checkpoints", "two-on-3/checkpoints/rank-1",
                "two-on-3/checkpoints/rank-2"):
        _assert_like(expected, tmp_path / run)


def test_two_horovod_ranks_stopped_mid_epoch_resume_on_three_and_on_one_like_the_run_never_stopped(tmp_path):
    require_horovod()
    never = Watched(_one_process(CLASSIFY, *OPTIONS, "--out", str(tmp_path / "never")), timeout=300, cwd=tmp_path)
    # rank 0 gets SIGTERM after its 5th micro-batch of epoch 2: both ranks stop after update 3
    code, output = horovodrun(2, [sys.executable, STOP_JOB, "term:0:5", *OPTIONS, "--kvstore", "horovod",
                                  "--out", str(tmp_path / "two")], timeout=300, cwd=tmp_path)
    assert code != 0 and "training stopped by SIGTERM after 1 epoch(s) and 3 update(s)" in output, output[-3000:]
    saved = [Checkpoint(tmp_path / "two" / "checkpoints" / rank).latest for rank in ("", "rank-1")]
    assert [Checkpoint.saved_at(path) for path in saved] == [(1, 13 + 3)] * 2
    shutil.copytree(tmp_path / "two", tmp_path / "two-on-1")
    code, output = horovodrun(3, [CLASSIFY, *OPTIONS, "--kvstore", "horovod", "--resume", "--out",
                                  str(tmp_path / "two")], timeout=300, cwd=tmp_path)
    assert code == 0, output[-3000:]
    assert "It was saved by 2 worker(s); this job's 3 worker(s) continue after 3 update(s) of epoch 2" in output
    output = _finish(Watched(_one_process(CLASSIFY, *OPTIONS, "--resume", "--out", str(tmp_path / "two-on-1")),
                             timeout=300, cwd=tmp_path))
    assert "It was saved by 2 worker(s); this job's 1 worker(s) continue after 3 update(s) of epoch 2" in output
    _finish(never)
    _, expected = _latest(tmp_path / "never" / "checkpoints")
    for run in ("two/checkpoints", "two/checkpoints/rank-1", "two/checkpoints/rank-2", "two-on-1/checkpoints"):
        _assert_like(expected, tmp_path / run)


def test_one_process_stops_between_updates_and_resumes_on_two_workers(tmp_path, never_on_two):
    never, never_out = never_on_two
    # SIGTERM after micro-batch 5 of epoch 2, inside the second update's window of 4: it stops after 8
    output = _finish(Watched(_one_process(sys.executable, STOP_JOB, "term:0:5", *OPTIONS, "--out",
                                          str(tmp_path / "one")), timeout=300, cwd=tmp_path), code=143)
    assert "SIGTERM received: stopping after the current update" in output
    assert "training stopped by SIGTERM after 1 epoch(s) and 2 update(s)" in output
    output = _finish(Watched(_launch(2, CLASSIFY, *OPTIONS, "--resume", "--out", str(tmp_path / "one")),
                             timeout=300, cwd=tmp_path))
    assert "1 epoch(s) and 2 update(s) done" in output    # rank 0: in 2 micro-batches of each
    _finish(never)
    epoch, expected = _latest(never_out / "checkpoints")
    assert epoch == 2
    for run in ("one/checkpoints", "one/checkpoints/rank-1"):
        _assert_like(expected, tmp_path / run)


def test_what_cannot_continue_on_another_number_of_workers_is_refused_in_one_line(tmp_path):
    out, shards = tmp_path / "shards", ["--limit", "200", "--batch-size", "16", "--no-progress", "--per-worker-batch"]
    done = subprocess.run(_one_process(CLASSIFY, *shards, "--epochs", "1", "--out", str(out)),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    before = {name: (out / name).read_bytes() for name in ("args.json", "history.csv")}
    output = _finish(Watched(_launch(2, CLASSIFY, "--epochs", "2", "--resume", "--out", str(out)), timeout=300,
                             cwd=tmp_path), code=1)
    refusal = (f"gluonkit-classify: {out / 'checkpoints' / '000001-epoch0001.ckpt'} was saved by a job of 1 "
               "worker(s) and this one has 2: it was not trained on global batches")
    assert refusal in output, output[-3000:]
    assert "resume with 1 worker(s), or start without resuming." in output
    assert {name: (out / name).read_bytes() for name in before} == before
    assert not (out / "checkpoints" / "rank-1").exists()
