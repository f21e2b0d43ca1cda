"""Distributed jobs over loopback that stop, resume, and hold shards making different numbers of
updates: real launcher, scheduler, server and 2 workers."""
import os
import shutil
import signal
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

import gluonkit
from gluonkit.callbacks import ModelCheckpoint
from gluonkit.params import select
from job_check import load_job
from watch import Shared, Watched, no_process_left

RESUME_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resume_job.py")


def _command(*args, timeout=120, restarts=0):
    return [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", str(timeout),
            "--max-restarts", str(restarts), "--", sys.executable, RESUME_JOB, *map(str, args)]


def _windows(sizes, accumulate):
    """The micro-batches (begin, end) of each update of one worker."""
    return [sizes[i:i + accumulate] for i in range(0, len(sizes), accumulate)]


def _one_process(job, out_dir):
    """Plain gluon.Trainer in one process: update u on every worker's window u, all samples at once."""
    net = job.make_net()
    net.load_parameters(os.path.join(out_dir, "initial.params"), ctx=mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    x, y = job.data(sum(map(sum, job.MICRO_BATCHES.values())))
    windows = [_windows(list(job.rows(rank)), job.ACCUMULATE) for rank in job.MICRO_BATCHES]
    for update in range(max(map(len, windows))):
        rows = [i for per_rank in windows if update < len(per_rank) for begin, end in per_rank[update]
                for i in range(begin, end)]
        with autograd.record():
            loss = job.loss_fn(net(nd.array(x[rows])), nd.array(y[rows]))
        loss.backward()
        trainer.step(len(rows))
    return {name: p.data().asnumpy() for name, p in select(net).items()}


def _weights(path):
    return {name: array.asnumpy() for name, array in nd.load(str(path)).items()}


def _assert_bit_identical(expected_dir, got_dir, name):
    """Each worker's ``name{rank}.params`` in ``got_dir`` equals ``expected_dir``'s, bit for bit."""
    for rank in (0, 1):
        expected, got = _weights(expected_dir / f"{name}{rank}.params"), _weights(got_dir / f"{name}{rank}.params")
        assert set(got) == set(expected)
        for key in expected:
            assert np.array_equal(got[key], expected[key]), (rank, key)


def test_shards_of_different_numbers_of_updates_train_like_one_process_and_resume_mid_window(tmp_path):
    # rank 0: 7 micro-batches (4 updates, the last partial); rank 1: 3 (2 updates, the last partial)
    never, stopped = tmp_path / "never", tmp_path / "stopped"
    never.mkdir(), stopped.mkdir()
    reference = Watched(_command(never, "uneven"), timeout=150)
    code, output = Watched(_command(stopped, "uneven-first"), timeout=150).finish()
    assert code == 0, output[-3000:]
    code, output = Watched(_command(stopped, "uneven-rest"), timeout=150).finish()   # each loads its own window
    assert code == 0, output[-3000:]
    code, output = reference.finish()
    assert code == 0, output[-3000:]       # no worker waited for one out of data
    expected = _one_process(load_job(RESUME_JOB), never)
    initial = nd.load(str(never / "initial.params"))
    for rank in (0, 1):
        got = nd.load(str(never / f"worker{rank}.params"))
        assert set(got) == set(expected)
        for name, value in expected.items():
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"worker {rank} {name}")
            assert not np.allclose(value, initial[name].asnumpy())
    _assert_bit_identical(never, stopped, "worker")   # stopped in mid-window and resumed


@pytest.fixture(scope="module")
def never_fit(tmp_path_factory):
    """``fit`` on 2 workers for 3 epochs, never stopped, that a job stopped by SIGTERM and one that
    lost a worker's checkpoints compare with: run once, alongside the first of them; ``(job, folder)``."""
    never = tmp_path_factory.mktemp("never")
    job = Shared(_command(never, "fit", 3), timeout=240)
    yield job, never
    job.finish()


