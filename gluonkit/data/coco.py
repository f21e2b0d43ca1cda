"""COCO detection files as annotation tools export them, read with checks.

CVAT, Label Studio, Roboflow and FiftyOne write one JSON file per split in COCO's layout:
``images`` (id, file_name, width, height), ``categories`` (id, name) and ``annotations``
(id, image_id, category_id, bbox as [x, y, width, height] in pixels, iscrowd). Their category
ids are rarely contiguous or from 0: classes are the categories in id order and the mapping is
kept (:attr:`COCOFile.category_ids`). Images without annotations stay, as negatives.
Segmentation, keypoints and fields other than those are ignored.

Crowd regions (``iscrowd: 1``) are left out of the training file's labels. In the files that
evaluate (every file after the first) they are kept as COCO's evaluation keeps them: in
:meth:`COCOFile.ground_truth` (what pycocotools' ``COCOeval`` reads) with ``iscrowd`` set, and
in the labels as *difficult* rows, which VOC's metric ignores the same way (a detection on one
counts neither as a hit nor as a false positive).

The JSON is untrusted: a file above ``max_bytes`` is refused before it is read; nesting deeper
than Python's recursion limit, integers of more than 18 digits, NaN and infinities are refused
while parsing; every field is checked with one message naming the file, the record and the field.
"""
import json
import math
import os

import numpy as np
from mxnet import gluon

from .errors import DataFileError
from .images import MAX_ASPECT, MAX_PIXELS, image_size, read_image

__all__ = ["MAX_JSON_BYTES", "COCOFile", "load_coco", "coco_image_ids"]

#: Files above this size are refused unread (COCO 2017's train annotations take 448 MB).
MAX_JSON_BYTES = 1 << 30
_MAX_DIGITS = 18          # the ids and sizes a tool writes fit in 64 bits
_SLACK_PIXELS = 0.5       # a box may pass its image's edge by rounding, no more


def _refuse_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


def _no_repeats(pairs):
    """A JSON object's dict; ValueError if a key appears twice (JSON keeps the last silently)."""
    document = dict(pairs)
    if len(document) != len(pairs):
        repeated = next(k for k in document if sum(key == k for key, _ in pairs) > 1)
        raise ValueError(f"the key {repeated!r} appears twice in one object")
    return document


def _parse_int(text):
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"the integer {text[:20]}... has more than {_MAX_DIGITS} digits")
    return int(text)


def _parse_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _read_json(path, max_bytes):
    """The parsed JSON file ``path``, refused in one line when too large or not plain data."""
    try:
        size = os.path.getsize(path)
    except OSError as err:
        raise FileNotFoundError(f"{path} cannot be read ({err.strerror or err}); check the "
                                "path given with --dataset coco:TRAIN.json,VAL.json.") from None
    if size > max_bytes:
        raise DataFileError(f"{path} is {size:,} bytes, above the limit of {max_bytes:,}; "
                            "split it, or raise max_bytes if you trust it.")
    if size == 0:
        raise DataFileError(f"{path} is empty (0 bytes); export the COCO file again.")
    try:
        with open(path, encoding="utf-8-sig") as f:    # some Windows tools write a BOM
            return json.load(f, parse_int=_parse_int, parse_float=_parse_float,
                             parse_constant=_refuse_constant, object_pairs_hook=_no_repeats)
    except OSError as err:
        raise FileNotFoundError(f"{path} cannot be read ({err.strerror or err}); pass a COCO "
                                "JSON file.") from None
    except RecursionError:
        raise DataFileError(f"{path} is nested too deeply to be a COCO file; re-export it.") \
            from None
    except UnicodeDecodeError as err:
        raise DataFileError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); "
                            "re-export it.") from None
    except ValueError as err:     # json.JSONDecodeError, and the refusals above
        raise DataFileError(f"{path} is not a COCO JSON file: {err}; re-export it.") from None


