"""The Trainer's other paths on 2 Horovod ranks: ``allreduce_grads(); update(n)``, GluonNLP's loop
against stock ``hvd.DistributedTrainer`` (with and without float16 compression), an NDArray count
of 0 without a backward, a Trainer without kvstore, checkpoints of different updates; and a
loop of one's own whose rank 0 reads its weights after flush() while the other rank leaves."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

from conftest import params_of
from horovod_run import horovodrun, require_horovod
from job_check import load_job

JOB = os.path.join(os.path.dirname(__file__), "horovod_paths_job.py")
RANKS = 2


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    require_horovod()
    out = tmp_path_factory.mktemp("paths")
    code, output = horovodrun(RANKS, [sys.executable, JOB, str(out)], timeout=240)
    assert code == 0, output[-3000:]
    return out


def _saved(out, name, rank):
    return {k: v.asnumpy() for k, v in nd.load(str(out / f"{name}-{rank}.params")).items()}


def one_process(job, optimizer):
    """Plain gluon.Trainer in one process: each update is one step on every rank's samples."""
    net = job.make_net()
    trainer = gluon.Trainer(net.collect_params(), optimizer, dict(job.OPTIMIZERS[optimizer]))
    x, y = job.dataset()
    for update in range(job.UPDATES):
        rows = np.concatenate([np.arange(64)[job.rows(r, RANKS, update)] for r in range(RANKS)])
        job.backward(net, x[rows], y[rows])
        trainer.step(len(rows))
    return params_of(net)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_allreduce_grads_then_update_with_local_counts_equals_step_and_one_process(job_dir, optimizer):
    expected = one_process(load_job(JOB), optimizer)
    for rank in range(RANKS):
        split, step = _saved(job_dir, f"split-{optimizer}", rank), _saved(job_dir, f"step-{optimizer}", rank)
        for name, value in expected.items():
            assert_allclose(split[name], step[name], rtol=1e-6, atol=1e-7, err_msg=f"rank {rank} {name}")
            # Adam divides by the root of the squared gradient: near-zero gradients magnify rounding
            assert_allclose(split[name], value, rtol=1e-5, atol=1e-6 if optimizer == "sgd" else 1e-4,
                            err_msg=f"rank {rank} {name}")


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("wire", ["nlp", "fp16"])
def test_gluonnlps_loop_on_gluonkit_equals_stock_horovod_distributed_trainer(job_dir, wire, optimizer):
    name = f"{wire}-{optimizer}"
    for rank in range(RANKS):
        kit, stock = _saved(job_dir, f"{name}-kit", rank), _saved(job_dir, f"{name}-stock", rank)
        for key, value in stock.items():
            assert_allclose(kit[key], value, rtol=1e-5, atol=1e-7, err_msg=f"rank {rank} {key}")
    # float16 on the wire rounds the gradients: the compressed run is not the exact one
    exact, compressed = _saved(job_dir, f"nlp-{optimizer}-kit", 0), _saved(job_dir, f"fp16-{optimizer}-kit", 0)
    assert any(not np.array_equal(exact[k], compressed[k]) for k in exact)


def test_an_ndarray_count_of_zero_without_a_backward_steps_like_the_number_zero(job_dir):
    for rank in range(RANKS):
        array, number = _saved(job_dir, "zero-array", rank), _saved(job_dir, "zero-number", rank)
        for key, value in number.items():
            assert_array_equal(array[key], value, err_msg=f"rank {rank} {key}")
    assert_array_equal(_saved(job_dir, "zero-array", 0)["0.weight"], _saved(job_dir, "zero-array", 1)["0.weight"])