def test_sigterm_mid_epoch_then_the_same_command_ends_like_the_job_never_stopped(tmp_path, never_fit):
    (reference, never), stopped = never_fit, tmp_path / "stopped"
    stopped.mkdir()
    run = Watched(_command(stopped, "fit", 3, "wait"), timeout=240)
    run.wait_for(r"worker 0 waits for a signal")   # inside epoch 2, inside an accumulation window
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == 143, output[-3000:]
    assert "SIGTERM received" in output and "stopping the workers first" in output
    # both workers stop after the update that closes that window, however late the signal came
    assert output.count("training stopped by SIGTERM after 1 epoch(s) and 1 update(s)") == 2, output[-3000:]
    assert not (stopped / "final0.params").exists()
    assert os.listdir(stopped / "checkpoints" / "rank-1")       # each worker wrote its own checkpoint
    assert no_process_left(run.pids()) == []

    code, output = Watched(_command(stopped, "fit", 3), timeout=240).finish()
    assert code == 0, output[-3000:]
    assert output.count("Resumed from") == 1                    # logged by rank 0 only
    code, output = reference.finish()
    assert code == 0, output[-3000:]
    _assert_bit_identical(never, stopped, "final")


def test_a_worker_killed_mid_epoch_is_restarted_and_the_job_ends_like_one_never_stopped(tmp_path):
    never, killed = tmp_path / "never", tmp_path / "killed"
    never.mkdir(), killed.mkdir()
    reference = Watched(_command(never, "fit-dropout", 3), timeout=240)    # shuffled shards, dropout
    run = Watched(_command(killed, "fit-dropout", 3, "wait", restarts=1), timeout=240)
    pid = int(run.wait_for(r"worker 1 started \(pid (\d+)\)").group(1))
    run.wait_for(r"worker 0 waits for a signal")   # worker 1 is mid-epoch 2, waiting for worker 0's update
    os.kill(pid, signal.SIGKILL)
    code, output = run.finish()
    assert code == 0, output[-3000:]
    assert "worker 1 was killed by SIGKILL; ending every role, then starting them all again (1 restart(s) left)" \
        in output
    assert "(restart 1 of 1)" in output and output.count("Resumed from") == 1
    code, output = reference.finish()
    assert code == 0, output[-3000:]
    _assert_bit_identical(never, killed, "final")


def test_a_worker_lost_before_its_first_save_starts_the_job_over_and_other_worker_counts_are_refused(tmp_path,
                                                                                                     never_fit):
    (reference, never), lost, single = never_fit, tmp_path / "lost", tmp_path / "single"
    for folder in (lost, single):
        folder.mkdir()
    code, output = Watched(_command(lost, "fit", 1), timeout=240).finish()
    assert code == 0, output[-3000:]
    shutil.rmtree(lost / "checkpoints" / "rank-1")     # as if worker 1 died before its first save
    code, output = Watched(_command(lost, "fit", 3), timeout=240).finish()
    assert code == 0, output[-3000:]
    assert output.count("holds no checkpoint that all 2 workers saved (rank(s) [1] saved none): "
                        "training from the start.") == 1 and "Resumed from" not in output
    code, output = reference.finish()
    assert code == 0, output[-3000:]
    _assert_bit_identical(never, lost, "final")

    [damaged] = (lost / "checkpoints" / "rank-1").glob("*epoch0003.ckpt")   # a byte flipped in rank 1's newest
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    code, output = Watched(_command(lost, "fit", 3), timeout=240).finish()
    assert code == 0, output[-3000:]
    assert output.count(f"Checkpoint '{damaged}' is corrupted or truncated") == 1, output[-3000:]
    assert ("every worker resumes from the newest checkpoint all 2 worker(s) saved without it (the work since is "
            "trained again): remove the damaged file.") in output
    assert "Resumed from" in output and "epoch0002.ckpt" in output
    _assert_bit_identical(never, lost, "final")      # epoch 3 trained again from the set of epoch 2

    job = load_job(RESUME_JOB)     # one process saves; two workers may not resume it
    net = job.make_net()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]),
                               accumulate=job.ACCUMULATE)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(*job.data(32)), batch_size=16)
    gluonkit.fit(net, gluon.loss.L2Loss(), trainer, loader, epochs=1, progress=False,
                 callbacks=[ModelCheckpoint(str(single / "checkpoints"))])
    code, output = Watched(_command(single, "fit", 2), timeout=240).finish()
    assert code != 0
    assert (f"{single / 'checkpoints' / '000001-epoch0001.ckpt'} was saved by a job of 1 worker(s) and this one "
            "has 2: it was not trained on global batches") in output     # but on a loader of its own
    assert "resume with 1 worker(s), or start without resuming." in output
    assert not (single / "final0.params").exists()

    net.initialize(force_reinit=True)    # and one process may not resume two workers' checkpoints
    before = {name: p.data().asnumpy() for name, p in select(net).items()}
    with pytest.raises(gluonkit.CheckpointError, match=r"epoch0003.ckpt was saved by a job of 2 worker\(s\) and "
                                                       r"this one has 1: it was not trained on global batches .* "
                                                       r"resume with 2 worker\(s\)"):
        gluonkit.fit(net, gluon.loss.L2Loss(), trainer, loader, epochs=4, progress=False,
                     callbacks=[ModelCheckpoint(str(lost / "checkpoints"), resume=True)])
    for name, p in select(net).items():
        assert np.array_equal(p.data().asnumpy(), before[name]), name


