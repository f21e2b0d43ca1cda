"""``gluonkit-classify``, ``gluonkit-multitask`` and ``gluonkit-detect`` on global batches: one
process, 2 dist_sync workers and 2 or 3 Horovod ranks end with the same exported model
(BatchNorm's running statistics included) and the same test accuracies; SSD on 1 process and
2 dist_sync workers with the same last checkpoint."""
import os
import re
import subprocess
import sys

import numpy as np
from mxnet import nd
from numpy.testing import assert_allclose, assert_array_equal

from horovod_run import horovodrun, require_horovod

CLASSIFY = os.path.join(os.path.dirname(sys.executable), "gluonkit-classify")
MULTITASK = os.path.join(os.path.dirname(sys.executable), "gluonkit-multitask")
DETECT = os.path.join(os.path.dirname(sys.executable), "gluonkit-detect")
# shuffled digits with flips off (the default CNN has BatchNorm); 4 micro-batches of 8 per update.
# The sums of the workers' gradients round otherwise than one process's (1e-7); on some data
# orders a max-pooling tie then turns and the runs part by 1e-3 in an update (measured: from
# the fifth update on --limit 300, and on --limit 256 on a CPU without AVX-512): 160 samples,
# 10 updates, keep every window away from such ties on the CPUs tried.
OPTIONS = ["--epochs", "2", "--limit", "160", "--batch-size", "32", "--micro-batch", "8", "--no-progress"]


def _exported(out):
    return {name: array.asnumpy() for name, array in nd.load(str(out / "model-0000.params")).items()}


def _test_accuracy(output):
    found = re.findall(r"test accuracy: ([a-z0-9., ]+) on \d+ images", output)
    assert len(found) == 1, output[-3000:]
    return found[0]


def _assert_same_model(expected, out):
    got = _exported(out)
    assert sorted(got) == sorted(expected)
    print(out.name, "largest difference:", max(float(np.abs(got[k] - v).max()) for k, v in expected.items()))
    for name, value in expected.items():   # float32 sums in another order, over 2 epochs
        assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{out.name} {name}")


