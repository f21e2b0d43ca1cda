"""COCO's detection metrics, computed by pycocotools' ``COCOeval`` on the detections of a split.

``COCOMetric`` collects each image's detections in its original pixels and, on ``get()``,
has pycocotools evaluate them against the split's ground truth: AP over IoU 0.50:0.95, AP50,
AP75 and AP for small, medium and large objects, the figures COCO's leaderboards report.
The ground truth comes from a COCO file (:meth:`gluonkit.data.COCOFile.ground_truth`) or is
built from VOC-style labels by :func:`coco_ground_truth` (difficult objects become crowd
regions: detections on them count neither way, as in VOC's metric).

``COCOBatchMetric`` takes what GluonCV's ``VOC07MApMetric`` takes (batches of detections and
padded labels, as ``fit`` feeds a detector's validation), so ``fit`` can report COCO's figures
every epoch beside VOC's, in the validation transform's pixels.
"""
import contextlib
import io

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

__all__ = ["COCO_NAMES", "coco_ground_truth", "coco_results", "COCOMetric", "COCOBatchMetric"]

#: The figures of :meth:`COCOMetric.get`, in COCOeval's order of ``stats``.
COCO_NAMES = ("coco_AP", "coco_AP50", "coco_AP75", "coco_AP_small", "coco_AP_medium",
              "coco_AP_large")


#: COCOeval's area ranges of small, medium and large objects, in square pixels.
_AREAS = ((0, 32 ** 2), (32 ** 2, 96 ** 2), (96 ** 2, float("inf")))


def _evaluate(truth, results):
    """COCOeval's first six stats of ``results`` against ``truth`` (a pycocotools COCO); with
    no results (pycocotools cannot load none), 0 where the split has objects and -1 where it
    has none, as COCOeval would give."""
    if not results:
        areas = [a["area"] for a in truth.dataset["annotations"] if not a.get("iscrowd")]
        found = [any(low <= area < high for area in areas) for low, high in _AREAS]
        return [0.0 if areas else -1.0] * 3 + [0.0 if f else -1.0 for f in found]
    with contextlib.redirect_stdout(io.StringIO()):      # pycocotools prints progress
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return [float(v) for v in evaluation.stats[:len(COCO_NAMES)]]


def _coco(ground_truth):
    """A pycocotools ``COCO`` of the dict ``ground_truth``."""
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = ground_truth
        truth.createIndex()
    return truth


def coco_ground_truth(labels, sizes, image_ids=None, category_ids=None):
    """A COCO ground-truth dict from VOC-style labels.

    Parameters
    ----------
    labels : list of numpy.ndarray
        Per image, (objects, 5 or 6) rows of xmin, ymin, xmax, ymax (pixels), class index
        and optionally difficult.
    sizes : list of tuple
        Per image, ``(width, height)``.
    image_ids, category_ids : list of int, optional
        COCO's ids of the images and of the class indices; default 0, 1, ...

    Returns
    -------
    dict
        ``images``, ``annotations`` and ``categories``, as pycocotools' ``COCO.dataset``.
    """
    image_ids = list(range(len(labels))) if image_ids is None else list(image_ids)
    annotations = []
    for image_id, label in zip(image_ids, labels):
        for row in np.asarray(label, dtype=np.float64).reshape(-1, np.shape(label)[-1]):
            x0, y0, x1, y1 = (float(v) for v in row[:4])
            cls = int(row[4])
            crowd = int(row[5]) if len(row) > 5 else 0
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": cls if category_ids is None else category_ids[cls],
                                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                "iscrowd": crowd})
    classes = 1 + max([int(np.max(np.asarray(l)[:, 4])) for l in labels if len(l)], default=-1)
    categories = category_ids if category_ids is not None else range(classes)
    return {"images": [{"id": i, "width": w, "height": h} for i, (w, h) in zip(image_ids, sizes)],
            "annotations": annotations, "categories": [{"id": int(c)} for c in categories]}


def _json_id(ident):
    """``ident`` as JSON writes it: a string as it is, a (NumPy) integer as an int."""
    return ident if isinstance(ident, str) else int(ident)