def _classify(out, *extra, restarts=0):
    recipe = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "recipes", "classify.py")
    return [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "200", "--max-restarts",
            str(restarts), "--", sys.executable, recipe, "--kvstore", "dist_sync", "--epochs", "2", "--limit", "401",
            "--batch-size", "16", "--micro-batch", "4", "--no-progress", "--out", str(out), *extra]


def _latest_weights(folder):
    from gluonkit import Checkpoint
    from gluonkit.recipes.models import build_model
    net = build_model("cnn", 10)
    state = Checkpoint(folder).load(net)
    # the weights and BatchNorm's running statistics (merged over the workers at every epoch's end)
    return state["epoch"], {name: p.data().asnumpy() for name, p in select(net).items()}


def test_classify_recipe_stopped_or_killed_resumes_like_the_run_never_stopped(tmp_path):
    # 401 images: 26 global batches of 16 an epoch, 4 micro-batches of 4 each: 51 and 50 per worker
    reference = Watched(_classify(tmp_path / "never"), timeout=300, cwd=tmp_path)
    run = Watched(_classify(tmp_path / "stopped"), timeout=300, cwd=tmp_path)
    run.wait_for(r"Saved checkpoint")            # the first epoch's; SIGTERM in the second
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == 143, output[-3000:]
    assert "training stopped by SIGTERM after 1 epoch(s)" in output
    assert "each worker's share of a global batch, in micro-batches: 2 (" in output
    resumed = Watched(_classify(tmp_path / "stopped", "--resume"), timeout=300, cwd=tmp_path)
    killed = Watched(_classify(tmp_path / "killed", restarts=1), timeout=300, cwd=tmp_path)
    pid = int(killed.wait_for(r"worker 0 started \(pid (\d+)\)").group(1))
    killed.wait_for(r"Saved checkpoint")         # killed from outside after its first epoch
    os.kill(pid, signal.SIGKILL)
    for job, resumes in ((resumed, "Resumed from"), (killed, "(restart 1 of 1)"), (reference, "test accuracy:")):
        code, output = job.finish()
        assert code == 0, output[-3000:]
        assert output.count(resumes) == 1 and output.count("test accuracy:") == 1
    epoch, expected = _latest_weights(tmp_path / "never" / "checkpoints")
    assert epoch == 2
    for run in ("never/checkpoints/rank-1", "stopped/checkpoints", "stopped/checkpoints/rank-1",
                "killed/checkpoints", "killed/checkpoints/rank-1"):
        resumed_epoch, got = _latest_weights(tmp_path / run)   # every worker holds the same weights
        assert resumed_epoch == 2
        for name in expected:   # weights bit for bit; BatchNorm's statistics, merged over the workers, to rounding
            if "running" in name:
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5, err_msg=f"{run} {name}")
            else:
                assert np.array_equal(got[name], expected[name]), (run, name)
