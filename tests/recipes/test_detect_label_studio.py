"""gluonkit-detect on Label Studio's COCO export as its converter writes it (string category
ids from the labelling config, image and annotation ids from 0, an empty box): it trains with
--skip-bad-annotations, and its last lines say what was left out and why pycocotools would
score the file otherwise."""
import json
import os
import subprocess
import sys

import cv2
import pytest

from annotation_tools import label_studio_coco, tools_python  # noqa: F401
from conftest import CLONE_ENV
from gluonkit.data import ShapesDetection


def _export(python, folder, split, count):
    """Label Studio's export of ``count`` shapes images of ``split``, under ``folder``, its first
    image given a box of no width: the file, and that box's annotation id (numbered from 0)."""
    data = ShapesDetection(split, length=count)
    os.makedirs(folder / "images")
    tasks = []
    for i in range(count):
        image, label = data[i]
        name = f"images/{split}{i}.jpg"
        cv2.imwrite(str(folder / name), image.asnumpy()[:, :, ::-1])
        boxes = [(data.classes[int(c)], [x0, y0, x1 - x0, y1 - y0])
                 for x0, y0, x1, y1, c, *_ in label.tolist()]
        tasks.append((name, (image.shape[1], image.shape[0]), boxes))
    tasks[0][2].append((data.classes[0], [3, 3, 0, 5]))         # a box of no width
    categories = {name: number for number, name in enumerate(data.classes, 1)}
    return label_studio_coco(python, str(folder), tasks, categories), len(tasks[0][2]) - 1


@pytest.mark.slow
def test_label_studio_export_trains_and_says_what_it_left_out(tools_python, tmp_path):
    (train, train_empty), (val, val_empty) = (_export(tools_python, tmp_path / split, split, n)
                                              for split, n in (("train", 8), ("val", 4)))
    command = [sys.executable, "-m", "gluonkit.recipes.detect", "--dataset", f"coco:{train},{val}",
               "--epochs", "1", "--image-size", "64", "--no-progress", "--num-workers", "0",
               "--out", str(tmp_path / "out")]
    env = dict(CLONE_ENV, OMP_NUM_THREADS="1")
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0
    assert (f"{train}, image 0, annotation {train_empty}: 'bbox' [3, 3, 0, 5] is empty; fix the "
            "box.") in refused.stderr
    proc = subprocess.run(command + ["--skip-bad-annotations"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.splitlines()[-3:]
    assert last[0] == (f"training data: --skip-bad-annotations left out 1 records: 1 empty box "
                       f"({train}: image 0, annotation {train_empty}).")
    assert last[1] == (f"validation data: --skip-bad-annotations left out 1 records: 1 empty box "
                       f"({val}: image 0, annotation {val_empty}).")
    assert last[2].startswith(f"note: {val} numbers an annotation 0 (as Label Studio's converter "
                              "does); pycocotools' COCOeval counts a ground-truth annotation of "
                              "id 0 as never matched")
    metadata = json.loads((tmp_path / "out" / "model.json").read_text())
    assert metadata["category_ids"] == [1, 2, 3]
    assert metadata["preprocessing"]["exif_orientation"] == "apply"
