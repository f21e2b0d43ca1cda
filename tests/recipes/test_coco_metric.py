"""COCOMetric against pycocotools run by hand on the files, and on a case whose AP is known."""
import contextlib
import io
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from coco_files import write_coco
from gluonkit.data import load_coco
from gluonkit.recipes.coco_metric import COCO_NAMES, COCOBatchMetric, COCOMetric, coco_ground_truth, \
    coco_results


def _by_hand(truth_file, results):
    """COCOeval's stats as pycocotools' own example runs it, from files."""
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(truth_file)
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return evaluation.stats[:6]


def test_equals_pycocotools_on_a_cvat_file_with_crowd_and_gapped_ids(tmp_path):
    train_json, _ = write_coco(str(tmp_path))
    (_, train), classes = load_coco([train_json, train_json])   # the second one evaluates
    rng = np.random.RandomState(0)
    metric, results = COCOMetric(train.ground_truth(), train.category_ids), []
    for i, image_id in enumerate(train.image_ids):
        label = train[i][1]
        # each object found a little off, plus a false positive of the other class
        boxes = np.concatenate([label[:, :4] + rng.uniform(-2, 2, (len(label), 4)),
                                [[1, 1, 9, 9]]])
        boxes = np.clip(boxes, 0, None)
        boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)
        ids = np.concatenate([label[:, 4], [1 - (label[0, 4] if len(label) else 0)]])
        scores = rng.uniform(0.1, 1, len(boxes))
        metric.update(image_id, boxes, np.concatenate([ids, [-1]]), np.concatenate([scores, [0]]))
        results += coco_results(image_id, boxes, ids, scores, train.category_ids)
    results_file = tmp_path / "results.json"
    results_file.write_text(json.dumps(results))
    names, values = metric.get()
    assert names == list(COCO_NAMES)
    assert_allclose(values, _by_hand(train_json, str(results_file)), atol=1e-12)
    assert {r["category_id"] for r in results} == {1, 3}     # COCO's ids, not class indices


def test_known_ap_one_hit_one_miss_one_false_positive():
    # two objects of one class; a false positive scored above the only hit: recall reaches 1/2
    # at precision 1/2, so 51 of COCOeval's 101 recall points have precision 0.5
    truth = coco_ground_truth([np.array([[0, 0, 10, 10, 0]]), np.array([[20, 20, 40, 40, 0]])],
                              [(50, 50), (50, 50)])
    metric = COCOMetric(truth)
    metric.update(0, [[0, 0, 10, 10], [30, 0, 45, 12]], [0, 0], [0.8, 0.9])
    values = dict(zip(*metric.get()))
    assert values["coco_AP"] == pytest.approx(51 * 0.5 / 101) == values["coco_AP50"] == values["coco_AP75"]
    assert values["coco_AP_small"] == pytest.approx(51 * 0.5 / 101)   # both objects under 32^2 px
    assert values["coco_AP_large"] == -1                           # none that large: COCOeval's -1
    metric.reset()      # nothing detected: 0 where the split has objects, -1 where it has none
    assert metric.get()[1] == [0.0, 0.0, 0.0, 0.0, -1.0, -1.0]


def test_difficult_voc_objects_count_neither_way():
    # a detection on a difficult object is neither a hit nor a false positive
    truth = coco_ground_truth([np.array([[0, 0, 10, 10, 0, 0], [20, 20, 30, 30, 0, 1]])], [(40, 40)])
    metric = COCOMetric(truth)
    metric.update(0, [[20, 20, 30, 30], [0, 0, 10, 10]], [0, 0], [0.9, 0.5])
    assert dict(zip(*metric.get()))["coco_AP"] == pytest.approx(1.0)


def test_batch_metric_equals_the_per_image_metric_on_padded_batches():
    # two batches of two images, labels padded with -1 rows as GluonCV's batchify pads them
    rng = np.random.RandomState(1)
    labels = [np.array([[2, 2, 30, 30, 0, 0], [40, 10, 60, 50, 1, 1]]), np.array([[5, 5, 20, 40, 1, 0]]),
              np.zeros((0, 6)), np.array([[0, 0, 64, 64, 0, 0], [10, 10, 12, 12, 1, 0]])]
    detections = []
    for label in labels:
        boxes = np.concatenate([label[:, :4] + rng.uniform(-3, 3, (len(label), 4)), [[1, 1, 20, 20]]])
        boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)
        ids = np.concatenate([label[:, 4], [0]])
        detections.append((boxes, ids, rng.uniform(0.1, 1, len(ids))))
    batch_metric = COCOBatchMetric()
    for first in (0, 2):
        m = 3
        gt = -np.ones((2, m, 6))
        pred_boxes, pred_ids, pred_scores = np.zeros((2, 4, 4)), -np.ones((2, 4, 1)), np.zeros((2, 4, 1))
        for b in range(2):
            label, (boxes, ids, scores) = labels[first + b], detections[first + b]
            gt[b, :len(label)] = label
            pred_boxes[b, :len(ids)], pred_ids[b, :len(ids), 0], pred_scores[b, :len(ids), 0] = boxes, ids, scores
        batch_metric.update(pred_boxes, pred_ids, pred_scores, gt[:, :, :4], gt[:, :, 4:5], gt[:, :, 5:6])
    image_metric = COCOMetric(coco_ground_truth(labels, [(64, 64)] * 4))
    for i, (boxes, ids, scores) in enumerate(detections):
        image_metric.update(i, boxes, ids, scores)
    batch_values, image_values = batch_metric.get()[1], image_metric.get()[1]
    assert_allclose(batch_values, image_values, atol=1e-12)
    assert 0 < batch_values[0] < 1
