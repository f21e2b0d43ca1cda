"""Embedded detection data: coloured shapes on textured backgrounds, drawn from a seed.

A detection set that needs no download and is the same on every machine: each image is a
textured grey background with a few filled circles, squares and triangles, each class in its
own saturated colour, never overlapping. Images come in several sizes, so the set exercises
multi-scale training and bucketing. Samples look like GluonCV's ``VOCDetection``.
"""
import numpy as np
import mxnet as mx
from mxnet import gluon

from ..validate import non_negative_int, positive_int

__all__ = ["ShapesDetection"]

_SPLITS = {"train": (0, 320), "val": (1, 80)}
_SIZES = ((128, 128), (128, 160), (160, 128), (160, 160), (192, 160), (160, 192))
_CLASSES = ("circle", "square", "triangle")
_COLOURS = np.array([(220, 40, 40), (40, 170, 60), (40, 70, 220)], dtype=np.uint8)
_OBJECTS = (1, 4)            # objects per image, inclusive
_EXTENT = (22, 56)           # object width and height in pixels, inclusive
_PLACEMENT_TRIES = 50


def _background(rng, height, width):
    """A low-saturation texture: smooth noise, stripes and pixel noise around a grey level."""
    coarse = rng.uniform(-1, 1, size=(height // 16 + 2, width // 16 + 2))
    ys = np.linspace(0, coarse.shape[0] - 1.001, height)
    xs = np.linspace(0, coarse.shape[1] - 1.001, width)
    y0, x0 = ys.astype(int), xs.astype(int)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    smooth = (coarse[y0][:, x0] * (1 - fy) * (1 - fx) + coarse[y0 + 1][:, x0] * fy * (1 - fx)
              + coarse[y0][:, x0 + 1] * (1 - fy) * fx + coarse[y0 + 1][:, x0 + 1] * fy * fx)
    angle, period = rng.uniform(0, np.pi), rng.uniform(6, 20)
    yy, xx = np.mgrid[:height, :width]
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period)
    grey = (rng.uniform(90, 170) + 25 * smooth + rng.uniform(5, 15) * stripes
            + rng.normal(0, 4, size=(height, width)))
    tint = rng.uniform(-10, 10, size=3)
    return np.clip(grey[:, :, None] + tint, 50, 210).astype(np.uint8)


def _mask(kind, box_height, box_width):
    """The filled shape's pixels in its (box_height, box_width) box."""
    yy, xx = np.mgrid[:box_height, :box_width].astype(np.float64)
    if kind == 0:      # an ellipse through the box's edge midpoints (a circle when square)
        cy, cx = (box_height - 1) / 2, (box_width - 1) / 2
        return ((yy - cy) / max(cy, 0.5)) ** 2 + ((xx - cx) / max(cx, 0.5)) ** 2 <= 1.0
    if kind == 1:
        return np.ones((box_height, box_width), dtype=bool)
    # a triangle: apex at the top middle, base along the bottom row
    half = (box_width - 1) / 2
    reach = half * yy / max(box_height - 1, 1)
    return np.abs(xx - half) <= reach + 0.5


def _place(rng, height, width, taken):
    """A box (x0, y0, x1, y1), inclusive pixels, that keeps 2 px away from the ``taken`` ones."""
    for _ in range(_PLACEMENT_TRIES):
        side = rng.integers(_EXTENT[0], _EXTENT[1] + 1)
        box_w = int(np.clip(side * rng.uniform(0.8, 1.25), _EXTENT[0], min(_EXTENT[1], width)))
        box_h = int(np.clip(side, _EXTENT[0], height))
        x0, y0 = int(rng.integers(0, width - box_w + 1)), int(rng.integers(0, height - box_h + 1))
        box = (x0, y0, x0 + box_w - 1, y0 + box_h - 1)
        if all(box[0] > t[2] + 2 or box[2] < t[0] - 2 or box[1] > t[3] + 2 or box[3] < t[1] - 2
               for t in taken):
            return box
    return None


def _draw(seed, split, index):
    """Image (H, W, 3) uint8 and label (N, 6) float32 of one sample, from its seed alone."""
    rng = np.random.default_rng([seed, split, index])
    height, width = _SIZES[rng.integers(len(_SIZES))]
    image = _background(rng, height, width)
    rows = []
    for _ in range(rng.integers(_OBJECTS[0], _OBJECTS[1] + 1)):
        box = _place(rng, height, width, [r[:4] for r in rows])
        if box is None:
            continue
        kind = int(rng.integers(len(_CLASSES)))
        x0, y0, x1, y1 = box
        mask = _mask(kind, y1 - y0 + 1, x1 - x0 + 1)
        image[y0:y1 + 1, x0:x1 + 1][mask] = _COLOURS[kind]
        ys, xs = np.nonzero(mask)      # the box is the drawn pixels' extent, to the pixel
        rows.append((x0 + xs.min(), y0 + ys.min(), x0 + xs.max(), y0 + ys.max(), kind, 0))
    return image, np.array(rows, dtype=np.float32).reshape(-1, 6)


class ShapesDetection(gluon.data.Dataset):
    """Circles, squares and triangles on textured backgrounds: an embedded detection set.

    Every sample is generated from ``(seed, split, index)`` when it is first read (and kept,
    about 75 kB an image, so later epochs do not draw it again): the set is the same on every
    machine and needs no file. Images are 128 to 192 pixels on a side (six
    sizes); each holds 1 to 4 non-overlapping objects 22 to 56 pixels across, in the colours
    red (circle), green (square) and blue (triangle). The 'train' split has 320 images and
    'val' 80, drawn from different streams.

    A sample is ``(image, label)`` as GluonCV's ``VOCDetection`` gives it: ``image`` an
    (H, W, 3) uint8 NDArray (RGB), ``label`` a float32 NumPy array of shape (N, 6) with rows
    ``[xmin, ymin, xmax, ymax, class, difficult]``; the box corners are the first and last
    pixel columns and rows of the object (inclusive), difficult is always 0.

    Parameters
    ----------
    split : {'train', 'val'}, default 'train'
    seed : int, default 0
        Another seed gives another, equally fixed, set.
    length : int, optional
        Number of images (default 320 for 'train', 80 for 'val').

    Example::

        >>> train = ShapesDetection("train")
        >>> image, label = train[0]
        >>> train.classes, image.dtype, label.shape[1]
        (('circle', 'square', 'triangle'), <class 'numpy.uint8'>, 6)
    """

    CLASSES = _CLASSES

    def __init__(self, split="train", seed=0, length=None):
        if split not in _SPLITS:
            raise ValueError(f"split must be one of {', '.join(map(repr, _SPLITS))}; got {split!r}.")
        self._split, default_length = _SPLITS[split]
        self._seed = non_negative_int(seed, "seed")
        self._length = default_length if length is None else positive_int(length, "length")
        self._drawn = {}

    @property
    def classes(self):
        """tuple of str: The class names, in label order."""
        return self.CLASSES

    def __len__(self):
        return self._length

    def __getitem__(self, idx):
        if not -self._length <= idx < self._length:
            raise IndexError(f"index {idx} is out of range for {self._length} images.")
        index = idx % self._length
        if index not in self._drawn:
            self._drawn[index] = _draw(self._seed, self._split, index)
        image, label = self._drawn[index]
        return mx.nd.array(image, dtype=np.uint8), label.copy()
