"""Pascal VOC folders read with checks: every annotation is parsed once, safely, and refused
with its file named when it is malformed, incomplete, or holds a box outside its image.

The XML goes through defusedxml, which refuses entity declarations (a few hundred bytes of
nested entities can expand to gigabytes) and external references whatever the system's expat
allows. Samples are what GluonCV's ``VOCDetection`` gives, without its silent cases: GluonCV
drops an image whose box lies outside it and skips objects of unlisted classes.
"""
import math
import os
from xml.etree.ElementTree import ParseError

import defusedxml.ElementTree as SafeET
import numpy as np
from defusedxml import DefusedXmlException
from mxnet import gluon

from .errors import DataFileError
from .images import MAX_ASPECT, MAX_PIXELS, image_size, read_image

__all__ = ["read_annotation", "VOCFolder", "load_voc"]

_BOX = ("xmin", "ymin", "xmax", "ymax")


def _number(node, field, where):
    """The number in ``node``'s child ``field``; DataFileError if missing or not a number."""
    text = node.findtext(field)
    if text is None or not text.strip():
        raise DataFileError(f"{where}: <{field}> is missing or empty; every VOC annotation gives "
                            "<size> (width, height) and each <object> a <name> and a <bndbox>.")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DataFileError(f"{where}: <{field}> is {text.strip()[:40]!r}, not a number.")
    return value


def _object(node, where, width, height):
    """``(name, [xmin, ymin, xmax, ymax], difficult)`` of one <object>, the box 0-based."""
    name = (node.findtext("name") or "").strip().lower()
    if not name:
        raise DataFileError(f"{where}: <name> is missing or empty; name the object's class.")
    where = f"{where} ({name!r})"
    difficult = (node.findtext("difficult") or "0").strip()
    if difficult not in ("0", "1"):
        raise DataFileError(f"{where}: <difficult> is {difficult[:40]!r}; write 0 or 1 (or leave "
                            "it out for 0).")
    box = node.find("bndbox")
    if box is None:
        raise DataFileError(f"{where}: <bndbox> is missing; give the object's box.")
    xmin, ymin, xmax, ymax = (_number(box, field, where) for field in _BOX)
    if not (1 <= xmin < xmax <= width + 1 and 1 <= ymin < ymax <= height + 1):
        raise DataFileError(f"{where}: box ({xmin:g}, {ymin:g}, {xmax:g}, {ymax:g}) is empty or "
                            f"outside the {width:g}x{height:g} image (VOC pixels count from 1: "
                            "1 <= xmin < xmax <= width + 1, the same for y); fix the box.")
    # VOC counts pixels from 1, GluonCV's boxes from 0
    return name, [xmin - 1, ymin - 1, xmax - 1, ymax - 1], int(difficult)


def read_annotation(path):
    """The image size and objects of the VOC annotation file ``path``.

    Returns
    -------
    tuple
        ``(width, height, objects)``, objects a list of ``(name, box, difficult)``: the class
        name lower-cased, ``[xmin, ymin, xmax, ymax]`` in 0-based pixels (as GluonCV reads
        them) and 0 or 1; a missing <difficult> is 0.

    Raises
    ------
    DataFileError
        Malformed XML, an entity declaration or external reference (refused by defusedxml),
        a missing or non-numeric field, or a box that is empty or outside the image.
    """
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
    objects = [_object(node, f"{path}, object {number}", width, height)
               for number, node in enumerate(root.iter("object"))]
    return width, height, objects


