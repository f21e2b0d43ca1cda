"""Faster R-CNN validated on several devices whose images hold different numbers of objects."""
import os
import re
import shlex

from gluoncv.nn.bbox import BBoxClipToImage
from gluoncv.utils.metrics.voc_detection import VOC07MApMetric
from numpy.testing import assert_allclose

import gluonkit
from conftest import ROOT, TWO_CPUS
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect, detection as det, rcnn


def _docs_command(pattern):
    """The first ``python -m gluonkit.recipes.detect`` command of docs/detection.md that matches
    ``pattern``, as its argument list (continuation lines joined, the comment dropped)."""
    with open(os.path.join(ROOT, "docs", "detection.md"), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith("python -m gluonkit.recipes.detect") and re.search(pattern, line):
            return shlex.split(line.split("#")[0])[3:]
    raise AssertionError(f"docs/detection.md has no detect command matching {pattern!r}")


def test_the_docs_two_device_faster_rcnn_example_runs(tmp_path):
    argv = _docs_command(r"faster_rcnn.*--ctx cpu:0,cpu:1")
    assert argv[:2] == ["--model", "faster_rcnn_mobilenet0.25_custom"] and "--batch-size" in argv
    detect.main(argv + ["--limit", "8", "--epochs", "1", "--image-size", "64", "--no-progress",
                        "--out", str(tmp_path / "out")])           # a tiny budget
    history = (tmp_path / "out" / "history.csv").read_text().splitlines()
    assert "val_mAP" in history[0] and len(history) == 2


def test_faster_rcnn_metric_is_updated_once_per_device_as_gluoncvs_script_does():
    val = ShapesDetection("val", length=8)
    assert len({len(val[i][1]) for i in range(8)}) > 1              # different object counts
    net = rcnn.build_faster_rcnn("faster_rcnn_mobilenet0.25_custom", val.classes, short=64,
                                 max_size=96, scales=(1, 2))
    net.initialize(ctx=TWO_CPUS)
    loader = detect.make_loaders(net, "faster_rcnn", val, val, 4, image_size=64, max_size=96)[1]
    ours = gluonkit.evaluate(net, loader, ctx=TWO_CPUS, metrics=det.voc_metric(val.classes),
                             eval_fn=rcnn.eval_fn)
    reference = VOC07MApMetric(iou_thresh=0.5, class_names=list(val.classes))
    for batch in loader:                         # train_faster_rcnn.py's validate(), written out
        for (image, label), ctx in zip(batch, [TWO_CPUS[0]] * 2 + [TWO_CPUS[1]] * 2):
            image, label = image.as_in_context(ctx), label.as_in_context(ctx)
            ids, scores, boxes = net(image)
            reference.update(BBoxClipToImage()(boxes, image), ids, scores, label[:, :, :4],
                             label[:, :, 4:5], label[:, :, 5:6])
    assert_allclose(list(ours.values()), reference.get()[1], rtol=0, atol=1e-7)
