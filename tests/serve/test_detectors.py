"""The detect recipe's model.onnx in onnxruntime (gluonkit-serve, no MXNet) finds the boxes
that gluonkit.predict finds with the MXNet export (class equal, score within 1e-4, corners
within 0.5 px): YOLOv3, SSD and Faster R-CNN, each trained by the recipe for a short run."""
import cv2
import numpy as np
import pytest

import gluonkit
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect
from conftest import mobilenet_backbone_file
from serve_env import serve_json, serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

# model -> (recipe options of a short run whose network gives boxes, the score threshold)
RUNS = {
    # two steps at a small learning rate: YOLOv3's objectness is still above its 0.01 cut, and
    # every image keeps its 100 boxes, scored 0.252 to 0.266, neighbours apart by float32 noise;
    # which of such ties the suppression keeps differs between runtimes in that crowded tail,
    # so the boxes compared are the top of each image (>= 0.258)
    "yolo3_mobilenet0.25_custom": (["--limit", "8", "--epochs", "1", "--batch-size", "4",
                                    "--lr", "0.0001"], 0.258),
    # SSD's box regression needs some steps before its boxes are finite
    "ssd_300_mobilenet0.25_custom": (["--limit", "64", "--epochs", "4", "--batch-size", "8"],
                                     0.01),
}
# four steps from a backbone file whose features depend on the image (--pretrained-file).
# From MXNet's default initialization (uniform within 0.07) a few steps leave a backbone that,
# in inference, shrinks what depends on the image about threefold per layer (to 1e-8 of the
# features): the scores then depend on a box's place only, every region proposal scores 0.5
# within 0.002 with hundreds of exact ties, and the last bit of float32 arithmetic picks which
# tied boxes survive suppression, in MXNet with and without MKLDNN as in onnxruntime. From the
# file, the closest scores that a suppression or a cut compares are 1e-6 apart, float32 noise
# 1e-7.
FASTER_RCNN = ["--model", "faster_rcnn_mobilenet0.25_custom", "--limit", "8", "--epochs", "1",
               "--batch-size", "2", "--lr", "0.05", "--warmup-epochs", "0", "--image-size", "96",
               "--no-progress"]
# (width, height) of images of their own sizes that Faster R-CNN's resize_short_within(96, 144)
# leaves as they are (see _images)
OWN_SIZES = [(96, 96), (128, 96), (96, 128), (144, 96), (96, 120), (112, 96)]


def _images(folder, sizes):
    """Validation images of the shapes set at sizes (width, height)."""
    folder.mkdir()
    val = ShapesDetection("val")
    for i, size in enumerate(sizes):
        image = cv2.resize(val[i][0].asnumpy(), size, interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(folder / f"{i}.png"), image[:, :, ::-1])
    return folder


def _assert_same_boxes(served, expected):
    """Every image has the same boxes in both: class equal, score within 1e-4, corners within
    0.5 px (in any order: boxes apart whose scores differ by float32 noise may swap)."""
    assert [(r["image"], r["width"], r["height"]) for r in served] == \
        [(r["image"], r["width"], r["height"]) for r in expected]
    for got, want in zip(served, expected):
        assert len(got["boxes"]) == len(want["boxes"]), got["image"]
        left = list(got["boxes"])
        for box in want["boxes"]:
            same = [b for b in left if b["class"] == box["class"]
                    and abs(b["score"] - box["score"]) <= 1e-4
                    and np.abs(np.subtract(b["box"], box["box"])).max() <= 0.5]
            assert same, f"{got['image']}: no box of gluonkit-serve is {box}"
            left.remove(min(same, key=lambda b: np.abs(np.subtract(b["box"], box["box"])).max()))


@pytest.mark.parametrize("model", list(RUNS))
def test_detector_served_finds_the_boxes_mxnet_finds(serve_python, tmp_path, model):
    options, threshold = RUNS[model]
    out = tmp_path / "run"
    detect.train(detect.parse_args([*options, "--model", model, "--image-size", "96",
                                    "--out", str(out), "--no-progress"]))
    assert (out / "model.onnx").is_file()
    # resized to the network's 96x96 (GluonCV's interp 9), enlarged and shrunk, odd sizes
    images = _images(tmp_path / "images", [(96, 96), (500, 60), (61, 97), (131, 77), (97, 33),
                                           (45, 45)])
    expected = gluonkit.predict(str(out / "model"), [str(images)], score_threshold=threshold)
    served = serve_json(serve_python, out / "model.onnx", images, "--score-threshold",
                        str(threshold))
    assert sum(len(r["boxes"]) for r in expected) >= 3          # the outputs are not trivial
    _assert_same_boxes(served, expected)


def test_faster_rcnn_served_finds_the_boxes_mxnet_finds_on_images_of_their_own_sizes(
        serve_python, tmp_path):
    out = tmp_path / "run"
    backbone = mobilenet_backbone_file(tmp_path / "mobilenet0.25.params")
    detect.train(detect.parse_args([*FASTER_RCNN, "--pretrained-file", str(backbone),
                                    "--out", str(out)]))
    images = _images(tmp_path / "images", OWN_SIZES)
    # both at the threshold the run recorded (its best F1 on the validation set); one image
    # per call: the MXNet export of Faster R-CNN takes one image, too
    expected = gluonkit.predict(str(out / "model"), [str(images)], batch_size=1)
    served = serve_json(serve_python, out / "model.onnx", images)
    assert {r["score_threshold"] for r in served} == {r["score_threshold"] for r in expected}
    assert all(r["boxes"] for r in expected)                    # the outputs are not trivial
    _assert_same_boxes(served, expected)


def test_faster_rcnn_takes_wide_and_tall_images_in_both_commands(serve_python, tmp_path):
    """Trained at --image-size 64 (inputs within 64 x 96), a 600x90 image is 96x14: 6 x 1
    feature cells, 90 anchors for 100 proposals. Padded to 96x32 as model.json says, it is
    predicted, by gluonkit-predict and gluonkit-serve alike, and so is every other image."""
    out = tmp_path / "run"
    backbone = mobilenet_backbone_file(tmp_path / "mobilenet0.25.params")
    options = [o if o != "96" else "64" for o in FASTER_RCNN]
    detect.train(detect.parse_args([*options, "--pretrained-file", str(backbone),
                                    "--out", str(out)]))
    assert gluonkit.load_model(str(out / "model")).metadata["preprocessing"]["min_cells"] == \
        [16, 7]
    images = _images(tmp_path / "images", [(600, 90), (900, 10), (600, 7), (90, 600), (64, 64)])
    expected = gluonkit.predict(str(out / "model"), [str(images)], batch_size=1)
    served = serve_json(serve_python, out / "model.onnx", images)
    assert all("error" not in r for r in expected + served)
    assert all(r["boxes"] for r in expected)
    _assert_same_boxes(served, expected)
