"""Counts by head over 2 workers (dist_sync and Horovod, uneven shards) equal one process
stepping each update's large batch with the loss L = sum over heads of S_h / N_h."""
import os
import subprocess
import sys

import mxnet as mx
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

from conftest import params_of
from horovod_run import horovodrun, require_horovod
from job_check import load_job

JOB = os.path.join(os.path.dirname(__file__), "heads_job.py")


def _reference(job, out_dir):
    """One process, plain Gluon: each update one large batch, each head divided by its count."""
    net = job.ThreeHeads()
    net.load_parameters(os.path.join(out_dir, "initial.params"), ctx=mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    x, labels, masks = job.dataset()
    for update in range(len(job.SIZES)):
        rows = [i for u, _, begin, end in job.micro_batches() if u == update for i in range(begin, end)]
        with autograd.record():
            losses = job.losses(net, x, labels, masks, rows, mx.cpu())
            loss = nd.add_n(*(losses[h].sum() / masks[h][rows].sum() for h in job.HEADS if masks[h][rows].sum()))
        loss.backward()
        trainer.step(1, ignore_stale_grad=True)   # a head of count 0 in an update: not updated
    return params_of(net)


def _check(job, out_dir):
    expected = _reference(job, out_dir)
    for rank in (0, 1):
        got = nd.load(str(out_dir / f"worker{rank}.params"))
        for name, value in expected.items():
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"worker {rank} {name}")


def test_two_dist_sync_workers_with_uneven_shards_update_like_one_large_batch(tmp_path):
    command = [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "90", "--",
               sys.executable, JOB, str(tmp_path), "dist_sync"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    _check(load_job(JOB), tmp_path)


def test_two_horovod_ranks_with_uneven_shards_update_like_one_large_batch(tmp_path):
    require_horovod()
    code, output = horovodrun(2, [sys.executable, JOB, str(tmp_path), "horovod"], timeout=150)
    assert code == 0, output[-3000:]
    _check(load_job(JOB), tmp_path)
