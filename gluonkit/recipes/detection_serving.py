"""A detection run's export and the validation it reports, both in the images' own pixels.

The exported model preprocesses an image as the network was validated: GluonCV's validation
transform's resize (YOLOv3 and SSD: ``imresize`` to the input size with ``interp=9``; Faster
R-CNN: ``resize_short_within`` with ``interp=1``), or, for a run at the images' own sizes,
the padding to the smallest bucket that holds the image. ``validation_detections`` runs the
run's own validation pass and maps every box back to its image's pixels, so the mAP a run
reports (``original_pixel_map``) is the one a user measures on the export with
``gluonkit.predict``.
"""
import mxnet as mx
import numpy as np

from gluonkit.recipes.detection import no_object_row, voc_metric

__all__ = ["MEAN", "STD", "serving_preprocessing", "Detections", "validation_detections",
           "original_pixel_map", "kept"]

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]     # GluonCV's validation transforms


def serving_preprocessing(family, size, buckets=None, min_cells=None):
    """The ``preprocessing`` of ``model.json`` for a run of ``family``.

    Parameters
    ----------
    family : {'yolo3', 'ssd', 'faster_rcnn'}
    size : tuple of int
        The validation input (height, width); Faster R-CNN: (shorter side, longest side).
    buckets : list of (height, width), optional
        A run at the images' own sizes: the buckets images were padded to.
    min_cells : [stride, cells], optional
        Faster R-CNN: the fewest feature-map cells its proposals need
        (``rcnn.proposal_cells``); smaller inputs are padded to them.
    """
    preprocessing = {"channels": 3, "resize": None, "resize_short": None, "max_size": None,
                     "crop": None, "scale": 1 / 255, "mean": MEAN, "std": STD, "layout": "NCHW"}
    if family == "faster_rcnn":                   # FasterRCNNDefaultValTransform
        return dict(preprocessing, resize_short_within=list(size), interp=1,
                    **({"min_cells": list(min_cells)} if min_cells else {}))
    if buckets:                                   # padded as trained, never resized if it fits
        return dict(preprocessing, pad_to=[list(b) for b in buckets], interp=9)
    return dict(preprocessing, resize=list(size), interp=9)     # YOLO3/SSDDefaultValTransform


def _inputs(batch):
    """One (1, 3, H, W) input per image of a validation batch: (images, labels) stacked, or
    Faster R-CNN's list of (image, label) pairs."""
    if isinstance(batch[0], mx.nd.NDArray):
        return [batch[0][i:i + 1] for i in range(batch[0].shape[0])]
    return [image for image, _ in batch]


class Detections(list):
    """Per image ``(ids, scores, boxes)``, and ``nonfinite``: the indices of the images whose
    boxes the network gave as NaN or infinity (which ``gluonkit.predict`` refuses)."""

    def __init__(self, items=()):
        super().__init__(items)
        self.nonfinite = []


def validation_detections(net, loader, dataset, padded, ctx):
    """Every validation image's detections in its own pixels, in ``dataset`` order.

    ``loader`` is the run's validation loader (its sampler yields (index, size) pairs);
    ``padded`` says whether its images were padded (boxes kept) rather than resized. Returns a
    :class:`Detections` list of ``(ids, scores, boxes)`` NumPy arrays per image, as the
    network gives them (rows with id -1 included), the boxes clipped to the image; its
    ``nonfinite`` lists the images whose boxes were not all finite before the clip.
    """
    found = Detections([None] * len(dataset))
    for pairs, batch in zip(loader.batch_sampler, loader):
        for (index, _), x in zip(pairs, _inputs(batch)):
            ids, scores, boxes = (a[0].asnumpy() for a in net(x.as_in_context(ctx)))
            if not np.isfinite(boxes.reshape(-1, 4)[~(ids.reshape(-1) < 0)]).all():
                found.nonfinite.append(index)
            height, width = dataset[index][0].shape[:2]
            ratio = np.ones(2) if padded else np.array([x.shape[3] / width, x.shape[2] / height])
            corners = boxes.astype(np.float64).reshape(-1, 2, 2) / ratio
            found[index] = (ids, scores, np.clip(corners, 0, [width, height]).reshape(-1, 4))
    return found


def kept(detections, threshold=0.0):
    """``(ids, scores, boxes)`` of one image without the rows of no class, non-finite boxes or a
    score under ``threshold``, best first (as ``gluonkit.predict`` reports them)."""
    ids, scores, boxes = (np.asarray(a) for a in detections)
    ids, scores = ids.reshape(-1), scores.reshape(-1)
    keep = np.flatnonzero((ids >= 0) & (scores >= threshold) & np.isfinite(boxes).all(axis=1))
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    return ids[keep].astype(int), scores[keep], boxes[keep]


def original_pixel_map(detections, labels, classes):
    """GluonCV's ``VOC07MApMetric`` (the AP of every class and 'mAP') of ``detections`` (from
    :func:`validation_detections`, or any in the images' pixels) against ``labels`` (per image
    (objects, 6): boxes, class id, difficult), image by image."""
    metric = voc_metric(classes)
    for (ids, scores, boxes), label in zip(detections, labels):
        label = no_object_row(np.asarray(label, np.float64))
        metric.update(boxes[None], ids.reshape(1, -1, 1), scores.reshape(1, -1, 1),
                      label[None, :, :4], label[None, :, 4:5], label[None, :, 5:6])
    names, values = metric.get()
    return dict(zip(names, values))