def _records(document, key, path):
    """The list of dicts ``document[key]``; DataFileError if missing or of another shape."""
    if not isinstance(document, dict):
        raise DataFileError(f"{path} holds a JSON {type(document).__name__}, not an object; a "
                            "COCO file is an object with 'images', 'annotations' and "
                            "'categories' lists.")
    records = document.get(key)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DataFileError(f"{path}: {key!r} is missing or not a list of objects; a COCO file "
                            "has 'images', 'annotations' and 'categories' lists.")
    return records


def _field(record, field, kind, where, default=None):
    """``record[field]`` checked to be of ``kind`` ('id', 'size', 'name', 'flag')."""
    value = record.get(field, default)
    if value is None:
        raise DataFileError(f"{where}: {field!r} is missing; fix the record.")
    ok = {"id": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "size": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
          "name": lambda v: isinstance(v, str) and v.strip() != "",
          "flag": lambda v: v in (0, 1) and not isinstance(v, float)}[kind]
    if not ok(value):
        expected = {"id": "an integer", "size": "a positive number", "name": "a non-empty string",
                    "flag": "0 or 1"}[kind]
        raise DataFileError(f"{where}: {field!r} is {value!r:.60}, not {expected}; fix the record.")
    return value


def _unique(records, what, path):
    """``{id: record}`` of ``records``; DataFileError naming a repeated id."""
    by_id = {}
    for number, record in enumerate(records):
        ident = _field(record, "id", "id", f"{path}, {what} {number}")
        if ident in by_id:
            raise DataFileError(f"{path}: {what} id {ident} appears twice (records "
                                f"{records.index(by_id[ident])} and {number} of the list); ids "
                                "must be unique.")
        by_id[ident] = record
    return by_id


def _image_path(path, name, image_id, images_dir):
    """The file of image ``name`` (a relative path), under ``images_dir`` or near ``path``."""
    where = f"{path}, image {image_id}"
    if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise DataFileError(f"{where}: file_name {name!r} is not a path relative to the images' "
                            "folder; write it relative (no leading / or ..).")
    here = os.path.dirname(os.path.abspath(path))
    if images_dir and not os.path.isdir(images_dir):
        raise FileNotFoundError(f"the images folder {images_dir} does not exist; pass the folder "
                                f"that {path}'s file_name entries are relative to.")
    folders = [images_dir] if images_dir else [
        here, os.path.join(here, "images"), os.path.join(os.path.dirname(here), "images")]
    for folder in folders:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"{where}: {name!r} is not in {' or '.join(folders)}; add the file, "
                            "or say where the images are (--images DIR).")


class COCOFile(gluon.data.Dataset):
    """The images of one COCO JSON file with their checked annotations; build it with
    :func:`load_coco`.

    A sample is ``(image, label)`` as GluonCV's detection datasets give it: an (H, W, 3) uint8
    RGB NDArray and an (objects, 6) float array of xmin, ymin, xmax, ymax (pixels), class
    index, difficult: 1 for a crowd region if ``crowd_as_difficult``, else crowd regions are
    left out.

    Attributes
    ----------
    path : str
        The JSON file.
    images : list of str
        Image file paths, in the file's order.
    image_ids : list of int
        COCO's image id of each.
    category_ids : list of int
        COCO's category id of each class index.
    crowd_as_difficult : bool
        Whether labels hold crowd regions as difficult rows (for evaluation) or leave them out
        (for training).
    limits : dict
        ``max_pixels`` and ``max_aspect`` of the images read (see :mod:`gluonkit.data.images`).
    """

    def __init__(self, path, images, image_ids, sizes, boxes, category_ids, crowd_as_difficult,
                 limits):
        self.path, self.images, self.image_ids = path, images, image_ids
        self.category_ids, self.crowd_as_difficult = list(category_ids), crowd_as_difficult
        self.limits = dict(limits)
        self._sizes, self._boxes = sizes, boxes

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        rows = [box + [cls, crowd] for box, cls, crowd, _ in self._boxes[idx]
                if self.crowd_as_difficult or not crowd]
        return read_image(self.images[idx], upright=False, **self.limits), \
            np.array(rows, dtype=np.float64).reshape(-1, 6)

    def take(self, count):
        """The first ``count`` images, a :class:`COCOFile` still (its ground truth too)."""
        return COCOFile(self.path, self.images[:count], self.image_ids[:count],
                        self._sizes[:count], self._boxes[:count], self.category_ids,
                        self.crowd_as_difficult, self.limits)

    def ground_truth(self):
        """The file's checked annotations as a COCO dict for pycocotools (``COCO.dataset``):
        original image and category ids, boxes as [x, y, width, height], crowd flags, areas."""
        images = [{"id": ident, "width": width, "height": height}
                  for ident, (width, height) in zip(self.image_ids, self._sizes)]
        annotations = []
        for ident, boxes in zip(self.image_ids, self._boxes):
            for (x0, y0, x1, y1), cls, crowd, area in boxes:
                annotations.append({"id": len(annotations) + 1, "image_id": ident,
                                    "category_id": self.category_ids[cls],
                                    "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": crowd,
                                    "area": area})
        categories = [{"id": ident} for ident in self.category_ids]
        return {"images": images, "annotations": annotations, "categories": categories}


