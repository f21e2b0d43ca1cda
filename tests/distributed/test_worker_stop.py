"""A worker that stops on SIGTERM or SIGINT (``fit``'s stop, with its checkpoint) ends the job as a
stop, not as a failure: the launcher exits with 128 + the signal and restarts nothing. Real
launcher, scheduler, server and ``gluonkit-classify`` workers over loopback."""
import os
import re
import sys

import numpy as np

from gluonkit import Checkpoint
from gluonkit.params import select
from gluonkit.recipes.models import build_model
from watch import Watched, no_process_left

CLASSIFY_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classify_stop_job.py")
# 64 images: 4 global batches of 16 an epoch, each 4 micro-batches of 4
OPTIONS = ["--kvstore", "dist_sync", "--epochs", "2", "--limit", "64", "--batch-size", "16", "--micro-batch", "4",
           "--no-progress"]


def _stopped_job(tmp_path, workers, fault):
    """Launch ``workers`` workers whose rank ``fault`` names signals itself in epoch 2, under restarts
    that would run the job again after a failure; return (exit code, output)."""
    command = [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1", "--timeout", "200",
               "--max-restarts", "1", "--min-workers", "1", "--",
               sys.executable, CLASSIFY_JOB, fault, *OPTIONS, "--out", str(tmp_path / "run")]
    run = Watched(command, timeout=240, cwd=tmp_path)
    code, output = run.finish()
    assert no_process_left(run.pids()) == []
    assert "Its last lines on stderr" not in output and "restart 1 of 1" not in output, output[-3000:]
    return code, output


def _saved(folder):
    """(epochs, updates) of the newest checkpoint in ``folder`` and its weights."""
    net = build_model("cnn", 10)
    checkpoint = Checkpoint(folder)
    checkpoint.load(net)
    return Checkpoint.saved_at(checkpoint.latest), {name: p.data().asnumpy() for name, p in select(net).items()}


def test_sigterm_to_one_worker_stops_the_job_with_every_checkpoint_and_exit_code_143(tmp_path):
    # rank 1 gets SIGTERM after its 3rd micro-batch of epoch 2, inside its 2nd window: both stop after update 2
    code, output = _stopped_job(tmp_path, 2, "term:1:3")
    assert code == 143, output[-3000:]
    assert re.search(r"gluonkit\.launch: the job stopped on a SIGTERM: worker \d ended first \(exit code 143, as fit "
                     r"exits after writing its checkpoint\); ending it without a restart \(a recipe's run "
                     r"continues from its checkpoints with --resume\)\.", output), output[-3000:]
    assert output.count("training stopped by SIGTERM after 1 epoch(s) and 2 update(s)") == 2
    (rank0_at, rank0), (rank1_at, rank1) = (_saved(tmp_path / "run" / "checkpoints" / rank) for rank in ("", "rank-1"))
    assert rank0_at == rank1_at == (1, 4 + 2)
    for name, value in rank0.items():
        assert np.array_equal(rank1[name], value), name
    assert not (tmp_path / "run" / "model-symbol.json").exists()


def test_sigint_to_the_only_worker_stops_the_job_with_exit_code_130(tmp_path):
    # the one worker stops after the update closing the window of its 3rd micro-batch of epoch 2
    code, output = _stopped_job(tmp_path, 1, "int:0:3")
    assert code == 130, output[-3000:]
    assert "gluonkit.launch: the job stopped on a SIGINT: worker 0 ended first (exit code 130, as fit exits after " \
           "writing its checkpoint); ending it without a restart" in output
    assert _saved(tmp_path / "run" / "checkpoints")[0] == (1, 4 + 1)
