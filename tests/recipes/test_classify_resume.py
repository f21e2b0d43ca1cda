"""gluonkit-classify stopped and resumed as a user does it: a model-zoo network with BatchNorm on
two devices with accumulation, an image folder read by worker processes, SIGTERM inside an
accumulation window."""
import os
import signal
import subprocess
import sys
import threading
import time

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluonkit.callbacks import Callback
from conftest import CLONE_ENV
from gluonkit.recipes import classify


class StopAt(Callback):
    """Sends this process SIGTERM after batch ``batch`` of epoch ``epoch`` (both from 1)."""

    def __init__(self, epoch, batch):
        self.epoch, self.batch = epoch, batch

    def on_batch_end(self, state):
        if (state.epoch + 1, state.batch) == (self.epoch, self.batch):
            os.kill(os.getpid(), signal.SIGTERM)


def image_folder(root, per_class=(10, 3)):
    """DIR/train and DIR/val, two classes of random 36x36 PNGs (crops and flips apply)."""
    rng = np.random.RandomState(0)
    for split, count in zip(("train", "val"), per_class):
        for name in ("a", "b"):
            os.makedirs(root / split / name)
            for i in range(count):
                cv2.imwrite(str(root / split / name / f"{i}.png"),
                            rng.randint(0, 256, (36, 36, 3), dtype=np.uint8))
    return root


def exported_arrays(out):
    """The exported parameters in file order (their names carry Gluon's block counters)."""
    return [array.asnumpy() for array in mx.nd.load(str(out / "model-0000.params")).values()]


def test_a_stop_inside_a_window_on_two_devices_with_batchnorm_resumes_bit_identical(tmp_path):
    # 5 batches of 4 per epoch, windows of 2: the stop after batch 3 of epoch 1 falls inside
    # the second window, after the first update (the kvstore set up, each device's BatchNorm
    # statistics its own), so every exported epoch is trained after the stop
    data = image_folder(tmp_path / "photos")
    # every sample's crop and flip drawn from a seed of its own: the run in this process alone,
    # the stopped one with 2 worker processes and its resume with 1 are one run
    argv = ["--no-progress", "--dataset", f"imagefolder:{data}", "--model", "cifar_resnet20_v1",
            "--ctx", "cpu:0,cpu:1", "--batch-size", "8", "--micro-batch", "2", "--epochs", "2"]
    straight = classify.train(classify.parse_args(argv + ["--out", str(tmp_path / "a"),
                                                          "--num-workers", "0"]))
    with pytest.raises(SystemExit) as stop:
        classify.train(classify.parse_args(argv + ["--out", str(tmp_path / "b"), "--num-workers", "2"]),
                       callbacks=[StopAt(1, 3)])
    assert stop.value.code == 128 + signal.SIGTERM
    resumed = classify.train(classify.parse_args(["--no-progress", "--out", str(tmp_path / "b"),
                                                  "--resume", "--num-workers", "1"]))
    assert resumed["export"]["epoch_trained"] == straight["export"]["epoch_trained"]
    for got, want in zip(exported_arrays(tmp_path / "b"), exported_arrays(tmp_path / "a"),
                         strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(resumed["net"].collect_params().values(),
                         straight["net"].collect_params().values(), strict=True):
        for ctx in (mx.cpu(0), mx.cpu(1)):     # each device's BatchNorm statistics too
            np.testing.assert_array_equal(got.data(ctx).asnumpy(), want.data(ctx).asnumpy(),
                                          err_msg=got.name)
    assert resumed["history"]["val_accuracy"] == straight["history"]["val_accuracy"]


def _processes_led_by(leader):
    """The processes left that ``leader`` leads (it was started with start_new_session; ``ps -s``)."""
    out = subprocess.run(["ps", "-o", "pid=", "-s", str(leader)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def test_sigterm_to_the_process_group_with_workers_stops_with_a_checkpoint_and_resumes_exactly(tmp_path):
    # kill -- -PGID, docker stop, a scheduler: the data workers get the SIGTERM too; the run
    # exits 143 after its checkpoint (it hung in the pool's clean-up), nothing is left running
    data = image_folder(tmp_path / "photos", per_class=(24, 3))
    argv = ["--no-progress", "--dataset", f"imagefolder:{data}", "--image-size", "16", "--batch-size", "2",
            "--epochs", "4"]
    command = [sys.executable, "-m", "gluonkit.recipes.classify"] + argv
    run = subprocess.Popen(command + ["--out", str(tmp_path / "b"), "--num-workers", "2"],
                           cwd=tmp_path, env=CLONE_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
    reader.start()
    while not any("epoch 1/4" in line for line in lines) and run.poll() is None:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGTERM)
    try:
        code = run.wait(timeout=120)
    finally:
        left = _processes_led_by(run.pid)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    reader.join(5)
    assert code == 128 + signal.SIGTERM, "".join(lines)[-3000:]
    assert left == [] and any("stopped by SIGTERM" in line for line in lines)
    out = tmp_path / "b"   # the last line says how to continue, as done here
    assert lines[-1] == (f"gluonkit-classify: stopped with its checkpoint in {out}; gluonkit-classify --out {out} "
                         "--resume continues the run (its options recorded in args.json).\n"), lines[-3:]
    resumed = classify.train(classify.parse_args(["--no-progress", "--out", str(tmp_path / "b"),
                                                  "--resume", "--num-workers", "1"]))
    straight = classify.train(classify.parse_args(argv + ["--out", str(tmp_path / "a"),
                                                          "--num-workers", "0"]))
    for got, want in zip(exported_arrays(tmp_path / "b"), exported_arrays(tmp_path / "a"), strict=True):
        np.testing.assert_array_equal(got, want)
    assert resumed["history"]["val_accuracy"] == straight["history"]["val_accuracy"]
