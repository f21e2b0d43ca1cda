"""``gluonkit-launch --max-restarts N --min-workers M``: a job that loses a worker continues on the
workers that remain and ends like the job never interrupted; fewer than M ends it; the options
are checked first. Real launcher, scheduler, servers and workers over loopback."""
import os
import re
import signal
import subprocess
import sys

import pytest
from numpy.testing import assert_allclose

from gluonkit import Checkpoint
from gluonkit.launch import launch
from gluonkit.params import select
from gluonkit.recipes.models import build_model
from job_check import JOB
from watch import Shared, Watched, no_process_left

CLASSIFY_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classify_stop_job.py")
# 200 images: 13 global batches of 16 an epoch, each 4 micro-batches of 4 (the default CNN has BatchNorm);
# on 3 workers rank 2 runs 1 micro-batch of each update, on 2 workers every worker 2
OPTIONS = ["--epochs", "2", "--limit", "200", "--batch-size", "16", "--micro-batch", "4", "--no-progress"]


def _launch(workers, *options, job=(), timeout=240):
    return [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "--timeout", str(timeout), *options, "--",
            *job]


def _classify(out, *faults):
    return [sys.executable, CLASSIFY_JOB, *faults, *OPTIONS, "--kvstore", "dist_sync", "--out", str(out)]


def _latest(folder):
    """The epoch and the parameters (BatchNorm's running statistics too) of the latest checkpoint."""
    net = build_model("cnn", 10)
    state = Checkpoint(folder).load(net)
    return state["epoch"], {name: p.data().asnumpy() for name, p in select(net).items()}


def _finish(job):
    code, output = job.finish()
    assert code == 0, output[-3000:]
    return output


@pytest.fixture(scope="module")
def never(tmp_path_factory):
    """The 3-worker job never interrupted that both tests of a lost worker compare with: run once,
    alongside the first of them; ``(job, folder)``."""
    out = tmp_path_factory.mktemp("reference") / "never"
    job = Shared(_launch(3, job=_classify(out)), timeout=300, cwd=out.parent)
    yield job, out
    job.finish()


def _assert_like_never(never, tmp_path, run, ranks):
    job, out = never
    _finish(job)
    epoch, expected = _latest(out / "checkpoints")
    assert epoch == 2
    for folder in [tmp_path / run / "checkpoints"] + [tmp_path / run / "checkpoints" / f"rank-{r}" for r in ranks]:
        epoch, got = _latest(folder)
        assert epoch == 2, folder
        for name, value in expected.items():   # 3 workers' sums arrive in any order; 2 add them otherwise
            if "running" in name:
                assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{folder} {name}")
            else:
                assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{folder} {name}")


def test_a_worker_killed_mid_epoch_continues_on_the_two_that_remain_like_the_job_never_interrupted(tmp_path, never):
    # the worker of rank 2 is SIGKILLed after its 3rd micro-batch of epoch 2 (3 updates into it)
    run = Watched(_launch(3, "--max-restarts", "1", "--min-workers", "2", job=_classify(tmp_path / "lost", "kill:2:3")),
                  timeout=300, cwd=tmp_path)
    output = _finish(run)
    killed = re.search(r"(worker \d) was killed by SIGKILL; ending every role, then starting them again on 2 of 3 "
                       r"worker\(s\) \(1 restart\(s\) left\)\.", output)
    assert killed, output[-3000:]
    assert f"(restart 1 of 1) on 2 of 3 worker(s): {killed.group(1)} lost" in output
    assert output.count("worker 2 started") == 1 and output.count("server 2 started") == 1   # 3 servers, then 2
    assert "It was saved by 3 worker(s); this job's 2 worker(s) continue after 0 update(s) of epoch 2" in output
    assert "in micro-batches: 2 (100 samples an epoch), 2 (100 samples an epoch)" in output
    _assert_like_never(never, tmp_path, "lost", ranks=[1])


