"""What the distributed tests compare a launched job with: one process on all the samples."""
import importlib.util
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

from gluonkit.params import select

__all__ = ["JOB", "load_job", "assert_trained_like_one_process"]

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_job.py")


def load_job(path=JOB):
    """A job script as a module, for its data, network and settings."""
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


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


def assert_trained_like_one_process(out_dir):
    """Both workers' final weights (``dist_job.py OUT_DIR train``) equal the single-process reference."""
    job = load_job()
    reference = _single_process_reference(job, out_dir)
    expected = {name: p.data().asnumpy() for name, p in select(reference).items()}
    initial = nd.load(os.path.join(out_dir, "initial.params"))
    for rank in (0, 1):
        got = nd.load(os.path.join(out_dir, f"worker{rank}.params"))
        assert set(got) == set(expected)
        for name, value in expected.items():
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"worker {rank} {name}")
            assert not np.allclose(value, initial[name].asnumpy())  # training moved every parameter