def _categories(path, document):
    """``[(id, name)]`` of the file's categories, sorted by id."""
    categories = _unique(_records(document, "categories", path), "category", path)
    named = [(ident, _field(record, "name", "name", f"{path}, category {ident}").strip())
             for ident, record in sorted(categories.items())]
    names = [name for _, name in named]
    for name in names:
        if names.count(name) > 1:
            raise DataFileError(f"{path}: the category name {name!r} is used by two ids; "
                                "merge them or rename one.")
    return named


def _boxes(path, document, images, class_of):
    """``{image id: [(box, class, crowd, area)]}`` of the file's annotations, each checked."""
    boxes = {ident: [] for ident in images}
    _unique(_records(document, "annotations", path), "annotation", path)
    for record in document["annotations"]:
        where = f"{path}, annotation {record['id']}"
        image_id = _field(record, "image_id", "id", where)
        if image_id not in images:
            raise DataFileError(f"{where}: image_id {image_id} is not in 'images'; add the image "
                                "or remove the annotation.")
        where = f"{path}, image {image_id}, annotation {record['id']}"
        category = _field(record, "category_id", "id", where)
        if category not in class_of:
            raise DataFileError(f"{where}: category_id {category} is not one of the categories "
                                f"({', '.join(map(str, sorted(class_of)))}); fix it.")
        bbox = record.get("bbox")
        if bbox is None:
            raise DataFileError(f"{where}: 'bbox' is missing; give [x, y, width, height] in "
                                "pixels.")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
            raise DataFileError(f"{where}: 'bbox' is {bbox!r:.60}, not [x, y, width, height] in "
                                "pixels.")
        x, y, w, h = (float(v) for v in bbox)
        width, height = images[image_id]
        slack = _SLACK_PIXELS
        if not (w > 0 and h > 0 and x >= -slack and y >= -slack and x + w <= width + slack
                and y + h <= height + slack):
            raise DataFileError(f"{where}: 'bbox' [{x:g}, {y:g}, {w:g}, {h:g}] is empty or "
                                f"outside the {width:g}x{height:g} image; fix the box.")
        x0, y0 = max(x, 0.0), max(y, 0.0)       # tools round their float boxes: clip the slack
        x1, y1 = min(x + w, width), min(y + h, height)
        crowd = _field(record, "iscrowd", "flag", where, default=0)
        area = record.get("area", w * h)
        if isinstance(area, bool) or not isinstance(area, (int, float)) or area < 0:
            raise DataFileError(f"{where}: 'area' is {area!r:.60}, not a number >= 0.")
        boxes[image_id].append(([x0, y0, x1, y1], class_of[category], crowd, float(area)))
    return boxes