def test_an_error_in_the_program_does_not_shrink_the_job_and_the_worker_left_out_comes_back(tmp_path, never):
    # attempt 0: rank 2 is SIGKILLed, attempt 1 (2 workers): rank 0 raises, attempt 2: 3 workers again
    run = Watched(_launch(3, "--max-restarts", "2", "--min-workers", "2",
                          job=_classify(tmp_path / "back", "kill:2:3:0", "raise:0:5:1")), timeout=300, cwd=tmp_path)
    output = _finish(run)
    lost = re.search(r"(worker \d) was killed by SIGKILL; ending every role, then starting them again on 2 of 3 "
                     r"worker\(s\) \(2 restart\(s\) left\)\.", output)
    assert lost, output[-3000:]
    assert f"(restart 1 of 2) on 2 of 3 worker(s): {lost.group(1)} lost" in output
    raised = re.search(r"(worker \d) exited with code 1; ending every role, then starting them again on 3 of 3 "
                       r"worker\(s\) \(1 restart\(s\) left\)\.", output)
    assert raised, output[-3000:]
    assert "RuntimeError: rank 0 gives up after micro-batch 5 of epoch 2" in output
    assert (f"(restart 2 of 2) on 3 of 3 worker(s): {raised.group(1)} failed, no worker lost; 1 worker(s) left out "
            "before are back") in output
    assert output.count("It was saved by 3 worker(s); this job's 2 worker(s) continue") == 1
    assert output.count("Resumed from") == 2      # attempt 2 on the 3 workers' own checkpoints of epoch 1
    three = "in micro-batches: 2 (100 samples an epoch), 1 (52 samples an epoch), 1 (48 samples an epoch)"
    assert output.count(three) == 2 and output.count("worker 2 started") == 2
    _assert_like_never(never, tmp_path, "back", ranks=[1, 2])


def test_fewer_workers_than_min_workers_end_the_job_in_one_line(tmp_path):
    run = Watched(_launch(2, "-s", "1", "--max-restarts", "1", "--min-workers", "2", timeout=90,
                          job=[sys.executable, JOB, str(tmp_path), "slow"]), timeout=150)
    pid = int(run.wait_for(r"worker 1 started \(pid (\d+)\)").group(1))
    run.wait_for(r"worker \d step 3")
    os.kill(pid, signal.SIGKILL)
    code, output = run.finish()
    assert code == 1, output[-3000:]
    assert ("worker 1 was killed by SIGKILL; ending the job: 1 of 2 worker(s) would remain, fewer than "
            "--min-workers 2.") in output
    assert "restart" not in output
    assert no_process_left(run.pids()) == []


@pytest.mark.parametrize("options, message", [
    (["-n", "2", "--max-restarts", "1", "--min-workers", "3"], "--min-workers must be from 1 to -n/--num-workers (2), "
                                                               "got 3."),
    (["-n", "2", "--max-restarts", "1", "--min-workers", "0"], "--min-workers must be from 1 to -n/--num-workers (2), "
                                                               "got 0."),
    (["-n", "2", "--min-workers", "1"], "--min-workers 1 needs --max-restarts 1 or more: the job continues on fewer "
                                        "workers only at a restart."),
])
def test_bad_min_workers_are_refused_in_one_line_before_anything_starts(tmp_path, options, message):
    started = tmp_path / "started"
    result = subprocess.run([sys.executable, "-m", "gluonkit.launch", *options, "--", sys.executable, "-c",
                             f"open({str(started)!r}, 'w')"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"python -m gluonkit.launch: error: {message}"
    assert not started.exists()


@pytest.mark.parametrize("options, message", [
    ({"min_workers": 3, "max_restarts": 1}, "min_workers must be an integer from 1 to num_workers (2), got 3."),
    ({"min_workers": 1.5, "max_restarts": 1}, "min_workers must be an integer from 1 to num_workers (2), got 1.5."),
    ({"min_workers": 2}, "min_workers=2 needs max_restarts of 1 or more"),
])
def test_launch_refuses_bad_min_workers_before_anything_starts(tmp_path, options, message):
    started = tmp_path / "started"
    with pytest.raises(ValueError, match=re.escape(message)):
        launch([sys.executable, "-c", f"open({str(started)!r}, 'w')"], 2, **options)
    assert not started.exists()
