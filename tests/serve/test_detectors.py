"""The detect recipe's model.onnx in onnxruntime (gluonkit-serve, no MXNet) finds the boxes
that gluonkit.predict finds with the MXNet export: YOLOv3 and SSD, each trained by the recipe
for a short run; Faster R-CNN's loads and runs on images of their own sizes."""
import cv2
import numpy as np
import pytest

import gluonkit
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect
from serve_env import serve_json, serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

# model -> (recipe options of a short run whose network gives boxes, the score threshold)
RUNS = {
    # two steps at a small learning rate: YOLOv3's objectness is still above its 0.01 cut
    "yolo3_mobilenet0.25_custom": (["--limit", "8", "--epochs", "1", "--batch-size", "4",
                                    "--lr", "0.0001"], 0.05),
    # SSD's box regression needs some steps before its boxes are finite
    "ssd_300_mobilenet0.25_custom": (["--limit", "64", "--epochs", "4", "--batch-size", "8"],
                                     0.01),
}
FASTER_RCNN = ["--model", "faster_rcnn_mobilenet0.25_custom", "--limit", "4", "--epochs", "1",
               "--batch-size", "2", "--image-size", "96", "--no-progress"]


def _images(folder, size):
    """Validation images of the shapes set, at the network's input size where it has one (so
    that no resize runs: OpenCV's and NumPy's may differ by one level of 255)."""
    folder.mkdir()
    val = ShapesDetection("val")
    for i in range(6):
        image = val[i][0].asnumpy()
        if size:
            image = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(folder / f"{i}.png"), image[:, :, ::-1])
    return folder


@pytest.mark.parametrize("model", list(RUNS))
def test_detector_served_finds_the_boxes_mxnet_finds(serve_python, tmp_path, model):
    options, threshold = RUNS[model]
    out = tmp_path / "run"
    detect.train(detect.parse_args([*options, "--model", model, "--image-size", "96",
                                    "--out", str(out), "--no-progress"]))
    assert (out / "model.onnx").is_file()
    images = _images(tmp_path / "images", 0 if model.startswith("faster") else 96)
    expected = gluonkit.predict(str(out / "model"), [str(images)], score_threshold=threshold)
    served = serve_json(serve_python, out / "model.onnx", images, "--score-threshold",
                        str(threshold))
    assert sum(len(r["boxes"]) for r in expected) >= 3          # the outputs are not trivial
    assert [r["image"] for r in served] == [r["image"] for r in expected]
    for got, want in zip(served, expected):
        assert (got["width"], got["height"]) == (want["width"], want["height"])
        assert [b["class"] for b in got["boxes"]] == [b["class"] for b in want["boxes"]], got["image"]
        np.testing.assert_allclose([b["score"] for b in got["boxes"]],
                                   [b["score"] for b in want["boxes"]], atol=1e-4)
        np.testing.assert_allclose(np.reshape([b["box"] for b in got["boxes"]], (-1, 4)),
                                   np.reshape([b["box"] for b in want["boxes"]], (-1, 4)), atol=0.5)


def test_faster_rcnn_model_onnx_runs_on_images_of_their_own_sizes(serve_python, tmp_path):
    out = tmp_path / "run"
    detect.train(detect.parse_args([*FASTER_RCNN, "--out", str(out)]))
    images = _images(tmp_path / "images", 0)            # 128 to 192 pixels, several shapes
    # one image per call: the MXNet export of Faster R-CNN takes one image, too
    expected = gluonkit.predict(str(out / "model"), [str(images)], score_threshold=0.05,
                                batch_size=1)
    served = serve_json(serve_python, out / "model.onnx", images, "--score-threshold", "0.05")
    assert [(r["image"], r["width"], r["height"]) for r in served] == \
        [(r["image"], r["width"], r["height"]) for r in expected]
    assert all(r["boxes"] for r in served)
    # after a few steps the region proposals' objectness scores are near-ties (about 0.4997,
    # apart by less than float32 noise): which proposals survive their suppression, and so
    # the boxes, may differ from MXNet's; the best box agrees
    for got, want in zip(served, expected):
        assert got["boxes"][0]["score"] == pytest.approx(want["boxes"][0]["score"], abs=1e-4)
