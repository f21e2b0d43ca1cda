"""Pascal VOC folders read with checks: every annotation is parsed once, safely, and refused
with its file named when it is malformed, incomplete, or holds a box outside its image.

The XML goes through defusedxml, which refuses entity declarations (a few hundred bytes of
nested entities can expand to gigabytes) and external references whatever the system's expat
allows. Samples are what GluonCV's ``VOCDetection`` gives, without its silent cases: GluonCV
drops an image whose box lies outside it and skips objects of unlisted classes. With
``skip_bad`` the objects that cannot be used (an empty box, a box more than a pixel past the
border, a missing or malformed field) are left out and counted instead
(:mod:`gluonkit.data.badrecords`), and boxes within a pixel of the border are clipped to it.

Images are read upright by their EXIF orientation, as labelling tools show them, and an
annotation's <size> must be that frame's (``upright=False``: the pixels as stored).
"""
import math
import os
import warnings
from xml.etree.ElementTree import ParseError

import defusedxml.ElementTree as SafeET
import numpy as np
from defusedxml import DefusedXmlException
from mxnet import gluon

from .badrecords import BadRecord, BadRecords, LeftOutWarning
from .errors import DataFileError
from .images import MAX_ASPECT, MAX_PIXELS, frame_mismatch, image_frame, read_image

__all__ = ["read_annotation", "VOCFolder", "load_voc"]

_BOX = ("xmin", "ymin", "xmax", "ymax")
_SKIP_SLACK_PIXELS = 1.0      # with skip_bad, boxes within a pixel of the edge are clipped


def _number(node, field, where):
    """The number in ``node``'s child ``field``; DataFileError if missing or not a number."""
    text = node.findtext(field)
    if text is None or not text.strip():
        raise BadRecord(f"{where}: <{field}> is missing or empty; every VOC annotation gives "
                        "<size> (width, height) and each <object> a <name> and a <bndbox>.")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadRecord(f"{where}: <{field}> is {text.strip()[:40]!r}, not a number.")
    return value


def _object(node, where, width, height, slack):
    """``(name, [xmin, ymin, xmax, ymax], difficult)`` of one <object>, the box 0-based and
    clipped to the image when within ``slack`` pixels of it."""
    name = (node.findtext("name") or "").strip().lower()
    if not name:
        raise BadRecord(f"{where}: <name> is missing or empty; name the object's class.")
    where = f"{where} ({name!r})"
    difficult = (node.findtext("difficult") or "0").strip()
    if difficult not in ("0", "1"):
        raise BadRecord(f"{where}: <difficult> is {difficult[:40]!r}; write 0 or 1 (or leave "
                        "it out for 0).")
    box = node.find("bndbox")
    if box is None:
        raise BadRecord(f"{where}: <bndbox> is missing; give the object's box.")
    xmin, ymin, xmax, ymax = (_number(box, field, where) for field in _BOX)
    if not (xmin < xmax and ymin < ymax):
        raise BadRecord(f"{where}: box ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g}) is empty; fix "
                        "the box.", "empty box")
    if not (1 - slack <= xmin and xmax <= width + 1 + slack and 1 - slack <= ymin
            and ymax <= height + 1 + slack):
        raise BadRecord(f"{where}: box ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g}) is outside the "
                        f"{width:g}x{height:g} image (VOC pixels count from 1: 1 <= xmin < xmax "
                        "<= width + 1, the same for y); fix the box.", "box outside its image")
    # VOC counts pixels from 1, GluonCV's boxes from 0
    box = [max(xmin, 1), max(ymin, 1), min(xmax, width + 1), min(ymax, height + 1)]
    return name, [v - 1 for v in box], int(difficult)


def read_annotation(path, bad=None):
    """The image size and objects of the VOC annotation file ``path``.

    Returns
    -------
    tuple
        ``(width, height, objects)``, objects a list of ``(name, box, difficult)``: the class
        name lower-cased, ``[xmin, ymin, xmax, ymax]`` in 0-based pixels (as GluonCV reads
        them) and 0 or 1; a missing <difficult> is 0.

    Other Parameters
    ----------------
    bad : gluonkit.data.badrecords.BadRecords, optional
        Where a bad <object> goes: refused (the default), or with ``bad.skip`` left out and
        counted, and boxes within a pixel of the border clipped.

    Raises
    ------
    DataFileError
        Malformed XML, an entity declaration or external reference (refused by defusedxml),
        a missing or non-numeric field, or a box that is empty or outside the image.
    """
    root, width, height = _size(path)
    return (width, height) + (_objects(root, path, width, height, bad or BadRecords()),)


