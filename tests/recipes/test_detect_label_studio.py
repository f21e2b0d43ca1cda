"""gluonkit-detect on Label Studio's COCO export as its converter writes it (string category
ids from the labelling config, image and annotation ids from 0, an empty box, photos turned by
an EXIF orientation): it trains with --skip-bad-annotations, its last lines say what was left
out and why pycocotools would score the file otherwise, and gluonkit-predict finds the run's
own detections on the turned photos."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import gluonkit
from annotation_tools import label_studio_coco, tools_python  # noqa: F401
from conftest import CLONE_ENV
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect
from gluonkit.recipes import detection_serving as serving

TURNED = (1, 3)          # validation images stored upside down, shown upright by EXIF tag 3


def _export(python, folder, split, count):
    """Label Studio's export of ``count`` shapes images of ``split``, under ``folder``, its first
    image given a box of no width: the file, and that box's annotation id (numbered from 0)."""
    data = ShapesDetection(split, length=count)
    os.makedirs(folder / "images")
    tasks = []
    for i in range(count):
        image, label = data[i]
        name = f"images/{split}{i}.jpg"
        photo = Image.fromarray(image.asnumpy())
        exif = photo.getexif()
        if split == "val" and i in TURNED:     # stored turned 180 degrees; boxes as shown
            photo, exif[0x0112] = photo.rotate(180), 3
        photo.save(str(folder / name), exif=exif, quality=95)
        boxes = [(data.classes[int(c)], [x0, y0, x1 - x0, y1 - y0])
                 for x0, y0, x1, y1, c, *_ in label.tolist()]
        tasks.append((name, (image.shape[1], image.shape[0]), boxes))
    tasks[0][2].append((data.classes[0], [3, 3, 0, 5]))         # a box of no width
    categories = {name: number for number, name in enumerate(data.classes, 1)}
    return label_studio_coco(python, str(folder), tasks, categories), len(tasks[0][2]) - 1


@pytest.mark.slow
def test_label_studio_export_trains_and_says_what_it_left_out(tools_python, tmp_path, capsys):
    (train, train_empty), (val, val_empty) = (_export(tools_python, tmp_path / split, split, n)
                                              for split, n in (("train", 8), ("val", 4)))
    options = ["--dataset", f"coco:{train},{val}", "--epochs", "1", "--image-size", "64",
               "--no-progress", "--num-workers", "0", "--out", str(tmp_path / "out")]
    refused = subprocess.run([sys.executable, "-m", "gluonkit.recipes.detect", *options],
                             env=dict(CLONE_ENV, OMP_NUM_THREADS="1"), capture_output=True,
                             text=True, timeout=600)
    assert refused.returncode != 0
    assert refused.stderr.splitlines()[-1] == (
        f"gluonkit-detect: {train}, image 0, annotation {train_empty}: 'bbox' [3, 3, 0, 5] is "
        "empty; fix the box.")
    result = detect.train(detect.parse_args(options + ["--skip-bad-annotations"]))
    last = capsys.readouterr().out.splitlines()[-3:]
    assert last[0] == (f"training data: --skip-bad-annotations left out 1 record: empty box "
                       f"(1: {train}: image 0, annotation {train_empty}).")
    assert last[1] == (f"validation data: --skip-bad-annotations left out 1 record: empty box "
                       f"(1: {val}: image 0, annotation {val_empty}).")
    assert last[2].startswith(f"note: {val} numbers an annotation 0 (as Label Studio's converter "
                              "does); pycocotools' COCOeval counts a ground-truth annotation of "
                              "id 0 as never matched")
    metadata = json.loads((tmp_path / "out" / "model.json").read_text())
    assert metadata["category_ids"] == [1, 2, 3]
    assert metadata["preprocessing"]["exif_orientation"] == "apply"
    # gluonkit-predict reads the turned photos as the run validated on them: the same boxes
    images = [str(tmp_path / "val" / "images" / f"val{i}.jpg") for i in range(4)]
    found = gluonkit.predict(str(tmp_path / "out" / "model"), images, score_threshold=0)
    for i in TURNED:
        ids, scores, boxes = serving.kept(result["detections"][i])
        assert len(ids) == len(found[i]["boxes"]) > 0
        theirs = sorted(found[i]["boxes"], key=lambda b: -b["score"])
        assert np.abs(np.subtract([b["box"] for b in theirs], boxes)).max() <= 1e-3
        assert np.abs(np.subtract([b["score"] for b in theirs], scores)).max() <= 1e-4
