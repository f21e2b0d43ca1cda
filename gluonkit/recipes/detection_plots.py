"""The pictures of a detection run: training curves and predictions beside the ground truth.

``DetectionCurves`` (a ``fit`` callback) draws curves.png after every epoch: the training loss
on a log scale (epoch 1's loss of a detector trained from scratch is many times the later
ones), the validation mAP with the AP of every class, and the learning rate. ``draw_predictions``
draws predictions.png: validation images with their ground truth dashed and the detections
that score at least a threshold solid, one label per box, and per image how many objects
were found.

Class names are drawn in matplotlib's default font, or where it lacks their glyphs (Chinese or
Japanese names in DejaVu Sans) in an installed font that has them; a name that no installed
font can draw is shown as 'class <id>', and one log line says so (instead of a matplotlib
warning per glyph per picture).
"""
import functools
import io
import logging
import os

import mxnet as mx
import numpy as np

from gluonkit.atomic import atomic_write
from gluonkit.callbacks import PlotCurves

__all__ = ["DetectionCurves", "plot_detection_curves", "draw_predictions", "match_detections",
           "best_f1_threshold", "best_threshold", "draw_detections", "drawable_names"]

log = logging.getLogger("gluonkit")

_MEAN, _STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
_PALETTE = ["#ff7f0e", "#e377c2", "#17becf", "#bcbd22", "#8c564b", "#9467bd", "#7f7f7f", "#2ca02c",
            "#d62728", "#1f77b4"]


def _write_png(fig, path):
    """Write ``fig`` to ``path`` atomically; return the figure."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    directory = os.path.dirname(os.path.abspath(path))
    atomic_write(directory, os.path.basename(path), lambda f: f.write(buf.getvalue()))
    return fig


@functools.lru_cache(maxsize=None)
def _characters(path):
    """The code points the font file ``path`` has glyphs for (an empty set if unreadable)."""
    from matplotlib import ft2font

    try:
        return frozenset(ft2font.FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


@functools.lru_cache(maxsize=16)
def drawable_names(classes):
    """``(fonts, names)``: the font families to draw the class names with, and each name as
    drawn, for the tuple ``classes``.

    ``fonts`` is matplotlib's default sans-serif font, followed by the first installed font
    that has every glyph the default lacks (matplotlib then takes each glyph from the first
    font that has it). Without such a font, a name with a missing glyph is drawn as
    'class <id>' and one log line (once per process and class list) names those classes and
    the fix.
    """
    from matplotlib import font_manager

    default = font_manager.findfont(font_manager.FontProperties(family=["sans-serif"]))
    fonts = [font_manager.FontProperties(fname=default).get_name()]
    have = _characters(default)
    missing = {c for name in classes for c in name if ord(c) not in have and not c.isspace()}
    if missing:
        for entry in font_manager.fontManager.ttflist:
            if {ord(c) for c in missing} <= _characters(entry.fname):
                return tuple(fonts + [entry.name]), tuple(classes)
        unreadable = [(i, name) for i, name in enumerate(classes) if set(name) & missing]
        log.warning("No installed font draws the class name(s) %s: the pictures call them %s. "
                    "Install a font that has their characters (e.g. fonts-noto-cjk) to see them.",
                    ", ".join(repr(name) for _, name in unreadable),
                    ", ".join(f"'class {i}'" for i, _ in unreadable))
        classes = tuple(f"class {i}" if set(name) & missing else name
                        for i, name in enumerate(classes))
    return tuple(fonts), tuple(classes)


def plot_detection_curves(history, classes, path):
    """Draw ``history`` (``fit``'s: 'loss', 'val_mAP', 'val_coco_AP', 'val_<class>', 'lr' per
    epoch) to a PNG at ``path``: the loss on a log scale, validation VOC07 mAP, COCO AP and
    per-class AP, the learning rate.
    Returns the matplotlib figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = history.get("epoch", [])
    fig = Figure(figsize=(13, 3.6), tight_layout=True)
    FigureCanvasAgg(fig)
    loss, aps, rate = (fig.add_subplot(1, 3, i) for i in (1, 2, 3))
    values = np.asarray(history.get("loss", []), dtype=float)
    loss.plot(epochs, values, marker="o", label="train loss")
    if np.isfinite(values).any() and (values[np.isfinite(values)] > 0).all():
        loss.set_yscale("log")
    loss.set_title("training loss (log scale)")
    fonts, shown = drawable_names(tuple(classes))
    for i, (name, drawn) in enumerate(zip(classes, shown)):
        if f"val_{name}" in history:
            aps.plot(epochs, history[f"val_{name}"], marker=".", lw=1, color=_PALETTE[i % len(_PALETTE)],
                     label=f"AP {drawn}")
    title = []
    if "val_mAP" in history:
        aps.plot(epochs, history["val_mAP"], marker="o", lw=2.5, color="black", label="VOC07 mAP")
        title.append(f"mAP {history['val_mAP'][-1]:.3f}")
    if "val_coco_AP" in history:
        aps.plot(epochs, history["val_coco_AP"], marker="s", lw=2.5, ls="--", color="dimgray",
                 label="COCO AP (IoU 0.50:0.95)")
        title.append(f"COCO AP {history['val_coco_AP'][-1]:.3f}")
    aps.set_title("validation AP" + (f" (last {', '.join(title)})" if title else ""))
    aps.set_ylim(0, 1)
    rate.plot(epochs, history.get("lr", []), marker="o")
    rate.set_title("learning rate (at each epoch's end)")
    for ax in (loss, aps, rate):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3, which="both")
    loss.legend()
    aps.legend(prop={"family": list(fonts), "size": 8}, loc="lower right")
    return _write_png(fig, path)


