"""The classification recipe with ``--kvstore horovod`` under ``horovodrun --gloo -np 2`` on loopback."""
import csv
import os
import re
import shutil
import signal
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

import gluonkit
from gluonkit.recipes import classify
from horovod_run import horovodrun, rank_pids, require_horovod, start

CLASSIFY = os.path.join(os.path.dirname(sys.executable), "gluonkit-classify")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPTIONS = ["--kvstore", "horovod", "--limit", "400", "--batch-size", "16", "--no-progress"]


def _history(out):
    with open(out / "history.csv") as f:
        return list(csv.DictReader(f))


def _weights(path):
    return {name: array.asnumpy() for name, array in nd.load(str(path)).items()}


def _classify(tmp_path, *options):
    code, output = horovodrun(2, [CLASSIFY, *OPTIONS, *options], timeout=240, cwd=tmp_path)
    assert code == 0, output[-3000:]
    return output


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """``git clone URL gluonkit`` and the README's horovodrun line from its parent folder, for 1
    epoch (OMP_WAIT_POLICY unset, as in a user's shell): the run folder, which the resume test
    copies and continues too."""
    require_horovod()
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(os.path.join(ROOT, "recipes"), folder / "gluonkit" / "recipes")
    _classify(folder, "--epochs", "1", "--out", str(folder / "run"))
    return folder / "run"


def test_classify_on_two_horovod_ranks_tests_the_export_on_the_whole_test_split_and_resumes_exactly(
        tmp_path, readme_run):
    require_horovod()
    never, resumed = tmp_path / "never", tmp_path / "resumed"
    run = start(2, [CLASSIFY, *OPTIONS, "--epochs", "2", "--out", str(never)], timeout=240, cwd=tmp_path)
    shutil.copytree(readme_run, resumed)   # 1 epoch of the same options; resumed alongside the run never stopped
    resumed_output = _classify(tmp_path, "--epochs", "2", "--resume", "--out", str(resumed))
    code, output = run.finish()
    assert code == 0, output[-3000:]
    assert output.count("Training cnn on digits (") == 1   # rank 0 speaks
    tested = re.findall(r"test accuracy: ([0-9.]+) on (\d+) images of the test split", output)
    assert len(tested) == 1, output[-3000:]
    accuracy, images = float(tested[0][0]), int(tested[0][1])
    assert images == 359   # the whole test split (--limit 400 keeps it all), not a rank's half
    rows = _history(never)
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    # the test figure is the exported model's on that whole split, counted by hand
    test = gluonkit.data.digits(train=False)
    x, y = (np.stack(a) for a in zip(*[test[i] for i in range(len(test))]))
    model = mx.gluon.SymbolBlock.imports(str(never / "model-symbol.json"), ["data"],
                                         str(never / "model-0000.params"))
    assert abs(np.mean(model(nd.array(x)).argmax(axis=1).asnumpy() == y) - accuracy) < 1e-4
    assert sorted(os.listdir(never)) == ["args.json", "checkpoints", "curves.png", "history.csv",
                                         "model-0000.params", "model-symbol.json", "model.json", "model.onnx"]
    assert output.count("exported epoch") == 1

    assert "Resumed from" in resumed_output
    for key in ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr"):
        assert [r[key] for r in _history(resumed)] == [r[key] for r in _history(never)], key
    expected, got = _weights(never / "model-0000.params"), _weights(resumed / "model-0000.params")
    assert set(got) == set(expected)
    for name in expected:
        assert np.array_equal(got[name], expected[name]), name


def test_the_readmes_horovod_line_runs_from_the_folder_that_holds_a_clone_named_gluonkit(readme_run):
    """Both ranks start the command once and train (``readme_run``)."""
    assert (readme_run / "model-symbol.json").exists()
    assert len(_history(readme_run)) == 1


@pytest.mark.parametrize("kvstore, message", [
    ("horovod", "gluonkit-classify: --kvstore horovod: kvstore='horovod' needs"),
    ("horovd", "gluonkit-classify: --kvstore horovd is not a kvstore (did you mean horovod?); use one of"),
])
def test_classify_with_a_kvstore_it_cannot_use_says_so_in_one_line(tmp_path, monkeypatch, kvstore, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HOROVOD_RANK", raising=False)
    with pytest.raises(SystemExit) as info:
        classify.main(["--kvstore", kvstore, "--epochs", "1", "--limit", "40", "--out", "", "--no-progress"])
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.skipif(not hasattr(gluonkit.Trainer, "request_stop"),
                    reason="a signal stops every rank after the same update only with the workers' stop "
                           "agreement (Trainer.request_stop) of the distributed stop-and-resume work")
def test_classify_stopped_by_sigterm_on_both_ranks_then_resumed_ends_like_the_run_never_stopped(tmp_path):
    require_horovod()
    # batches per worker: on global batches a mid-epoch resume gives the weights bit for bit, and the
    # running statistics merged over the workers to float rounding (tests/distributed/test_stop_and_resume.py)
    # --limit 800: 400 training images a rank, 50 updates an epoch (the test split whole)
    options = ["--kvstore", "horovod", "--epochs", "3", "--limit", "800", "--batch-size", "8", "--per-worker-batch",
               "--no-progress"]
    never, stopped = tmp_path / "never", tmp_path / "stopped"
    reference = start(2, [CLASSIFY, *options, "--out", str(never)], timeout=400, cwd=tmp_path)
    run = start(2, [CLASSIFY, *options, "--out", str(stopped)], timeout=300, cwd=tmp_path)
    # SIGTERM to both ranks, as a cluster's preemption sends it: not through horovodrun, which
    # kills the ranks 5 s after it passes a signal on, however far their checkpoints got
    run.wait_for(r"Training cnn on digits \(")   # the ranks run (found now, signalled at once below)
    ranks = rank_pids(run, 2)
    if sorted(ranks) != [0, 1]:
        run.proc.kill()   # leaves no job training on: horovodrun's helpers end the ranks when it dies
        pytest.fail(f"found ranks {ranks} below horovodrun; output:\n" + "".join(run.seen[-40:]))
    run.wait_for(r"epoch 1/3: ")   # rank 0 finished epoch 1 (after every rank's last update of it)
    for pid in ranks.values():
        os.kill(pid, signal.SIGTERM)
    code, output = run.finish()
    assert code != 0, output[-3000:]
    assert output.count("SIGTERM received") == 2, output[-3000:]   # both ranks were asked to stop
    # both ranks stopped after the same update of epoch 2 and wrote their checkpoints; neither
    # was cut short when the other exited (horovodrun then ends the rest)
    assert output.count("training stopped by SIGTERM after 1 epoch(s)") == 2, output[-3000:]
    for folder in (stopped / "checkpoints", stopped / "checkpoints" / "rank-1"):
        assert sorted(p.name for p in folder.glob("0*.ckpt")) == ["000001-epoch0001.ckpt", "000002-epoch0001.ckpt"]
    assert not (stopped / "model-symbol.json").exists()            # stopped before the export
    code, output = horovodrun(2, [CLASSIFY, *options, "--out", str(stopped), "--resume"], timeout=300, cwd=tmp_path)
    assert code == 0, output[-3000:]
    assert "Resumed from" in output
    code, output = reference.finish()
    assert code == 0, output[-3000:]
    for key in ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr"):
        assert [r[key] for r in _history(stopped)] == [r[key] for r in _history(never)], key
    expected, got = _weights(never / "model-0000.params"), _weights(stopped / "model-0000.params")
    assert set(got) == set(expected)
    for name in expected:
        assert np.array_equal(got[name], expected[name]), name
