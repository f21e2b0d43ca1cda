"""The pictures of a detection run: what each panel and box shows, checked on the figure."""
import logging
import warnings

import matplotlib.font_manager as fm
import mxnet as mx
import numpy as np
import pytest
from matplotlib import ft2font
from matplotlib.patches import Rectangle

from gluonkit.recipes.detection_plots import (best_threshold, draw_predictions, match_detections,
                                              plot_detection_curves)

CLASSES = ["circle", "square"]


def test_match_detections_needs_the_class_and_iou_half():
    gt = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    boxes = np.array([[0, 0, 10, 12],       # circle on circle, IoU 10/12: a hit
                      [20, 20, 30, 30],     # circle on the square: wrong class
                      [0, 0, 10, 25]], np.float32)   # circle, IoU 0.4: no hit
    found, correct = match_detections(boxes, np.array([0, 0, 0]), gt, np.array([0, 1]))
    assert found.tolist() == [True, False] and correct.tolist() == [True, False, False]
    found, correct = match_detections(boxes[:0], np.array([], int), gt, np.array([0, 1]))
    assert found.tolist() == [False, False] and correct.size == 0


def test_curves_show_loss_on_a_log_scale_and_the_ap_of_every_class(tmp_path):
    history = {"epoch": [1, 2, 3], "loss": [84.0, 20.0, 12.0], "val_circle": [0.1, 0.5, 0.9],
               "val_square": [0.0, 0.4, 0.7], "val_mAP": [0.05, 0.45, 0.8], "lr": [0.01, 0.005, 0.0]}
    fig = plot_detection_curves(history, CLASSES, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    loss, aps, _ = fig.axes
    assert loss.get_yscale() == "log"
    lines = {line.get_label(): list(line.get_ydata()) for line in aps.get_lines()}
    assert lines == {"AP circle": [0.1, 0.5, 0.9], "AP square": [0.0, 0.4, 0.7], "VOC07 mAP": [0.05, 0.45, 0.8]}


class _Fixed(mx.gluon.Block):
    """A detector that returns the same detections for every image."""

    def forward(self, x):
        ids = mx.nd.array([[[0], [1], [0], [-1]]])
        scores = mx.nd.array([[[0.9], [0.8], [0.3], [0.0]]])
        boxes = mx.nd.array([[[2, 2, 12, 12], [20, 20, 30, 30], [2, 2, 12, 12], [0, 0, 0, 0]]])
        return ids, scores, boxes


def test_predictions_draw_ground_truth_and_detections_over_the_threshold(tmp_path):
    image = mx.nd.zeros((32, 32, 3), dtype=np.uint8)
    label = np.array([[2, 2, 12, 12, 0, 0], [20, 2, 30, 12, 1, 0]], np.float32)
    dataset = [(image, label)] * 3
    transform = lambda img, lab: (mx.nd.image.to_tensor(img), lab)   # noqa: E731
    fig = draw_predictions(_Fixed(), transform, dataset, CLASSES, tmp_path / "p.png", count=3,
                           thresh=0.5)
    assert (tmp_path / "p.png").stat().st_size > 0
    assert len(fig.axes) == 3
    for ax in fig.axes:
        boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
        dashed = [p for p in boxes if p.get_linestyle() == "--"]
        assert len(dashed) == 2 and len(boxes) == 4     # 2 ground truth, 2 scoring 0.5 or more
        assert sorted(t.get_text() for t in ax.texts) == ["circle 0.90", "square 0.80"]
        assert ax.get_title() == "found 1/2, 1 false"


def test_best_threshold_maximizes_f1_over_the_dataset():
    image = mx.nd.zeros((32, 32, 3), dtype=np.uint8)
    label = np.array([[2, 2, 12, 12, 0, 0], [20, 2, 30, 12, 1, 0]], np.float32)
    transform = lambda img, lab: (mx.nd.image.to_tensor(img), lab)   # noqa: E731
    # up to 0.3: P 2/3, R 1/2 (F1 0.57); to 0.8: P 1/2, R 1/2 (0.5); to 0.9: P 1, R 1/2 (0.67)
    assert best_threshold(_Fixed(), transform, [(image, label)] * 2) == 0.85


def _drawn(tmp_path, classes, caplog):
    """The label texts and their fonts of ``draw_predictions`` and the legend of
    ``plot_detection_curves`` for ``classes``, and the warnings and log records they gave."""
    image = mx.nd.zeros((32, 32, 3), dtype=np.uint8)
    label = np.array([[2, 2, 12, 12, 0, 0], [20, 20, 30, 30, 1, 0]], np.float32)
    transform = lambda img, lab: (mx.nd.image.to_tensor(img), lab)   # noqa: E731
    history = {"epoch": [1], "loss": [1.0], "lr": [0.01], "val_mAP": [0.5],
               **{f"val_{name}": [0.5] for name in classes}}
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO, "gluonkit"):
        warnings.simplefilter("always")
        ax = draw_predictions(_Fixed(), transform, [(image, label)], classes, tmp_path / "p.png",
                              count=1).axes[0]
        curves = plot_detection_curves(history, classes, tmp_path / "curves.png")
    legend = [t.get_text() for t in curves.axes[1].get_legend().get_texts()]
    return ax.texts, legend, [str(w.message) for w in caught], caplog.records


def test_names_the_default_font_cannot_draw_are_labelled_by_id_with_one_log_line(tmp_path, caplog):
    classes = ["猫", "square"]      # no font on the machine may have the glyph of 'cat'
    if any("猫" in fm.FontProperties(fname=f.fname).get_name() or
           0x732B in ft2font.FT2Font(f.fname).get_charmap() for f in fm.fontManager.ttflist):
        pytest.skip("a font with Chinese glyphs is installed: the fallback test covers it")
    texts, legend, caught, records = _drawn(tmp_path, classes, caplog)
    assert sorted(t.get_text() for t in texts) == ["class 0 0.90", "square 0.80"]
    assert legend == ["AP class 0", "AP square", "VOC07 mAP"]
    assert not [w for w in caught if "Glyph" in w]
    said = [r.getMessage() for r in records if "font" in r.getMessage()]
    assert len(said) == 1 and "'猫'" in said[0] and "'class 0'" in said[0]


def test_names_an_installed_font_can_draw_fall_back_to_it_without_warnings(tmp_path, caplog):
    classes = ["ⒶⒷ", "square"]     # circled letters: in matplotlib's STIX fonts, not DejaVu Sans
    assert 0x24B6 not in ft2font.FT2Font(fm.findfont("DejaVu Sans")).get_charmap()
    texts, legend, caught, records = _drawn(tmp_path, classes, caplog)
    assert sorted(t.get_text() for t in texts) == ["square 0.80", "ⒶⒷ 0.90"]
    assert legend == ["AP ⒶⒷ", "AP square", "VOC07 mAP"]
    families = texts[0].get_fontfamily()
    assert families[0] == "DejaVu Sans" and "STIX" in families[1]
    assert not [w for w in caught if "Glyph" in w] and not [r for r in records if "font" in r.getMessage()]
