"""How an image becomes an exported network's input, as steps that any image library runs.

The ``preprocessing`` dict saved with a model (see :func:`gluonkit.metadata.check_preprocessing`)
says how an image file becomes the input; :func:`plan` turns it, for an image of a given size,
into resizes and crops, and keeps the map from input pixels back to the image's own (for
boxes). ``gluonkit.predict`` runs the steps with MXNet (OpenCV), :mod:`gluonkit.serve` with
NumPy: one plan, two executors. This module imports neither mxnet nor numpy;
docs/preprocessing.md specifies every rule.
"""
from .imagefiles import check_resize
from .metadata import FORMAT

__all__ = ["Plan", "plan", "short_within", "pad_cells", "interpolation", "BILINEAR", "BICUBIC",
           "AREA", "AUTO"]

#: OpenCV's interpolation codes, as ``mx.image.imresize`` takes them.
BILINEAR, BICUBIC, AREA = 1, 2, 3
#: GluonCV's (and ``mxnet.image``'s) automatic choice: area to shrink, bicubic to enlarge.
AUTO = 9


def interpolation(interp, size, new_size):
    """The OpenCV interpolation code that resizing ``size`` to ``new_size`` (both (width,
    height)) with ``interp`` uses: ``interp`` itself, or for :data:`AUTO` area to shrink both
    sides, bicubic to enlarge both, bilinear otherwise (as GluonCV's ``imresize``)."""
    if interp != AUTO:
        return interp
    (width, height), (new_width, new_height) = size, new_size
    if new_width > width and new_height > height:
        return BICUBIC
    return AREA if new_width < width and new_height < height else BILINEAR


def short_within(size, short, max_size):
    """The (width, height) GluonCV's ``resize_short_within(short, max_size)`` gives an image of
    ``size`` (width, height): the shorter side ``short``, unless the longer would exceed
    ``max_size``, then the longer side ``max_size``; the aspect ratio kept."""
    width, height = size
    scale = short / min(width, height)
    if round(scale * max(width, height)) > max_size:     # round half to even, as NumPy's
        scale = max_size / max(width, height)
    return int(round(width * scale)), int(round(height * scale))


class Plan:
    """The steps from an image to the network's input: ``steps`` is a list of
    ``('resize', width, height, interp)`` (``interp`` an OpenCV code, never :data:`AUTO`),
    ``('crop', x0, y0, width, height)`` and ``('pad', width, height)`` (zeros at the bottom
    and right); ``size``
    is the image's own (width, height), ``input_size`` the input's. An input pixel x is the
    image's ``(x + offset[0]) / scale[0]`` (y likewise)."""

    def __init__(self, size):
        self.size = self.input_size = tuple(size)
        self.steps, self.scale, self.offset = [], [1.0, 1.0], [0.0, 0.0]

    def resize(self, width, height, interp, name, max_pixels):
        """Add a resize to ``width`` x ``height`` (none if that is the size), checked first."""
        old = self.input_size
        check_resize(name, self.size, (width, height), max_pixels)
        if (width, height) != old:
            self.steps.append(("resize", width, height, interpolation(interp, old, (width, height))))
            ratio = (width / old[0], height / old[1])
            self.scale = [s * r for s, r in zip(self.scale, ratio)]
            self.offset = [o * r for o, r in zip(self.offset, ratio)]
            self.input_size = (width, height)

    def crop(self, x0, y0, width, height):
        """Add a crop of ``width`` x ``height`` from (``x0``, ``y0``)."""
        self.steps.append(("crop", x0, y0, width, height))
        self.offset = [self.offset[0] + x0, self.offset[1] + y0]
        self.input_size = (width, height)

    def pad(self, width, height):
        """Add zeros at the bottom and right up to ``width`` x ``height`` (boxes keep their
        pixels)."""
        if (width, height) != self.input_size:
            self.steps.append(("pad", width, height))
            self.input_size = (width, height)

    def pad_to(self, buckets, interp, name, max_pixels):
        """Add a pad to the smallest of ``buckets`` ([height, width] each; the first on ties)
        that holds the image, as training padded it; an image larger than every bucket is
        first shrunk, aspect kept, into the one that needs the least shrinking."""
        width, height = self.input_size
        if not any(h >= height and w >= width for h, w in buckets):
            scale, (bucket_h, bucket_w) = max((min(h / height, w / width), (h, w))
                                              for h, w in buckets)
            self.resize(min(bucket_w, max(1, round(width * scale))),
                        min(bucket_h, max(1, round(height * scale))), interp, name, max_pixels)
            width, height = self.input_size
        _, first = min((h * w, i) for i, (h, w) in enumerate(buckets) if h >= height and w >= width)
        bucket_h, bucket_w = buckets[first]
        check_resize(name, self.size, (bucket_w, bucket_h), max_pixels)
        self.pad(bucket_w, bucket_h)

    def to_image(self, box):
        """A box ``[xmin, ymin, xmax, ymax]`` in input pixels as the image's own, clipped."""
        return [min(max((v + self.offset[i % 2]) / self.scale[i % 2], 0.0), self.size[i % 2])
                for i, v in enumerate(box)]