class DetectionCurves(PlotCurves):
    """:class:`~gluonkit.callbacks.PlotCurves` drawing ``plot_detection_curves`` of ``classes``
    (the main process only), as epochs end and when training ends."""

    def __init__(self, path, classes, min_seconds=10.0):
        super().__init__(path, min_seconds=min_seconds)
        self.classes = list(classes)

    def draw(self, history):
        if history.get("epoch"):
            plot_detection_curves(history, self.classes, self.path)


def _iou(a, b):
    """IoU of boxes (N, 4) and (M, 4) as corners: (N, M)."""
    low, high = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=2)
    area = lambda boxes: np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return inter / (area(a)[:, None] + area(b)[None] - inter + 1e-12)


def match_detections(boxes, ids, gt_boxes, gt_ids, iou=0.5):
    """(found, correct): for every ground-truth box whether a detection of its class overlaps
    it by ``iou`` or more, and for every detection whether it overlaps one so."""
    if not len(boxes) or not len(gt_boxes):
        return np.zeros(len(gt_boxes), bool), np.zeros(len(boxes), bool)
    hit = (_iou(boxes, gt_boxes) >= iou) & (ids[:, None] == gt_ids[None, :])
    return hit.any(axis=0), hit.any(axis=1)


def _label(ax, box, text, colour, width, taken, fonts, top=8):
    """A class-and-score label above the box's left corner (its right corner in the right part
    of the picture; inside the box at the picture's top edge), or under the box where a label
    in ``taken`` (anchors drawn so far, appended to) is already there."""
    x0, y0, x1, y1 = box
    right = x0 > 0.6 * width
    x, y, below = (x1 if right else x0), (y0 if y0 > top else y0 + 1), y0 <= top
    if any(abs(x - u) < 0.25 * width and abs(y - v) < 10 for u, v in taken):
        y, below = y1, True
    taken.append((x, y))
    ax.text(x, y, text, fontsize=7, fontfamily=list(fonts), color="white",
            ha="right" if right else "left", va="top" if below else "bottom",
            bbox={"facecolor": colour, "alpha": 0.85, "pad": 1, "edgecolor": "none"}, clip_on=True)


def _detect(net, transform, sample, ctx):
    """(input (3, H, W), label in its pixels, ids, scores, boxes) of one (image, label) sample;
    detections without a class or with non-finite boxes (a diverged network) left out."""
    x, label = transform(*sample)[:2]
    label = np.asarray(label.asnumpy() if isinstance(label, mx.nd.NDArray) else label)
    ids, scores, boxes = (a[0].asnumpy() for a in net(x.expand_dims(0).as_in_context(ctx)))
    keep = (ids[:, 0] >= 0) & np.isfinite(boxes).all(axis=1) & np.isfinite(scores[:, 0])
    return x, label, ids[keep, 0].astype(int), scores[keep, 0], boxes[keep]


def best_f1_threshold(detections, labels, candidates=np.arange(0.05, 0.96, 0.05)):
    """The score threshold among ``candidates`` whose detections have the best F1 (a detection
    is right, and an object found, at IoU 0.5 with the same class).

    ``detections`` holds per image ``(ids, scores, boxes)`` (NumPy, one row per detection) and
    ``labels`` per image its (objects, 5+) label, in the same pixels.
    """
    found, correct, shown, objects = np.zeros(len(candidates)), np.zeros(len(candidates)), \
        np.zeros(len(candidates)), 0
    for (ids, scores, boxes), label in zip(detections, labels):
        objects += len(label)
        for k, thresh in enumerate(candidates):
            keep = scores >= thresh
            hit, right = match_detections(boxes[keep], ids[keep], label[:, :4], label[:, 4].astype(int))
            found[k] += hit.sum()
            correct[k] += right.sum()
            shown[k] += keep.sum()
    precision, recall = correct / np.maximum(shown, 1), found / max(objects, 1)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    return float(np.round(candidates[int(np.argmax(f1))], 2))


