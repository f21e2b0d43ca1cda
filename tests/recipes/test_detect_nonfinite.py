"""A detector whose boxes overflow (a YOLOv3 whose box sizes exp() past float32, as a run too
short or diverged gives): the run's last lines say so, and gluonkit-predict names the output
that is not finite."""
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np
import pytest

import gluonkit
from conftest import CLONE_ENV
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect
from gluonkit.recipes import detection as det
from gluonkit.recipes import detection_serving as serving


@pytest.fixture(scope="module")
def overflowing():
    """A YOLOv3 of the shapes' classes whose box-size predictions overflow to infinity."""
    classes = list(ShapesDetection("val").classes)
    net = det.initialize(det.build_detector("yolo3_mobilenet0.25_custom", classes), [mx.cpu()])
    for name, param in net.collect_params().items():
        if "yolooutputv3" in name and name.endswith("bias"):
            param.set_data(mx.nd.full(param.shape, 200.0))      # exp(200) is past float32
    return det.nms_for_eval(net, "yolo3"), classes


def test_the_runs_last_lines_say_its_boxes_are_not_finite(overflowing):
    net, classes = overflowing
    val = ShapesDetection("val", length=4)
    _, loader = detect.make_loaders(net, "yolo3", val, val, 2, image_size=64)
    detections = serving.validation_detections(net, loader, val, False, mx.cpu())
    assert detections.nonfinite == [0, 1, 2, 3]
    assert all(np.isfinite(boxes).all() for _, _, boxes in detections)   # clipped for the mAP
    notes = detect._data_notes([None, None], val, detections)
    assert len(notes) == 1 and notes[0].startswith(
        "warning: the network gives non-finite box corners (NaN or infinity) on 4 of 4 "
        "validation images")
    assert "too short or diverged" in notes[0] and "--clip-global-norm" in notes[0]


def test_predict_names_the_output_that_is_not_finite(overflowing, tmp_path):
    net, classes = overflowing
    gluonkit.export_model(net, str(tmp_path / "model"), (3, 64, 64), outputs=classes,
                          kind="detector", preprocessing={"channels": 3, "resize": [64, 64],
                                                          "scale": 1 / 255})
    image = tmp_path / "shape.png"
    cv2.imwrite(str(image), ShapesDetection("val", length=1)[0][0].asnumpy()[:, :, ::-1])
    proc = subprocess.run([sys.executable, "-m", "gluonkit.recipes.predict", "--model",
                           str(tmp_path / "model"), str(image)], env=CLONE_ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "gives non-finite box corners (NaN or infinity: " in proc.stderr, proc.stderr
    assert "training diverged or was too short" in proc.stderr
