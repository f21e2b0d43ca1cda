"""Clipping and counts over 2 workers on loopback equal one process clipping the large batch once."""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

from conftest import params_of
from job_check import load_job

JOB = os.path.join(os.path.dirname(__file__), "clip_job.py")


def _reference(job, out_dir):
    """One process, plain Gluon: each applied update is the large batch, normalized, clipped once."""
    net = job.make_net()
    net.load_parameters(os.path.join(out_dir, "initial.params"), ctx=mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    x, y = job.dataset()
    norms = []
    for update in range(len(job.SIZES)):
        if update == job.NAN_UPDATE:
            norms.append(None)
            continue
        rows = [i for u, _, begin, end in job.micro_batches() if u == update for i in range(begin, end)]
        with autograd.record():
            loss = job.loss_fn(net(nd.array(x[rows])), nd.array(y[rows]))
        loss.backward()
        grads = [p.grad() for p in net.collect_params().values()]
        for g in grads:
            g /= len(rows)
        norms.append(gluon.utils.clip_global_norm(grads, job.CLIP))
        trainer.step(1)
    return net, norms


def test_two_workers_clip_the_global_gradient_once_and_drop_a_window_with_nan_on_one(tmp_path):
    command = [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "90", "--",
               sys.executable, JOB, str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    job = load_job(JOB)
    reference, norms = _reference(job, tmp_path)
    assert all(n > 2 * job.CLIP for n in norms if n is not None)   # every applied update was clipped
    expected = params_of(reference)
    for rank in (0, 1):
        with open(tmp_path / f"worker{rank}.json") as f:
            report = json.load(f)
        assert report["applied"] == [True, False, True] and report["skips"] == 1
        assert_allclose(report["norms"][0], norms[0], rtol=1e-5)
        assert_allclose(report["norms"][2], norms[2], rtol=1e-5)
        got = nd.load(str(tmp_path / f"worker{rank}.params"))
        for name, value in expected.items():
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"worker {rank} {name}")
            assert np.isfinite(got[name].asnumpy()).all()