class VOCFolder(gluon.data.Dataset):
    """The images of one list of a VOC folder, with their checked annotations.

    Build it with :func:`load_voc`. A sample is ``(image, label)`` as GluonCV's
    ``VOCDetection`` gives it: an (H, W, 3) uint8 RGB NDArray and an (objects, 6) float array
    of xmin, ymin, xmax, ymax (0-based pixels), class id, difficult. The pixels are as stored,
    not turned by an EXIF orientation: annotation files give boxes in that frame.

    Parameters
    ----------
    images : list of str
        Image file paths.
    labels : list of numpy.ndarray
        One (objects, 6) label per image.
    max_pixels, max_aspect
        The limits on the images read (see :mod:`gluonkit.data.images`).
    """

    def __init__(self, images, labels, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
        self.images, self.labels = list(images), list(labels)
        self.limits = {"max_pixels": max_pixels, "max_aspect": max_aspect}

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        return read_image(self.images[idx], upright=False, **self.limits), self.labels[idx].copy()


def _listed(root, split):
    """``[(where, image id)]`` of ImageSets/Main/``split``.txt, ``where`` its file and line."""
    path = os.path.join(root, "ImageSets", "Main", f"{split}.txt")
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
    return listed


def _annotated(root, split):
    """``(images, annotations)`` of a split: image paths and ``read_annotation`` of each."""
    images, annotations = [], []
    for where, ident in _listed(root, split):
        xml = os.path.join(root, "Annotations", f"{ident}.xml")
        image = os.path.join(root, "JPEGImages", f"{ident}.jpg")
        for path in (xml, image):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{where} lists {ident!r} but {path} is missing; add it "
                                        "or remove the line.")
        images.append(image)
        annotations.append((xml, read_annotation(xml)))
    return images, annotations


def load_voc(root, splits=("train", "val"), classes=None, *, max_pixels=MAX_PIXELS,
             max_aspect=MAX_ASPECT):
    """One :class:`VOCFolder` per list ``ImageSets/Main/<split>.txt`` of the VOC folder ``root``.

    Parameters
    ----------
    root : str
        Holds Annotations/<id>.xml, JPEGImages/<id>.jpg and ImageSets/Main/<split>.txt.
    splits : sequence of str, default ('train', 'val')
    classes : sequence of str, optional
        The class names in label order (lower case, as names are compared lower-cased).
        Default: the names in the first split's annotations, sorted.
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
        A bad annotation (see :func:`read_annotation`), an id in a list that is not a file
        name, or an object whose class is not among ``classes`` (by default: one that the
        first split never shows, which training could not learn).
    FileNotFoundError
        A list, or a listed annotation or image, that is missing.
    gluonkit.data.images.ImageError
        A listed image that is empty, not an image, damaged or beyond the limits.
    """
    read = [_annotated(root, split) for split in splits]
    if classes is None:
        classes = sorted({name for _, (_, _, objects) in read[0][1] for name, _, _ in objects})
        origin = f"the classes of {splits[0]}.txt's images"
    else:
        classes = [str(c).strip().lower() for c in classes]
        origin = "the classes named"
    index = {name: i for i, name in enumerate(classes)}
    datasets = []
    for images, annotations in read:
        labels = []
        for xml, (_, _, objects) in annotations:
            for number, (name, _, _) in enumerate(objects):
                if name not in index:
                    raise DataFileError(f"{xml}, object {number}: class {name!r} is not one of "
                                        f"{origin} ({', '.join(classes)}); rename it, or train "
                                        "on images of it (or name it with --classes).")
            labels.append(np.array([box + [index[name], difficult] for name, box, difficult
                                    in objects], dtype=np.float64).reshape(-1, 6))
        for image, (xml, (width, height, _)) in zip(images, annotations):
            actual = image_size(image, max_pixels=max_pixels, max_aspect=max_aspect)
            if (width, height) != tuple(actual):
                raise DataFileError(f"{xml}: <size> says {width:g}x{height:g} but {image} is "
                                    f"{actual[0]}x{actual[1]} pixels, so its boxes cannot be "
                                    "placed on it; fix the <size> and the boxes (or the image).")
        datasets.append(VOCFolder(images, labels, max_pixels=max_pixels, max_aspect=max_aspect))
    return datasets, list(classes)
