"""gluonkit-detect on COCO files as CVAT writes them (category ids from 1 with gaps, a crowd
region, an image without objects): the same training as the same images in a VOC folder, and
COCO's figures equal to pycocotools' own evaluation of the run's detections."""
import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from coco_files import cvat_export
from conftest import CLONE_ENV
from detection_files import write_voc
from gluonkit.data import ShapesDetection
from gluonkit.recipes.coco_metric import coco_results

NAMES = ("circle", "square", "triangle")
CATEGORY_IDS = (1, 3, 7)            # as a tool numbers them: from 1, with gaps

_RUN = """
import json, sys
from gluonkit.recipes import detect
result = detect.train(detect.parse_args(sys.argv[2:]))
json.dump({"map": result["map"], "coco": result["coco"],
           "detections": [[a.tolist() for a in d] for d in result["detections"]]},
          open(sys.argv[1], "w"))
"""


def _samples(split, count):
    data = ShapesDetection(split, length=count)
    return [(data[i][0], np.asarray(data[i][1], dtype=np.float64)) for i in range(count)]


def _coco_images(names, samples):
    return [(name, image.shape[1], image.shape[0],
             [(CATEGORY_IDS[int(c)], [x0, y0, x1 - x0, y1 - y0], int(d))
              for x0, y0, x1, y1, c, d in label]) for name, (image, label) in zip(names, samples)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco-and-voc")
    train = _samples("train", 12)
    train[3] = (train[3][0], np.zeros((0, 6)))                       # an image without objects
    val = _samples("val", 6)
    val[0] = (val[0][0], np.concatenate([val[0][1], [[70, 2, 90, 22, 0, 1]]]))   # crowd / difficult
    ids = write_voc(str(root / "voc"), train + val, NAMES,
                    {"train": range(12), "val": range(12, 18)})
    files = [f"{i}.jpg" for i in ids]
    categories = [{"id": i, "name": n, "supercategory": ""} for i, n in zip(CATEGORY_IDS, NAMES)]
    documents = {"train": cvat_export(_coco_images(files[:12], train), categories=categories),
                 "val": cvat_export(_coco_images(files[12:], val), start_id=501,
                                    categories=categories)}
    documents["train"]["annotations"].append({       # a crowd region in training: left out
        "id": 999, "image_id": 1, "category_id": 3, "bbox": [1, 1, 30, 30], "iscrowd": 1,
        "area": 900, "segmentation": {"counts": [900], "size": [30, 30]}})
    os.makedirs(root / "annotations")
    paths = []
    for split, document in documents.items():
        paths.append(str(root / "annotations" / f"{split}.json"))
        with open(paths[-1], "w") as f:
            json.dump(document, f)
    return root, paths


@pytest.fixture(scope="module")
def coco_run(data, tmp_path_factory):
    """The COCO run: its result and its --out folder."""
    root, (train_json, val_json) = data
    folder = tmp_path_factory.mktemp("coco-run")
    result = _train(folder, "--dataset", f"coco:{train_json},{val_json}",
                    "--images", str(root / "voc" / "JPEGImages"), "--out", str(folder / "out"))
    return result, folder / "out"


def _train(tmp_path, *options):
    result = tmp_path / "result.json"
    env = dict(CLONE_ENV, MXNET_ENGINE_TYPE="NaiveEngine", OMP_NUM_THREADS="1")
    # --num-workers 0: the augmentations drawn in this process, so the two runs draw the same
    proc = subprocess.run([sys.executable, "-c", _RUN, str(result), "--epochs", "2",
                           "--image-size", "64", "--lr", "0.0005", "--no-progress",
                           "--num-workers", "0", *options],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(result.read_text())


@pytest.mark.slow
def test_coco_files_train_as_the_voc_folder_and_report_pycocotools_ap(data, coco_run, tmp_path):
    root, (train_json, val_json) = data
    voc = _train(tmp_path, "--dataset", f"voc:{root / 'voc'}", "--out", str(tmp_path / "voc"))
    coco, out = coco_run
    # the same samples in the same order: the same training, to the last detection
    assert coco["map"] == voc["map"]
    assert_allclose(np.concatenate([np.ravel(a) for d in coco["detections"] for a in d]),
                    np.concatenate([np.ravel(a) for d in voc["detections"] for a in d]))
    # pycocotools run by hand on the validation file and the run's detections
    results = []
    for image_id, (ids, scores, boxes) in zip(range(501, 507), coco["detections"]):
        results += coco_results(image_id, boxes, ids, scores, CATEGORY_IDS)
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(val_json)
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    assert_allclose([coco["coco"][k] for k in ("coco_AP", "coco_AP50", "coco_AP75", "coco_AP_small",
                                               "coco_AP_medium", "coco_AP_large")],
                    evaluation.stats[:6], atol=1e-12)
    assert len(results) > 100            # an untrained detector's many low-scored boxes
    metadata = json.loads((out / "model.json").read_text())
    assert metadata["category_ids"] == list(CATEGORY_IDS)
    header = (out / "history.csv").read_text().splitlines()[0]
    assert "val_coco_AP" in header and "val_mAP" in header


def _predict(*options):
    proc = subprocess.run([sys.executable, "-m", "gluonkit.recipes.predict", *options],
                          env=CLONE_ENV, capture_output=True, text=True, timeout=300)
    return proc


@pytest.mark.slow
def test_predict_writes_cocos_results_format_with_the_files_ids(data, coco_run):
    root, (_, val_json) = data
    _, out = coco_run
    images = [str(root / "voc" / "JPEGImages" / f"{12 + i:04d}.jpg") for i in range(6)]
    options = ["--model", str(out / "model"), "--score-threshold", "0.001", *images]
    plain = _predict(*options, "--json")
    coco = _predict(*options, "--coco", val_json, "--coco-images", str(root / "voc" / "JPEGImages"))
    assert plain.returncode == 0 and coco.returncode == 0, plain.stderr + coco.stderr
    expected = []
    for image_id, result in zip(range(501, 507), json.loads(plain.stdout)):
        for box in result["boxes"]:
            x0, y0, x1, y1 = box["box"]
            expected.append((image_id, CATEGORY_IDS[NAMES.index(box["class"])],
                             [x0, y0, x1 - x0, y1 - y0], box["score"]))
    got = [(d["image_id"], d["category_id"], d["bbox"], d["score"]) for d in json.loads(coco.stdout)]
    assert len(got) == len(expected) > 0
    for (i, c, b, s), (i2, c2, b2, s2) in zip(got, expected):
        assert (i, c) == (i2, c2) and s == pytest.approx(s2) and b == pytest.approx(b2)
    numbered = json.loads(_predict(*options, "--coco").stdout)
    assert [d["image_id"] for d in numbered] == [i - 500 for i, *_ in expected]
    missing = _predict("--model", str(out / "model"), images[0], str(root / "voc" / "JPEGImages" /
                                                                      "0000.jpg"), "--coco", val_json,
                       "--coco-images", str(root / "voc" / "JPEGImages"))
    assert missing.returncode == 1 and "0000.jpg is not one of the images of" in missing.stderr


def test_images_is_refused_without_coco_data_and_validation_needs_objects(data, tmp_path):
    root, (train_json, _) = data
    proc = subprocess.run([sys.executable, "-m", "gluonkit.recipes.detect", "--images", str(root),
                           "--epochs", "0"], cwd=str(tmp_path), env=CLONE_ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--images applies to --dataset coco:" in proc.stderr
    negatives = tmp_path / "negatives.json"
    document = json.loads(open(train_json).read())
    document["annotations"] = []
    negatives.write_text(json.dumps(document))
    proc = subprocess.run([sys.executable, "-m", "gluonkit.recipes.detect", "--dataset",
                           f"coco:{train_json},{negatives}", "--images",
                           str(root / "voc" / "JPEGImages"), "--epochs", "0", "--out",
                           str(tmp_path / "out")], cwd=str(tmp_path), env=CLONE_ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "negatives.json holds no object to score" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_loader_warnings_are_log_lines_once_and_left_out_records_are_said_once(tmp_path):
    from coco_files import TRAIN, write_coco
    images = [TRAIN[0], (TRAIN[1][0], 36, 48, TRAIN[1][3] + [(1, [3, 3, 0, 9], 0)])]
    (train,) = write_coco(str(tmp_path / "data"), {"train": images})
    proc = subprocess.run([sys.executable, "-m", "gluonkit.recipes.detect", "--dataset",
                           f"coco:{train},{train}", "--skip-bad-annotations", "--epochs", "0",
                           "--image-size", "64", "--no-progress", "--num-workers", "0", "--out",
                           str(tmp_path / "out")], cwd=str(tmp_path),
                          env=dict(CLONE_ENV, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr
    left_out = f"--skip-bad-annotations left out 1 record: empty box (1: {train}: image 2, annotation 5)."
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "left out" in line]
    assert said == [f"training data: {left_out}", f"validation data: {left_out}"]
    shared = [line for line in proc.stderr.splitlines() if "validation images" in line]
    assert len(shared) == 1 and shared[0].split(" ", 1)[1] == (    # after the log line's time
        "the validation images are the training images, so the validation figures measure "
        "images the network trains on; validate on other images (another file, list or --images "
        "folder).")
