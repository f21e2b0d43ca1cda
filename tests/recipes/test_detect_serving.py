"""The export preprocesses as the run validated: gluonkit-predict on the validation images finds
the run's own validation detections in the images' pixels, and the run's headline mAP is the
export's."""
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gluonkit
from detection_files import write_voc
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect, detection_serving as serving, predict

CLASSES = list(ShapesDetection.CLASSES)


def _voc(root):
    """A VOC folder of shapes of several sizes (128 to 192 pixels, square and not)."""
    samples = [ShapesDetection("train", length=8)[i] for i in range(8)] + \
        [ShapesDetection("val", length=6)[i] for i in range(6)]
    write_voc(root, samples, CLASSES, {"train": range(8), "val": range(8, 14)})
    return root


def _same_detections(ours, found):
    """Every detection of the run's validation pass is one gluonkit.predict reports: the same
    class, the box to 1e-3 pixels, the score to 1e-4 (and as many)."""
    ids, scores, boxes = serving.kept(ours)
    assert len(found["boxes"]) == len(ids)
    unmatched = list(found["boxes"])
    for cls, score, box in zip(ids, scores, boxes):
        match = [b for b in unmatched if b["class"] == CLASSES[cls] and abs(b["score"] - score) <= 1e-4
                 and np.abs(np.subtract(b["box"], box)).max() <= 1e-3]
        assert match, (CLASSES[cls], score, box)
        unmatched.remove(match[0])


@pytest.mark.parametrize("model, options, resize", [
    ("ssd_300_mobilenet0.25_custom", ["--image-size", "0", "--buckets", "2"], "pad_to"),
    ("ssd_300_mobilenet0.25_custom", ["--image-size", "96"], "resize"),
    ("faster_rcnn_mobilenet0.25_custom", ["--image-size", "64"], "resize_short_within"),
    # untrained: two epochs teach YOLOv3 to score every box under its 0.01 cut
    ("yolo3_mobilenet0.25_custom", ["--image-size", "0", "--buckets", "2", "--epochs", "0"], "pad_to"),
], ids=["own-sizes", "fixed-size", "faster-rcnn", "yolo3-own-sizes"])
def test_predict_on_the_validation_images_finds_the_runs_own_detections(tmp_path, capsys, model,
                                                                         options, resize):
    root = _voc(str(tmp_path / "voc"))
    out = tmp_path / "out"
    result = detect.train(detect.parse_args(
        ["--dataset", f"voc:{root}", "--model", model, "--epochs", "2", "--batch-size", "4",
         "--no-progress", "--out", str(out)] + options))     # a later --epochs wins
    meta = json.loads((out / "model.json").read_text())
    assert meta["preprocessing"][resize] and meta["score_threshold"] == result["score_threshold"]
    assert meta["preprocessing"]["interp"] == (1 if model.startswith("faster") else 9)
    _, val, _ = detect.load_detection(f"voc:{root}")
    found = gluonkit.predict(str(out / "model"), val.images, score_threshold=0)
    assert sum(len(f["boxes"]) for f in found) > 0
    for ours, theirs in zip(result["detections"], found):
        _same_detections(ours, theirs)
    # the headline mAP is the export's, scored in the images' own pixels
    exported = [(np.array([CLASSES.index(b["class"]) for b in f["boxes"]]),
                 np.array([b["score"] for b in f["boxes"]]),
                 np.array([b["box"] for b in f["boxes"]]).reshape(-1, 4)) for f in found]
    labels = [val[i][1] for i in range(len(val))]
    assert_allclose(serving.original_pixel_map(exported, labels, CLASSES)["mAP"], result["map"],
                    atol=1e-6)
    # gluonkit-predict uses, and says, the threshold the run chose
    capsys.readouterr()
    predict.main(["--model", str(out / "model"), val.images[0]])
    printed = capsys.readouterr()
    assert printed.err.startswith(f"boxes scoring {result['score_threshold']:g} or more (the "
                                  "model's threshold: its run's best F1)")
    printed = printed.out
    kept = [b for b in found[0]["boxes"] if b["score"] >= result["score_threshold"]]
    assert printed.count(" at ") == len(kept)