def test_a_trainer_without_kvstore_under_horovodrun_warns_and_checkpoints_of_different_updates_are_refused(job_dir):
    for rank in range(RANKS):
        report = json.loads((job_dir / f"report-{rank}.json").read_text())
        assert report["warnings"] == [
            "This process is a rank of a job of 2 ranks (started by horovodrun or mpirun) but its Trainer's kvstore "
            "is 'device': each worker trains a copy of its own. Pass kvstore='horovod'."]
        mine, other = ("update 2", "update 1") if rank == 0 else ("update 1", "update 2")
        assert f"is at epoch 1, {mine} on rank {rank}, but rank {1 - rank} resumes from epoch 1, {other}" \
            in report["refusal"]
        assert "\n" not in report["refusal"] and report["unchanged"]
    # rank 1 has no checkpoint: each rank says so in its own words, and neither meets MXNet's shutdown
    reports = [json.loads((job_dir / f"report-{rank}.json").read_text())["missing"] for rank in range(RANKS)]
    assert reports[1] == (f"FileNotFoundError: No checkpoint in {str(job_dir / 'only-rank-0-1')!r}; save one "
                          "first, or start without resuming.")
    assert re.fullmatch(r"CheckpointError: Rank\(s\) 1 could not load their checkpoint \(their own error says "
                        rf"why\), so rank 0 does not resume from '{re.escape(str(job_dir / 'only-rank-0-0'))}/"
                        r"\d{6}-epoch0001\.ckpt' either: fix those ranks' checkpoints, or start every worker without "
                        r"resuming\.", reports[0]), reports[0]


def test_horovods_own_options_are_refused_on_another_kvstore_and_compression_params_names_the_fix():
    import gluonkit
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    with pytest.raises(ValueError, match=r"gradient_predivide_factor=2.0 is an option of Horovod's all-reduce, "
                                         r"given with kvstore='device'; use kvstore='horovod'"):
        gluonkit.Trainer(net.collect_params(), "sgd", gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match=r"compression_params=.* cannot be used with kvstore='horovod' \(it sets the "
                                         r"1-bit or 2-bit compression of MXNet's kvstores\); for Horovod's float16 "
                                         r"compression pass kvstore=gluonkit.trainer.Horovod\(compression="):
        gluonkit.Trainer(net.collect_params(), "sgd", kvstore="horovod", compression_params={"type": "fp16"})


@pytest.mark.parametrize("factor, error", [(0, ValueError), (-2, ValueError), (float("nan"), ValueError),
                                           ("2", TypeError)])
def test_a_gradient_predivide_factor_out_of_range_gets_one_message_whatever_the_value(factor, error):
    require_horovod()
    from gluonkit.trainer import Horovod
    with pytest.raises(error, match=r"^gradient_predivide_factor \(what gradients are divided by before the "
                                    rf"sum\) must be a finite number > 0, got {re.escape(repr(factor))}; use 1.0 "
                                    r"for none\.$"):
        Horovod(gradient_predivide_factor=factor)


def _loop_reference(job):
    """One process, plain Gluon: each update one step on both ranks' micro-batches of it."""
    net = job.make_net()
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    for first in range(0, job.STEPS, job.ACCUMULATE):
        parts = [job.batch(rank, step) for rank in range(RANKS)
                 for step in range(first, min(first + job.ACCUMULATE, job.STEPS))]
        x, y = (np.concatenate([p[i] for p in parts]) for i in (0, 1))
        with autograd.record():
            loss = job.loss_fn(net(nd.array(x)), nd.array(y))
        loss.backward()
        trainer.step(len(x))
    return params_of(net)


@pytest.mark.parametrize("threads, busy, runs", [(1, False, 1), (2, False, 2), (2, True, 1)])
def test_after_flush_rank_0_reads_its_weights_while_the_other_rank_leaves(tmp_path, threads, busy, runs):
    # the loop of one's own the Horovod users write: step(0) without a backward, flush, rank 0 saves
    require_horovod()
    job_path = os.path.join(os.path.dirname(__file__), "horovod_loop_job.py")
    expected = _loop_reference(load_job(job_path))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 if busy else 0)]
    try:
        for run in range(runs):
            out = tmp_path / str(run)
            out.mkdir()
            code, output = horovodrun(RANKS, [sys.executable, job_path, str(out)], timeout=150, threads=threads)
            assert code == 0, output[-3000:]
            got = {k: v.asnumpy() for k, v in nd.load(str(out / "rank0.params")).items()}
            for name, value in expected.items():
                assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=f"run {run} {name}")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
