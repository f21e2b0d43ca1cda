"""gluonkit-classify stopped and resumed as a user does it: a model-zoo network with BatchNorm on
two devices with accumulation, an image folder read by worker processes, SIGTERM inside an
accumulation window."""
import os
import signal

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluonkit.callbacks import Callback
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
            "--ctx", "cpu:0,cpu:1", "--accumulate", "2", "--batch-size", "4", "--epochs", "2"]
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