def _size(path):
    """``(XML root, width, height)`` of the annotation file ``path``; DataFileError."""
    try:
        root = SafeET.parse(path).getroot()
    except DefusedXmlException as err:
        raise DataFileError(f"{path}: refused ({type(err).__name__}: XML entities and external "
                            "references can expand without bound or read other files); VOC "
                            "annotations need none, remove the <!DOCTYPE ...> block.") from None
    except ParseError as err:
        raise DataFileError(f"{path} is not well-formed XML ({err}); fix or re-export it.") from None
    size = root.find("size")
    if size is None:
        raise DataFileError(f"{path}: <size> is missing; give the image's <width> and <height>.")
    width, height = (_number(size, field, f"{path}, <size>") for field in ("width", "height"))
    if width < 1 or height < 1:
        raise DataFileError(f"{path}: the image size {width:g}x{height:g} is not positive.")
    return root, width, height


def _objects(root, path, width, height, bad):
    """The checked ``(name, box, difficult)`` of every <object> of ``root`` (see
    :func:`read_annotation`)."""
    slack = _SKIP_SLACK_PIXELS if bad.skip else 0.0
    objects = []
    for number, node in enumerate(root.iter("object")):
        try:
            objects.append(_object(node, f"{path}, object {number}", width, height, slack))
        except DataFileError as err:
            bad.refuse(err, f"{path}, object {number}")
    return objects


class VOCFolder(gluon.data.Dataset):
    """The images of one list of a VOC folder, with their checked annotations.

    Build it with :func:`load_voc`. A sample is ``(image, label)`` as GluonCV's
    ``VOCDetection`` gives it: an (H, W, 3) uint8 RGB NDArray and an (objects, 6) float array
    of xmin, ymin, xmax, ymax (0-based pixels), class id, difficult. The pixels are turned by
    their EXIF orientation unless ``upright`` is False.

    Parameters
    ----------
    images : list of str
        Image file paths.
    labels : list of numpy.ndarray
        One (objects, 6) label per image.
    upright : bool, default True
        Read the images turned by their EXIF orientation (the frame of the boxes).
    left_out : dict, optional
        ``{kind: [where, ...]}``: the objects ``skip_bad`` left out.
    max_pixels, max_aspect
        The limits on the images read (see :mod:`gluonkit.data.images`).
    """

    def __init__(self, images, labels, *, upright=True, left_out=None, max_pixels=MAX_PIXELS,
                 max_aspect=MAX_ASPECT):
        self.images, self.labels = list(images), list(labels)
        self.upright, self.left_out = bool(upright), dict(left_out or {})
        self.limits = {"max_pixels": max_pixels, "max_aspect": max_aspect}

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        return read_image(self.images[idx], upright=self.upright, **self.limits), \
            self.labels[idx].copy()

    def take(self, count):
        """The first ``count`` images, a :class:`VOCFolder` still."""
        return VOCFolder(self.images[:count], self.labels[:count], upright=self.upright,
                         left_out=self.left_out, **self.limits)


def _list_path(root, split):
    """The list of a split's image ids: ImageSets/Main/``split``.txt of the VOC folder ``root``."""
    return os.path.join(root, "ImageSets", "Main", f"{split}.txt")


def _listed(root, split):
    """``[(where, image id)]`` of ImageSets/Main/``split``.txt, ``where`` its file and line."""
    path = _list_path(root, split)
    listed = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            ident = line.strip()
            if not ident:
                continue
            where = f"{path}, line {number}"
            if ident in (".", "..") or "/" in ident or os.sep in ident or "\0" in ident:
                raise DataFileError(f"{where}: {ident[:60]!r} is not an image id (a file name "
                                    "without its folder or extension).")
            listed.append((where, ident))
    if not listed:
        raise DataFileError(f"{path} lists no image; put the ids of the {split} images in it, one per line "
                            "(their file names without folder or extension).")
    return listed


