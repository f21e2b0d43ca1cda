"""gluonkit.Trainer(kvstore='horovod') on 2 and 3 ranks on loopback (rank 1 on two devices) equals one process
on all the samples."""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

import gluonkit
from conftest import params_of
from horovod_run import horovodrun, require_horovod
from job_check import load_job

JOB = os.path.join(os.path.dirname(__file__), "horovod_job.py")


def _reference(job, ranks, out_dir):
    """One process, plain Gluon: each update is the large weighted batch, normalized by its
    weights, clipped once; the update holding a NaN is left out."""
    net = job.make_net()
    net.load_parameters(os.path.join(out_dir, "initial.params"), ctx=mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), job.OPTIMIZER[0], dict(job.OPTIMIZER[1]))
    x, y = job.dataset()
    norms = []
    for update in range(len(job.SIZES[ranks])):
        if update == job.NAN_UPDATE:
            norms.append(None)
            continue
        parts = [(rank, begin, end) for u, rank, begin, end in job.micro_batches(ranks) if u == update]
        rows = [i for _, begin, end in parts for i in range(begin, end)]
        w = np.concatenate([job.weights(rank, begin, end) for rank, begin, end in parts])
        with autograd.record():
            loss = job.loss_fn(net(nd.array(x[rows])), nd.array(y[rows]), nd.array(w))
        loss.backward()
        grads = [p.grad() for p in net.collect_params().values()]
        for g in grads:
            g /= float(w.sum())
        norms.append(gluon.utils.clip_global_norm(grads, job.CLIP))
        trainer.step(1)
    return net, norms


@pytest.mark.parametrize("ranks", [2, 3])
def test_horovod_ranks_with_uneven_and_empty_micro_batches_update_like_one_process(tmp_path, ranks):
    require_horovod()
    code, output = horovodrun(ranks, [sys.executable, JOB, str(tmp_path)], timeout=150)
    assert code == 0, output[-3000:]
    job = load_job(JOB)
    reference, norms = _reference(job, ranks, tmp_path)
    assert all(n > 2 * job.CLIP for n in norms if n is not None)   # every applied update was clipped
    expected = params_of(reference)
    initial = nd.load(str(tmp_path / "initial.params"))
    for rank in range(ranks):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["ranks"] == ranks
        assert report["applied"] == [True, False, True] and report["skips"] == 1
        assert_allclose(report["norms"][0], norms[0], rtol=1e-5)
        assert_allclose(report["norms"][2], norms[2], rtol=1e-5)
        got = nd.load(str(tmp_path / f"rank{rank}.params"))
        for name, value in expected.items():
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank} {name}")
            assert not np.allclose(value, initial[name].asnumpy())   # training moved every parameter
    # a deferred network: each rank's own initial weights, rank 0's after the first update on every rank
    first = nd.load(str(tmp_path / "rank0-deferred.params"))
    for rank in range(1, ranks):
        assert not np.allclose(nd.load(str(tmp_path / f"rank{rank}-deferred-initial.params"))["weight"].asnumpy(),
                               nd.load(str(tmp_path / "rank0-deferred-initial.params"))["weight"].asnumpy())
        got = nd.load(str(tmp_path / f"rank{rank}-deferred.params"))
        for name, value in first.items():
            assert np.array_equal(got[name].asnumpy(), value.asnumpy()), (rank, name)


def _net():
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    return net


@pytest.mark.parametrize("options, message", [
    ({"update_on_kvstore": True}, "update_on_kvstore=True cannot be used with kvstore='horovod'"),
    ({"compression_params": {"type": "2bit", "threshold": 0.5}}, "cannot be used with kvstore='horovod'"),
])
def test_what_horovod_cannot_do_is_refused_before_horovod_starts(options, message):
    with pytest.raises(ValueError, match=message):
        gluonkit.Trainer(_net().collect_params(), "sgd", kvstore="horovod", **options)


def test_horovod_outside_horovodrun_says_how_to_start_the_job(monkeypatch):
    require_horovod()
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match=r"needs a job started by horovodrun .*horovodrun --gloo -np 2"):
        gluonkit.Trainer(_net().collect_params(), "sgd", kvstore="HOROVOD")


def test_horovod_not_installed_gives_the_command_that_builds_it():
    # a fresh process in which `import horovod` fails, as where it was never installed
    code = ("import sys; sys.modules['horovod'] = None\n"
            "import mxnet as mx, gluonkit\n"
            "net = mx.gluon.nn.Dense(2, in_units=3); net.initialize()\n"
            "try:\n"
            "    gluonkit.Trainer(net.collect_params(), 'sgd', kvstore='horovod')\n"
            "except ImportError as err:\n"
            "    print(err)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "kvstore='horovod' needs Horovod built for MXNet" in result.stdout
    assert "HOROVOD_WITH_MXNET=1" in result.stdout and "--no-build-isolation horovod==0.28.1" in result.stdout


def test_fit_on_two_ranks_validates_alike_and_early_stopping_stops_both_after_the_same_epoch(tmp_path):
    require_horovod()
    job = os.path.join(os.path.dirname(__file__), "horovod_fit_job.py")
    code, output = horovodrun(2, [sys.executable, job, str(tmp_path)], timeout=200)
    assert code == 0, output[-3000:]
    reports = [json.loads((tmp_path / f"fit{rank}.json").read_text()) for rank in (0, 1)]
    assert reports[0]["epochs"] == reports[1]["epochs"] == [1, 2, 3]   # epoch 1, then 2 without improvement
    assert reports[0]["val_loss"] == reports[1]["val_loss"]
    assert reports[0]["val_accuracy"] == reports[1]["val_accuracy"]
    assert reports[0]["shard"] + reports[1]["shard"] == len(gluonkit.data.digits())


def test_a_sigterm_to_one_rank_stops_both_and_neither_leaves_before_the_other_ended_training(tmp_path):
    # horovodrun ends the other ranks as soon as one exits: rank 1, slow to write its
    # checkpoint, would be cut short if rank 0 left fit without waiting for it
    require_horovod()
    job = os.path.join(os.path.dirname(__file__), "horovod_fit_job.py")
    code, output = horovodrun(2, [sys.executable, job, str(tmp_path), "stop"], timeout=200)
    assert output.count("SIGTERM received") == 1, output[-3000:]            # rank 0's own
    assert output.count("training stopped by SIGTERM after 0 epoch(s) and 4 update(s)") == 2, output[-3000:]
    assert (tmp_path / "ended1").read_text() == "0 4"
    # what the user sees (docs/distributed.md): the ranks exit 143, horovodrun 1 with its traceback
    assert code == 1, output[-3000:]
    assert "Horovod detected that one or more processes exited with non-zero status" in output
    assert "Exit code: 143" in output
    net = gluon.nn.Dense(10, in_units=64)
    net.initialize()
    for rank, folder in enumerate(("checkpoints", "checkpoints/rank-1")):   # both complete, at the stop
        saved = gluonkit.Checkpoint(tmp_path / folder).load(net, gluonkit.Trainer(net.collect_params(), "sgd"))
        assert (saved["epoch"], saved["fit"]["batch"]) == (0, 4), rank