def _read(path, images_dir, max_bytes, classes, limits):
    """A :class:`COCOFile` of ``path`` and its ``[(category id, name)]``, checked against the
    ``classes`` of the first file when given (the first file trains, the others evaluate)."""
    document = _read_json(path, max_bytes)
    categories = _categories(path, document)
    if classes is not None and categories != classes:
        raise DataFileError(f"{path}: its categories {categories} differ from the training "
                            f"file's {classes}; export both splits with the same labels.")
    class_of = {ident: index for index, (ident, _) in enumerate(categories)}
    records = _unique(_records(document, "images", path), "image", path)
    images = {ident: tuple(_field(record, field, "size", f"{path}, image {ident}")
                           for field in ("width", "height")) for ident, record in records.items()}
    boxes = _boxes(path, document, images, class_of)
    ids = list(records)
    if not ids and classes is None:
        raise DataFileError(f"{path} lists no images; a training file needs some.")
    files = [_image_path(path, _field(records[i], "file_name", "name", f"{path}, image {i}"),
                         i, images_dir) for i in ids]
    for ident, image in zip(ids, files):
        actual = image_size(image, **limits)
        if tuple(actual) != images[ident]:
            width, height = images[ident]
            raise DataFileError(f"{path}, image {ident}: width and height say {width:g}x{height:g} "
                                f"but {image} is {actual[0]}x{actual[1]} pixels, so its boxes "
                                "cannot be placed on it; fix the record (or the image).")
    return COCOFile(path, files, ids, [images[i] for i in ids], [boxes[i] for i in ids],
                    [ident for ident, _ in categories], classes is not None, limits), categories


def load_coco(files, images_dir=None, max_bytes=MAX_JSON_BYTES, *, max_pixels=MAX_PIXELS,
              max_aspect=MAX_ASPECT):
    """One :class:`COCOFile` per COCO JSON file in ``files`` (training first).

    Parameters
    ----------
    files : sequence of str
        The JSON files, e.g. ``("train.json", "val.json")``; every file must have the
        categories of the first. The first trains (its crowd regions are left out), the others
        evaluate (crowd regions are difficult rows).
    images_dir : str, optional
        The folder that ``file_name`` is relative to. Default: the JSON file's folder, then
        an ``images`` folder in it, then one beside it (CVAT's layout: ``annotations/`` and
        ``images/`` side by side).
    max_bytes : int, default :data:`MAX_JSON_BYTES`
        Larger files are refused before they are read.
    max_pixels, max_aspect
        The limits on the images (see :mod:`gluonkit.data.images`). Every image's header is
        read here and checked against them and against its record's width and height.

    Returns
    -------
    tuple
        ``(datasets, classes)``: the datasets, and the class names in category-id order.

    Raises
    ------
    DataFileError
        A file that is too large or not COCO JSON, or a record with a missing or wrong field,
        a repeated id, an unknown image or category, or a box outside its image; the message
        names the file, the image and the field.
    FileNotFoundError
        A JSON file or a listed image that is missing.

    Example::

        >>> (train, val), classes = load_coco(["train.json", "val.json"])   # doctest: +SKIP
    """
    limits = {"max_pixels": max_pixels, "max_aspect": max_aspect}
    datasets, classes = [], None
    for path in files:
        dataset, categories = _read(os.fspath(path), images_dir, max_bytes, classes, limits)
        datasets.append(dataset)
        classes = categories if classes is None else classes
    return datasets, [name for _, name in classes]


def coco_image_ids(path, images_dir=None, max_bytes=MAX_JSON_BYTES):
    """``{image file: image id}`` of the COCO file ``path``'s images, each file found as
    :func:`load_coco` finds it and given as its real path; for naming predictions. Images
    that are not there are left out."""
    path = os.fspath(path)
    records = _unique(_records(_read_json(path, max_bytes), "images", path), "image", path)
    ids = {}
    for ident, record in records.items():
        try:
            image = _image_path(path, _field(record, "file_name", "name",
                                             f"{path}, image {ident}"), ident, images_dir)
        except FileNotFoundError:
            continue
        ids[os.path.realpath(image)] = ident
    return ids