def _annotated(root, split, bad, upright, limits):
    """``(images, annotations)`` of a split: image paths and ``read_annotation`` of each, whose
    <size> is checked against the image in the frame it is read in before its boxes are (a
    photo turned by its EXIF tag is named so, not by a box outside the size)."""
    images, annotations = [], []
    for where, ident in _listed(root, split):
        xml = os.path.join(root, "Annotations", f"{ident}.xml")
        image = os.path.join(root, "JPEGImages", f"{ident}.jpg")
        for path in (xml, image):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{where} lists {ident!r} but {path} is missing; add it "
                                        "or remove the line.")
        node, width, height = _size(xml)
        frame = image_frame(image, upright, **limits)
        if (width, height) != frame[:2]:
            raise DataFileError(f"{xml}: <size> says {width:g}x{height:g} but "
                                f"{frame_mismatch(image, (width, height), frame, upright)}.")
        images.append(image)
        annotations.append((xml, (width, height, _objects(node, xml, width, height, bad))))
    return images, annotations


def load_voc(root, splits=("train", "val"), classes=None, *, upright=True, skip_bad=False,
             max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """One :class:`VOCFolder` per list ``ImageSets/Main/<split>.txt`` of the VOC folder ``root``.

    Parameters
    ----------
    root : str
        Holds Annotations/<id>.xml, JPEGImages/<id>.jpg and ImageSets/Main/<split>.txt.
    splits : sequence of str, default ('train', 'val')
    classes : sequence of str, optional
        The class names in label order (lower case, as names are compared lower-cased).
        Default: the names in the first split's annotations, sorted.
    upright : bool, default True
        Read the images turned by their EXIF orientation, as labelling tools show them (each
        <size> must be that frame's); False: as stored.
    skip_bad : bool, default False
        Leave out and count the objects that cannot be used, clip boxes within a pixel of the
        border (a warning says how many of which kind, the first few named; the datasets'
        ``left_out`` holds them); default: refuse the first.
    max_pixels, max_aspect
        The limits on the images (see :mod:`gluonkit.data.images`). Every listed image's
        header is read and checked here, before training reads a pixel.

    Returns
    -------
    tuple
        ``(datasets, classes)``: a list with a ``VOCFolder`` per split, and the class names.

    Raises
    ------
    DataFileError
        A bad annotation (see :func:`read_annotation`), a <size> that is not its image's
        (checked before the boxes, naming an EXIF orientation that turns it), a list left with
        no object by ``skip_bad``, a list without any image, a first split without any object
        when ``classes`` is None, an id in a list that is not a file name, or an object whose
        class is not among ``classes`` (by default: one that the
        first split never shows, which training could not learn).
    FileNotFoundError
        A list, or a listed annotation or image, that is missing.
    gluonkit.data.images.ImageError
        A listed image that is empty, not an image, damaged or beyond the limits.
    """
    bads = [BadRecords(skip_bad) for _ in splits]
    limits = {"max_pixels": max_pixels, "max_aspect": max_aspect}
    read = [_annotated(root, split, bad, upright, limits) for split, bad in zip(splits, bads)]
    if classes is None:
        classes = sorted({name for _, (_, _, objects) in read[0][1] for name, _, _ in objects})
        origin = f"the classes of {splits[0]}.txt's images"
        if not classes and not bads[0].left_out:
            raise DataFileError(f"{_list_path(root, splits[0])}: none of its "
                                f"{len(read[0][0])} images' annotations holds an <object>, so there is no class to "
                                "train; annotate the objects, or name the classes (--classes, or classes=).")
    else:
        classes = [str(c).strip().lower() for c in classes]
        origin = "the classes named"
    index = {name: i for i, name in enumerate(classes)}
    datasets = []
    for (images, annotations), bad, split in zip(read, bads, splits):
        labels = []
        for xml, (_, _, objects) in annotations:
            for number, (name, _, _) in enumerate(objects):
                if name not in index:
                    raise DataFileError(f"{xml}, object {number}: class {name!r} is not one of "
                                        f"{origin} ({', '.join(classes)}); rename it, or train "
                                        "on images of it (or name it with --classes).")
            labels.append(np.array([box + [index[name], difficult] for name, box, difficult
                                    in objects], dtype=np.float64).reshape(-1, 6))
        objects = sum(len(label) for label in labels)
        bad.refuse_if_empty(objects, _list_path(root, split),
                            f" of the {objects + bad.count()} in its annotations", "object")
        if bad.left_out:
            warnings.warn(bad.summary("object", f" of {split}.txt's annotations"), LeftOutWarning,
                          stacklevel=2)
        datasets.append(VOCFolder(images, labels, upright=upright, left_out=bad.left_out,
                                  max_pixels=max_pixels, max_aspect=max_aspect))
    return datasets, list(classes)