def coco_results(image_id, boxes, class_ids, scores, category_ids=None):
    """The detections of one image in COCO's results format: a list of ``{"image_id",
    "category_id", "bbox": [x, y, width, height], "score"}``, padding rows (class < 0) left out.

    ``boxes`` are (N, 4) corners in the image's pixels; ``category_ids`` maps class indices
    to COCO's category ids (default: the index itself). An id given as a string (as a file
    writes it, ``"1"``) stays one.
    """
    results = []
    for box, cls, score in zip(np.asarray(boxes).reshape(-1, 4), np.ravel(class_ids),
                               np.ravel(scores)):
        if cls < 0:
            continue
        x0, y0, x1, y1 = (float(v) for v in box)
        results.append({"image_id": _json_id(image_id),
                        "category_id": int(cls) if category_ids is None
                        else _json_id(category_ids[int(cls)]),
                        "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(score)})
    return results


class COCOMetric:
    """COCO's AP figures of a split's detections, by pycocotools' ``COCOeval``.

    Parameters
    ----------
    ground_truth : dict
        The split's ground truth as a COCO dict (see :func:`coco_ground_truth`).
    category_ids : list of int, optional
        COCO's category id of each class index (default: the index).

    Example::

        >>> metric = COCOMetric(coco_ground_truth([np.array([[0, 0, 10, 10, 0]])], [(20, 20)]))
        >>> metric.update(0, [[0, 0, 10, 10]], [0], [0.9])
        >>> round(dict(zip(*metric.get()))["AP50"], 6)
        1.0
    """

    def __init__(self, ground_truth, category_ids=None):
        self._truth = _coco(ground_truth)
        self._category_ids = category_ids
        self.name = "coco"
        self.reset()

    def reset(self):
        """Forget the detections collected so far."""
        self._results = []

    def update(self, image_id, boxes, class_ids, scores):
        """Add the detections of image ``image_id``: (N, 4) corners in its original pixels,
        class indices (-1 for padding rows) and scores."""
        self._results.extend(coco_results(image_id, boxes, class_ids, scores, self._category_ids))

    def get(self):
        """``(names, values)``: :data:`COCO_NAMES` and their values; -1 where the split has
        no object of that kind (COCOeval's convention)."""
        return list(COCO_NAMES), _evaluate(self._truth, self._results)


class COCOBatchMetric:
    """COCO's AP figures of batches fed as GluonCV's ``VOC07MApMetric`` is fed.

    Every image of every ``update`` is a new image of the ground truth: its label rows of
    class >= 0, difficult ones as crowd regions. Boxes are in the pixels the network sees, so
    the size ranges (small, medium, large) apply to those.

    Example::

        >>> metric = COCOBatchMetric()
        >>> box = np.array([[[0, 0, 10, 10]]])
        >>> metric.update(box, np.array([[[0]]]), np.array([[[0.9]]]), box, np.array([[[0]]]))
        >>> round(dict(zip(*metric.get()))["coco_AP"], 6)
        1.0
    """

    def __init__(self):
        self.name = "coco"
        self.reset()

    def reset(self):
        """Forget the images seen so far."""
        self._labels, self._results = [], []

    def update(self, pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels,
               gt_difficults=None):
        """Add a batch: (B, N, 4) boxes, (B, N, 1) class ids (-1 for none) and scores; (B, M, 4)
        ground-truth boxes, (B, M, 1) class ids (-1 for padding) and optionally difficult flags.
        NDArrays or NumPy arrays, as ``VOC07MApMetric.update`` takes them."""
        arrays = [a.asnumpy() if hasattr(a, "asnumpy") else np.asarray(a)
                  for a in (pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels)]
        difficult = (np.zeros(arrays[4].shape) if gt_difficults is None else
                     gt_difficults.asnumpy() if hasattr(gt_difficults, "asnumpy")
                     else np.asarray(gt_difficults))
        for boxes, ids, scores, gt_boxes, gt_ids, gt_difficult in zip(*arrays, difficult):
            real = gt_ids.reshape(-1) >= 0
            self._results.extend(coco_results(len(self._labels), boxes, ids, scores))
            self._labels.append(np.concatenate([gt_boxes.reshape(-1, 4)[real],
                                                gt_ids.reshape(-1, 1)[real],
                                                gt_difficult.reshape(-1, 1)[real]], axis=1))

    def get(self):
        """``(names, values)`` as :meth:`COCOMetric.get`, over every image seen."""
        sizes = [(0, 0)] * len(self._labels)          # COCOeval does not read them
        return list(COCO_NAMES), _evaluate(_coco(coco_ground_truth(self._labels, sizes)),
                                           self._results)