def best_threshold(net, transform, dataset, ctx=mx.cpu(), candidates=np.arange(0.05, 0.96, 0.05)):
    """``best_f1_threshold`` of ``net``'s detections on ``dataset`` through the validation
    ``transform`` (in its pixels)."""
    detected = [_detect(net, transform, dataset[i], ctx) for i in range(len(dataset))]
    return best_f1_threshold([d[2:] for d in detected], [d[1] for d in detected], candidates)


def _draw(panels, classes, path, thresh, columns):
    """Draw ``panels``, per image (pixels HWC in [0, 1], label (objects, 5+), ids, scores,
    boxes), to a PNG at ``path``; returns the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    fonts, names = drawable_names(tuple(classes))
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(3.4 * min(len(panels), columns), 3.6 * rows + 0.5))
    FigureCanvasAgg(fig)
    fig.suptitle(f"dashed white: ground truth; dashed yellow: missed; dotted grey: difficult "
                 f"(not scored); solid: detections with score >= {thresh:g}", fontsize=10)
    for i, (pixels, label, ids, scores, boxes) in enumerate(panels):
        keep = scores >= thresh
        ids, scores, boxes = ids[keep], scores[keep], boxes[keep]
        difficult = label[:, 5] > 0 if label.shape[1] > 5 else np.zeros(len(label), bool)
        found, correct = match_detections(boxes, ids, label[:, :4], label[:, 4].astype(int))
        ax = fig.add_subplot(rows, min(len(panels), columns), i + 1)
        ax.imshow(pixels)
        for (x0, y0, x1, y1), hit, hard in zip(label[:, :4], found, difficult):
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, lw=1.5,
                                   ls=":" if hard else "--",
                                   edgecolor="silver" if hard else "white" if hit else "yellow"))
        taken = []
        for box, cls, score in zip(boxes, ids, scores):
            colour = _PALETTE[cls % len(_PALETTE)]
            ax.add_patch(Rectangle(box[:2], box[2] - box[0], box[3] - box[1], fill=False, lw=1.5,
                                   edgecolor=colour))
            _label(ax, box, f"{names[cls]} {score:.2f}", colour, pixels.shape[1], taken, fonts)
        scored = ~difficult
        ax.set_title(f"found {int(found[scored].sum())}/{int(scored.sum())}, "
                     f"{int((~correct).sum())} false", fontsize=9)
        ax.set_axis_off()
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return _write_png(fig, path)


def draw_predictions(net, transform, dataset, classes, path, count=8, thresh=0.5, ctx=mx.cpu(),
                     columns=4):
    """Draw the first ``count`` images of ``dataset`` as the network sees them, with the ground
    truth (dashed white; dashed yellow where no detection of its class overlaps it by IoU 0.5;
    dotted grey if difficult) and the detections scoring ``thresh`` or more (solid, in their
    class's colour, one label each: class and score), to a PNG at ``path``.

    ``transform(image, label)`` is the validation transform: it returns the network's input
    (3, H, W) and the label in its pixels first. Returns the matplotlib figure.
    """
    panels = []
    for i in range(min(count, len(dataset))):
        x, *found = _detect(net, transform, dataset[i], ctx)
        panels.append((np.clip((x.asnumpy().transpose(1, 2, 0) * _STD + _MEAN), 0, 1), *found))
    return _draw(panels, classes, path, thresh, columns)


def draw_detections(dataset, detections, classes, path, count=8, thresh=0.5, columns=4):
    """``draw_predictions`` of detections already made: the first ``count`` images of
    ``dataset`` in their own pixels and shapes, with ``detections`` (per image ``(ids, scores,
    boxes)`` in its pixels, such as ``detection_serving.validation_detections`` gives)."""
    panels = []
    for i in range(min(count, len(dataset))):
        image, label = dataset[i]
        ids, scores, boxes = (np.asarray(a) for a in detections[i])
        ids, scores = ids.reshape(-1), scores.reshape(-1)
        keep = (ids >= 0) & np.isfinite(boxes).all(axis=1)
        panels.append((image.asnumpy() / 255.0, np.asarray(label), ids[keep].astype(int),
                       scores[keep], boxes[keep]))
    return _draw(panels, classes, path, thresh, columns)