def _one_process(command, out, cwd):
    """Start ``command`` on one process, to run alongside the distributed jobs compared with it;
    ``finished()`` waits for its end and gives it as a ``CompletedProcess``."""
    logs = {stream: open(cwd / f"{out.name}.{stream}", "w+") for stream in ("stdout", "stderr")}
    proc = subprocess.Popen([*command, "--out", str(out)], stdout=logs["stdout"], stderr=logs["stderr"], text=True,
                            cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"})

    def finished():
        try:
            proc.wait(300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        texts = {}
        for stream, log in logs.items():
            log.seek(0)
            texts[stream] = log.read()
            log.close()
        one = subprocess.CompletedProcess(proc.args, proc.returncode, **texts)
        assert one.returncode == 0, one.stderr[-3000:]
        return one

    return finished


def _two_workers(command, out, cwd):
    two = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "240", "--",
                          *command, "--kvstore", "dist_sync", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=cwd,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert two.returncode == 0, two.stderr[-3000:]
    return two.stdout + two.stderr


def _horovod_ranks(ranks, command, out, cwd):
    require_horovod()
    code, output = horovodrun(ranks, [*command, "--kvstore", "horovod", "--out", str(out)], timeout=300, cwd=cwd)
    assert code == 0, output[-3000:]
    return output


def test_one_process_two_workers_and_three_horovod_ranks_export_the_same_model(tmp_path):
    one = _one_process([CLASSIFY, *OPTIONS], tmp_path / "one", tmp_path)
    two = _two_workers([CLASSIFY, *OPTIONS], tmp_path / "two", tmp_path)
    one = one()
    assert ("global batch 32 (samples per update over 1 worker(s)), micro-batches of 8 (8 per device on 1), "
            "4 per global batch; each worker's share of a global batch, in micro-batches: 4 (") in one.stderr
    expected, accuracy = _exported(tmp_path / "one"), _test_accuracy(one.stdout)

    assert "in micro-batches: 2 (" in two and "updates per epoch" in two
    _assert_same_model(expected, tmp_path / "two")
    assert _test_accuracy(two) == accuracy

    output = _horovod_ranks(3, [CLASSIFY, *OPTIONS], tmp_path / "three", tmp_path)
    assert "in micro-batches: 2 (" in output and ", 1 (" in output
    _assert_same_model(expected, tmp_path / "three")
    assert _test_accuracy(output) == accuracy
    variances = [value for name, value in expected.items() if "running_var" in name]
    assert not any(np.allclose(value, 1.0) for value in variances)   # the statistics moved from their start


# 240 images in global batches of 32 (micro-batches of 8): 8 updates an epoch, the last of 16
# samples, whose 2 micro-batches leave the third Horovod rank without any
MULTITASK_OPTIONS = [MULTITASK, "--epochs", "2", "--train-size", "240", "--batch-size", "32", "--micro-batch", "8",
                     "--no-progress"]


def test_multitask_on_one_process_two_workers_and_three_horovod_ranks_exports_the_same_model(tmp_path):
    # the aux head trains on every 3rd update: on 1 process steps 8-11 of an epoch, on 2 workers
    # each worker's steps 4-5, on 3 ranks steps 4-5 of rank 0 and step 2 of the others
    one = _one_process(MULTITASK_OPTIONS, tmp_path / "one", tmp_path)
    two = _two_workers(MULTITASK_OPTIONS, tmp_path / "two", tmp_path)
    one = one()
    assert ("global batch 32 (samples per update over 1 worker(s)), micro-batches of 8 (8 per device on 1), "
            "4 per global batch; each worker's share of a global batch, in micro-batches: 4 (240 samples an "
            "epoch); 8 updates per epoch.") in one.stderr
    expected, accuracy = _exported(tmp_path / "one"), _test_accuracy(one.stdout)
    assert accuracy.startswith("digit ") and ", aux " in accuracy

    assert ("over 2 worker(s)), micro-batches of 8 (8 per device on 1), 4 per global batch; each worker's share "
            "of a global batch, in micro-batches: 2 (120 samples an epoch), 2 (120 samples an epoch); 8 updates "
            "per epoch.") in two
    _assert_same_model(expected, tmp_path / "two")
    assert _test_accuracy(two) == accuracy

    three = _horovod_ranks(3, MULTITASK_OPTIONS, tmp_path / "three", tmp_path)
    assert "in micro-batches: 2 (120 samples an epoch), 1 (64 samples an epoch), 1 (56 samples an epoch)" in three
    _assert_same_model(expected, tmp_path / "three")
    assert _test_accuracy(three) == accuracy


def test_multitask_with_missing_labels_on_three_horovod_ranks_exports_the_model_of_one_process(tmp_path):
    # every head on every micro-batch, each normalized by its labelled samples over the whole
    # global batch: the counts by head are summed over the ranks once per update
    command = [*MULTITASK_OPTIONS, "--missing-labels", "0.5"]
    one = _one_process(command, tmp_path / "one", tmp_path)
    three = _horovod_ranks(3, command, tmp_path / "three", tmp_path)
    one = one()
    _assert_same_model(_exported(tmp_path / "one"), tmp_path / "three")
    assert _test_accuracy(three) == _test_accuracy(one.stdout)


# YOLOv3 (BatchNorm) on 20 shapes images, global batches of 8 in micro-batches of 4 at a size
# drawn per global batch: 3 updates an epoch, the last of 4 images (one micro-batch: the second
# worker has none), with the flips and colour jitter seeded per image. One micro-batch per worker
# and update adds the gradients in the order one process does: YOLOv3's gradient jumps with the
# weights' last bits (a relative change of 1e-7 moved the first layer's by 15%), so sums in
# another order part the runs after an update or two, as docs/distributed.md says
DETECT_OPTIONS = [DETECT, "--limit", "20", "--epochs", "2", "--batch-size", "8", "--micro-batch", "4",
                  "--multiscale", "64,96", "--no-progress"]


def _mean_ap(output):
    found = re.findall(r"VOC07 mAP: ([0-9.]+) on \d+ images", output)
    assert len(found) == 1, output[-3000:]   # rank 0 reports
    return found[0]


def test_detect_on_one_process_two_workers_and_two_horovod_ranks_exports_the_same_model(tmp_path):
    one = _one_process(DETECT_OPTIONS, tmp_path / "one", tmp_path)
    two = _two_workers(DETECT_OPTIONS, tmp_path / "two", tmp_path)
    one = one()
    assert ("global batch 8 (samples per update over 1 worker(s)), micro-batches of 4 (4 per device on 1), "
            "2 per global batch; each worker's share of a global batch, in micro-batches: 2 (20 samples an "
            "epoch); 3 updates per epoch.") in one.stderr
    expected, mean_ap = _exported(tmp_path / "one"), _mean_ap(one.stdout)
    shares = "in micro-batches: 1 (12 samples an epoch), 1 (8 samples an epoch); 3 updates per epoch."

    assert "on shapes (20 images, classes" in two and shares in two   # every worker reads every image
    _assert_same_model(expected, tmp_path / "two")
    assert _mean_ap(two) == mean_ap
    for name in ("history.csv", "model.json", "predictions.png"):
        assert (tmp_path / "two" / name).is_file(), name

    ranks = _horovod_ranks(2, DETECT_OPTIONS, tmp_path / "hvd", tmp_path)
    assert shares in ranks
    _assert_same_model(expected, tmp_path / "hvd")
    assert _mean_ap(ranks) == mean_ap
    variances = [value for name, value in expected.items() if "running_var" in name]
    assert variances and not any(np.allclose(value, 1.0) for value in variances)


# SSD, whose features GluonCV builds as a SymbolBlock: the backbone's BatchNorm layers exported
# to a symbol graph and mx.sym.BatchNorm layers (momentum 0.9). 12 shapes images in global
# batches of 8, micro-batches of 4: 2 updates an epoch, the last of one micro-batch (the second
# worker runs none of it)
SSD_OPTIONS = [DETECT, "--model", "ssd_300_mobilenet0.25_custom", "--limit", "12", "--epochs", "2",
               "--image-size", "64", "--batch-size", "8", "--micro-batch", "4", "--no-progress"]


def _last_checkpoint(out):
    """The arrays of the epoch-2 checkpoint in ``out``, by structural name."""
    [path] = out.glob("*-epoch0002.ckpt")
    with np.load(path) as arrays:
        return {name[len("params/"):]: arrays[name] for name in arrays.files if name.startswith("params/")}


def test_ssd_on_one_process_and_two_workers_ends_with_the_same_weights_and_running_statistics(tmp_path):
    # the exports hold the epoch of the best val_mAP, which the float rounding of the statistics
    # can tie otherwise (measured: epoch 2 on 1 process, epoch 1 on 2 workers): the last epoch's
    # checkpoints are compared
    one = _one_process(SSD_OPTIONS, tmp_path / "one", tmp_path)
    _two_workers(SSD_OPTIONS, tmp_path / "two", tmp_path)
    one()
    expected = _last_checkpoint(tmp_path / "one" / "checkpoints")
    got, second = (_last_checkpoint(tmp_path / "two" / "checkpoints" / rank) for rank in ("", "rank-1"))
    statistics = [name for name in expected if name.endswith(("running_mean", "running_var", "moving_mean",
                                                              "moving_var"))]
    assert len(statistics) == 70 and "features.expand_bn0_moving_var" in statistics
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():   # measured: weights bit-identical, statistics within 7e-7 of the largest
        assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    for name in statistics:   # every worker holds the merged statistics. (Not every weight: the forward of
        # a BatchNorm of fix_gamma=True writes 1 into its gamma, which the weight decay then moves,
        # so the worker without a micro-batch in an update keeps another, unused, gamma.)
        assert_array_equal(second[name], got[name], err_msg=name)
    assert not any(np.allclose(expected[name], 1.0) for name in statistics if name.endswith("var"))


# Faster R-CNN samples each image's regions from MXNet's generator, seeded with the image's own
# region seed: 8 shapes images in global batches of 2 (one image per worker and update)
RCNN_OPTIONS = [DETECT, "--model", "faster_rcnn_mobilenet0.25_custom", "--limit", "8", "--epochs", "2",
                "--image-size", "64", "--batch-size", "2", "--no-progress"]


def test_faster_rcnn_on_one_process_and_two_workers_ends_with_the_same_weights_and_running_statistics(tmp_path):
    one = _one_process(RCNN_OPTIONS, tmp_path / "one", tmp_path)
    _two_workers(RCNN_OPTIONS, tmp_path / "two", tmp_path)
    one()
    expected, got = (_last_checkpoint(tmp_path / run / "checkpoints") for run in ("one", "two"))
    statistics = [name for name in expected if name.endswith(("running_mean", "running_var"))]
    assert sorted(got) == sorted(expected) and "top_features.7.running_var" in statistics
    for name, value in expected.items():   # measured: weights bit-identical, statistics within 1.1e-6 of the largest
        if name in statistics:
            assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            assert_array_equal(got[name], value, err_msg=name)
    assert not any(np.allclose(expected[name], 1.0) for name in statistics if name.endswith("var"))

    refused = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--", *RCNN_OPTIONS,
                              "--micro-batch", "2", "--batch-size", "4", "--kvstore", "dist_sync",
                              "--out", str(tmp_path / "refused")], capture_output=True, text=True, timeout=300,
                             cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "2 images per device in a micro-batch (--micro-batch or --per-device): Faster R-CNN on several workers runs one" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "refused").exists()