def _scale_down(size, crop):
    """The largest size of ``crop``'s aspect that fits ``size`` (as ``mx.image.scale_down``)."""
    (width, height), (crop_width, crop_height) = size, crop
    if height < crop_height:
        crop_width, crop_height = crop_width * height / crop_height, height
    if width < crop_width:
        crop_width, crop_height = width, crop_height * width / crop_width
    return int(crop_width), int(crop_height)


def plan(size, preprocessing, name, max_pixels, format=FORMAT):
    """The :class:`Plan` that takes an image of ``size`` (width, height) to the network's
    input as ``preprocessing`` says, in this order: ``resize`` to [height, width];
    ``resize_short_within`` (GluonCV's rule, :func:`short_within`); ``pad_to`` (the smallest
    bucket that holds the image); ``resize_short`` (the shorter side to ``short``, the longer
    ``short * longer // shorter``, rounded down as ``mx.image.resize_short``); ``crop`` (the
    largest box of the crop's aspect that fits, centered, then resized to the crop, as
    ``mx.image.center_crop``); ``max_size`` (the longer side shrunk to ``max_size``, the other
    ``round(side * max_size / longer)``, half to even, at least 1); ``min_cells`` ([stride,
    cells]: zeros at the bottom, or at the right of an image taller than wide, by whole
    strides, until ``ceil(height / stride) * ceil(width / stride)`` is at least ``cells``, as
    a Faster R-CNN needs for its proposals: :func:`pad_cells`). Every resize uses
    ``interp`` (default 1, bilinear; 9: area to shrink both sides, bicubic to enlarge both,
    bilinear otherwise).

    ``format`` is the metadata's: exports of format 2 resized ``resize_short`` and ``crop``
    bicubic and ``max_size`` bilinear whatever ``interp`` said, and are served as they were.
    ``ImageError`` (naming ``name``) for a resize that would make an empty image or more than
    ``max_pixels`` pixels."""
    p, steps = preprocessing, Plan(size)
    interp = p.get("interp", BILINEAR)
    short_interp, cap_interp = (BICUBIC, BILINEAR) if format == 2 else (interp, interp)
    if p.get("resize"):
        height, width = p["resize"]
        steps.resize(width, height, interp, name, max_pixels)
    if p.get("resize_short_within"):
        steps.resize(*short_within(steps.input_size, *p["resize_short_within"]), interp, name,
                     max_pixels)
    if p.get("pad_to"):
        steps.pad_to([tuple(b) for b in p["pad_to"]], interp, name, max_pixels)
    if p.get("resize_short"):
        short, (width, height) = p["resize_short"], steps.input_size
        steps.resize(*((short, short * height // width) if height > width
                       else (short * width // height, short)), short_interp, name, max_pixels)
    if p.get("crop"):
        (width, height), (crop_height, crop_width) = steps.input_size, p["crop"]
        new_width, new_height = _scale_down((width, height), (crop_width, crop_height))
        steps.crop(int((width - new_width) / 2), int((height - new_height) / 2), new_width,
                   new_height)
        steps.resize(crop_width, crop_height, short_interp, name, max_pixels)
    if p.get("max_size") and max(steps.input_size) > p["max_size"]:
        width, height = steps.input_size
        scale = p["max_size"] / max(height, width)
        steps.resize(max(1, round(width * scale)), max(1, round(height * scale)), cap_interp,
                     name, max_pixels)
    if p.get("min_cells"):
        size = pad_cells(steps.input_size, *p["min_cells"])
        check_resize(name, steps.size, size, max_pixels)
        steps.pad(*size)
    return steps


def pad_cells(size, stride, cells):
    """The (width, height) that an input of ``size`` is padded to so that its feature map
    (``ceil(side / stride)`` cells a side) has at least ``cells`` cells: the shorter side (the
    height on ties) grown to the fewest whole strides that give them; ``size`` if it has them."""
    width, height = size
    across, down = -(-width // stride), -(-height // stride)
    if across * down >= cells:
        return size
    if height <= width:
        return width, max(height, stride * -(-cells // across))
    return max(width, stride * -(-cells // down)), height
