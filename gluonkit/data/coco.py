"""COCO detection files as annotation tools export them, read with checks.

CVAT, Label Studio, Roboflow and FiftyOne write one JSON file per split in COCO's layout:
``images`` (id, file_name, width, height), ``categories`` (id, name) and ``annotations``
(id, image_id, category_id, bbox as [x, y, width, height] in pixels, iscrowd). Their category
ids are rarely contiguous or from 0: classes are the categories in id order and the mapping is
kept (:attr:`COCOFile.category_ids`). Images without annotations stay, as negatives.
Segmentation, keypoints and fields other than those are ignored. Ids written as strings of an
integer (Label Studio's converter writes the ``category`` values of its labelling config so)
are read as that integer; results on such a file are written with its ids as it writes them,
which pycocotools keeps (:func:`coco_result_ids`).

Images are read upright by their EXIF orientation, as labelling tools show them, and their
records' width and height must be that frame's (``upright=False``: the pixels as stored, for
data labelled on them). ``file_name`` is relative to the folder given for the file, else to
the first of these that exists: ``images/SPLIT`` or ``SPLIT`` beside the JSON file's folder or
in it (datumaro's and COCO 2017's layouts: ``annotations/instances_SPLIT.json``), the JSON
file's folder, an ``images`` folder in it or beside it (CVAT's).

With ``skip_bad`` the records that cannot be used (an empty box, a box more than a pixel past
the border, an unknown image or category, a repeated id or image file, a malformed field) are
left out and counted (:mod:`gluonkit.data.badrecords`), and boxes within a pixel of the border
are clipped to it; without, the first refuses the file; a file in which no image is left
with an object is refused. A file listed under two image ids is warned about (it trains
twice).

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
import re
import warnings

import numpy as np
from mxnet import gluon

from .badrecords import BadRecord, BadRecords, LeftOutWarning
from .errors import DataFileError
from .images import MAX_ASPECT, MAX_PIXELS, frame_mismatch, image_frame, read_image

__all__ = ["MAX_JSON_BYTES", "COCOFile", "load_coco", "image_folders", "coco_result_ids"]

#: Files above this size are refused unread (COCO 2017's train annotations take 448 MB).
MAX_JSON_BYTES = 1 << 30
_MAX_DIGITS = 18          # the ids and sizes a tool writes fit in 64 bits
_SLACK_PIXELS = 0.5       # a box may pass its image's edge by rounding, no more
_SKIP_SLACK_PIXELS = 1.0  # with skip_bad, boxes within a pixel of the edge are clipped
_NUMBERS = (int, float)     # bool is neither, by type()
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,%d}" % _MAX_DIGITS)
_PLURALS = {"image": "images", "annotation": "annotations", "category": "categories"}


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
    if len(text) > _MAX_DIGITS and len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"the integer {text[:20]}... has more than {_MAX_DIGITS} digits")
    return int(text)


def _parse_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _read_json(path, max_bytes):
    """The parsed JSON file ``path``, refused in one line when too large or not plain data."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder, not a file; pass the COCO JSON file itself "
                                "(--dataset coco:TRAIN.json,VAL.json).")
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


_CHECKS = {"id": lambda v: type(v) is int,
           "size": lambda v: type(v) in _NUMBERS and v > 0,
           "name": lambda v: type(v) is str and v.strip() != "",
           "flag": lambda v: type(v) is int and v in (0, 1)}
_EXPECTED = {"id": "an integer", "size": "a positive number", "name": "a non-empty string",
             "flag": "0 or 1"}


def _field(record, field, kind, where, default=None):
    """``record[field]`` checked to be of ``kind`` ('id', 'size', 'name', 'flag'); an id
    written as a string of an integer is that integer. ``where`` names the record in errors:
    a string, or a function that makes it (called only for an error)."""
    value = record.get(field, default)
    if _CHECKS[kind](value):
        return value
    where = where() if callable(where) else where
    if value is None:
        raise BadRecord(f"{where}: {field!r} is missing; fix the record.")
    if kind == "id" and isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        return int(value)
    tool = (" (or a string of one: Label Studio's converter writes the category values of its "
            "labelling config so)") if kind == "id" and isinstance(value, str) else ""
    raise BadRecord(f"{where}: {field!r} is {value!r:.60}, not {_EXPECTED[kind]}{tool}; fix the "
                    "record.")


def _ordinal(number):
    """'first', 'second', 'third', then '4th', '21st', ...: the place ``number`` (from 1)."""
    if number <= 3:
        return ("first", "second", "third")[number - 1]
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _unique(records, what, path, bad=None):
    """``{id: record}`` of ``records``; a repeated id is refused through ``bad`` (a
    :class:`BadRecords`; default: always), its later records left out."""
    bad = bad or BadRecords()
    by_id, place = {}, {}
    for number, record in enumerate(records):
        try:
            ident = _field(record, "id", "id", lambda: f"{path}, the {_ordinal(number + 1)} "
                                                       f"{what} of the list")
            if ident in by_id:
                raise BadRecord(f"{path}: {what} id {ident} appears twice (the "
                                f"{_ordinal(place[ident] + 1)} and {_ordinal(number + 1)} "
                                f"{_PLURALS[what]} of the list); ids must be unique.",
                                f"repeated {what} id")
        except DataFileError as err:
            bad.refuse(err, f"{path}: the {_ordinal(number + 1)} {what}")
            continue
        by_id[ident], place[ident] = record, number
    return by_id


def image_folders(path, images_dir=None):
    """The folders where the ``file_name`` entries of the COCO file ``path`` are looked for,
    in order: ``images_dir`` alone if given, else those of the module's description that
    exist (the JSON file's folder always)."""
    return _search(path, images_dir)[0]


def _search(path, images_dir):
    """``(folders, absent)``: :func:`image_folders` of ``path``, and the folders of the
    default search that do not exist (for the message when an image is in none)."""
    if images_dir:
        if os.path.isfile(images_dir):
            raise NotADirectoryError(f"the images folder {images_dir} (--images) is a file, not "
                                     f"a folder; pass the folder that {path}'s file_name entries "
                                     "are relative to.")
        if not os.path.isdir(images_dir):
            raise FileNotFoundError(f"the images folder {images_dir} does not exist; pass the "
                                    f"folder that {path}'s file_name entries are relative to.")
        return [images_dir], []
    here = os.path.dirname(os.path.abspath(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    split = stem[len("instances_"):] if stem.startswith("instances_") else stem
    beside = os.path.dirname(here)
    tried = [os.path.join(beside, "images", split), os.path.join(beside, split),
             os.path.join(here, "images", split), os.path.join(here, split), here,
             os.path.join(here, "images"), os.path.join(beside, "images")]
    folders = [f for f in tried if f == here or os.path.isdir(f)]
    return folders, [f for f in tried if f not in folders]


def _image_path(path, name, image_id, folders, absent=()):
    """The file of image ``name`` (a relative path) in the first of ``folders`` holding it;
    ``absent``: the folders searched that do not exist, named when it is in none."""
    where = f"{path}, image {image_id}"
    if ".." in name and ".." in name.replace("\\", "/").split("/") or os.path.isabs(name):
        raise DataFileError(f"{where}: file_name {name!r} is not a path relative to the images' "
                            "folder; write it relative (no leading / or ..).")
    for folder in folders:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    tried = f" (nor in {', '.join(absent)}, which do not exist)" if absent else ""
    raise FileNotFoundError(f"{where}: {name!r} is not in {' or '.join(folders)}{tried}; add the "
                            "file, or say where the images are (--images DIR, or "
                            "TRAIN_DIR,VAL_DIR for a folder per file).")


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
    upright : bool
        Whether images are read turned by their EXIF orientation (the frame of the boxes).
    left_out : dict
        ``{kind: [where, ...]}``: the records ``skip_bad`` left out (see
        :class:`gluonkit.data.badrecords.BadRecords`).
    zero_annotation_id : bool
        Whether the file numbers an annotation 0, which pycocotools' ``COCOeval`` counts as
        never matched (:meth:`ground_truth` numbers them from 1).
    """

    def __init__(self, path, images, image_ids, sizes, boxes, category_ids, crowd_as_difficult,
                 limits, *, upright=True, left_out=None, zero_annotation_id=False):
        self.path, self.images, self.image_ids = path, images, image_ids
        self.category_ids, self.crowd_as_difficult = list(category_ids), crowd_as_difficult
        self.limits, self.upright = dict(limits), bool(upright)
        self.left_out, self.zero_annotation_id = dict(left_out or {}), zero_annotation_id
        self._sizes, self._boxes = sizes, boxes

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        rows = [box + [cls, crowd] for box, cls, crowd, _ in self._boxes[idx]
                if self.crowd_as_difficult or not crowd]
        return read_image(self.images[idx], upright=self.upright, **self.limits), \
            np.array(rows, dtype=np.float64).reshape(-1, 6)

    def take(self, count):
        """The first ``count`` images, a :class:`COCOFile` still (its ground truth too)."""
        return COCOFile(self.path, self.images[:count], self.image_ids[:count],
                        self._sizes[:count], self._boxes[:count], self.category_ids,
                        self.crowd_as_difficult, self.limits, upright=self.upright,
                        left_out=self.left_out, zero_annotation_id=self.zero_annotation_id)

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
    if not categories:
        raise DataFileError(f"{path}: 'categories' is empty, so the file names no class; export "
                            "it with its labels (a list of {\"id\": 1, \"name\": \"cat\"}, ...).")
    named = [(ident, _field(record, "name", "name", f"{path}, category {ident}").strip())
             for ident, record in sorted(categories.items())]
    names = [name for _, name in named]
    for name in names:
        if names.count(name) > 1:
            raise DataFileError(f"{path}: the category name {name!r} is used by two ids; "
                                "merge them or rename one.")
    return named


def _box(record, ident, images, class_of, path, slack):
    """``(image id, (box, class, crowd, area))`` of the annotation ``record`` of id ``ident``;
    BadRecord."""
    image_id = _field(record, "image_id", "id", lambda: f"{path}, annotation {ident}")
    if image_id not in images:
        raise BadRecord(f"{path}, annotation {ident}: image_id {image_id} is not in 'images'; "
                        "add the image or remove the annotation.",
                        "annotation of an unlisted image")

    def where():
        return f"{path}, image {image_id}, annotation {ident}"

    category = _field(record, "category_id", "id", where)
    if category not in class_of:
        raise BadRecord(f"{where()}: category_id {category} is not one of the categories "
                        f"({', '.join(map(str, sorted(class_of)))}); fix it.", "unknown category")
    bbox = record.get("bbox")
    if bbox is None:
        raise BadRecord(f"{where()}: 'bbox' is missing; give [x, y, width, height] in pixels.")
    if not (type(bbox) is list and len(bbox) == 4 and all(type(v) in _NUMBERS for v in bbox)):
        raise BadRecord(f"{where()}: 'bbox' is {bbox!r:.60}, not [x, y, width, height] in "
                        "pixels.")
    x, y, w, h = bbox
    width, height = images[image_id]
    if not (w > 0 and h > 0):
        raise BadRecord(f"{where()}: 'bbox' [{x:g}, {y:g}, {w:g}, {h:g}] is empty; fix the box.",
                        "empty box")
    if not (x >= -slack and y >= -slack and x + w <= width + slack and y + h <= height + slack):
        raise BadRecord(f"{where()}: 'bbox' [{x:g}, {y:g}, {w:g}, {h:g}] is outside the "
                        f"{width:g}x{height:g} image; fix the box.", "box outside its image")
    crowd = _field(record, "iscrowd", "flag", where, default=0)
    area = record.get("area", w * h)
    if type(area) not in _NUMBERS or area < 0:
        raise BadRecord(f"{where()}: 'area' is {area!r:.60}, not a number >= 0.")
    # tools round their float boxes: clip the slack
    box = [float(max(x, 0)), float(max(y, 0)), float(min(x + w, width)), float(min(y + h, height))]
    return image_id, (box, class_of[category], crowd, float(area))


def _boxes(path, document, images, class_of, bad):
    """``{image id: [(box, class, crowd, area)]}`` of the file's annotations, each checked,
    and whether an annotation id is 0; bad ones refused or counted by ``bad``."""
    boxes = {ident: [] for ident in images}
    annotations = _unique(_records(document, "annotations", path), "annotation", path, bad)
    slack = _SKIP_SLACK_PIXELS if bad.skip else _SLACK_PIXELS
    for ident, record in annotations.items():
        try:
            image_id, box = _box(record, ident, images, class_of, path, slack)
        except DataFileError as err:
            image = record.get("image_id")
            bad.refuse(err, f"{path}: image {image!r:.20}, annotation {ident}")
            continue
        boxes[image_id].append(box)
    return boxes, 0 in annotations


def _repeated_files(path, ids, files, bad):
    """The indices of ``files`` (of images ``ids``) to keep: a file listed under two ids is
    warned about (it trains twice), or with ``bad.skip`` its later records left out."""
    first, keep = {}, []
    for number, (ident, image) in enumerate(zip(ids, files)):
        file = os.path.abspath(image)
        if file in first:
            if bad.skip:
                bad.left_out.setdefault("repeated image file", []).append(
                    f"{path}: image {ident}, {image} (also image {first[file]})")
                continue
            warnings.warn(f"{path}: {image} is listed under image ids {first[file]} and "
                          f"{ident}, so it trains (or counts) twice; remove one record "
                          "(--skip-bad-annotations keeps the first).", stacklevel=4)
        else:
            first[file] = ident
        keep.append(number)
    return keep


def _read(path, search, max_bytes, classes, limits, upright, skip_bad):
    """A :class:`COCOFile` of ``path`` and its ``[(category id, name)]``, checked against the
    ``classes`` of the first file when given (the first file trains, the others evaluate)."""
    document = _read_json(path, max_bytes)
    categories = _categories(path, document)
    if classes is not None and categories != classes:
        raise DataFileError(f"{path}: its categories {categories} differ from the training "
                            f"file's {classes}; export both splits with the same labels.")
    class_of = {ident: index for index, (ident, _) in enumerate(categories)}
    bad = BadRecords(skip_bad)
    records = _unique(_records(document, "images", path), "image", path, bad)
    images, names = {}, {}
    for ident, record in records.items():
        where = f"{path}, image {ident}"
        try:
            images[ident] = tuple(_field(record, field, "size", where)
                                  for field in ("width", "height"))
            names[ident] = _field(record, "file_name", "name", where)
        except DataFileError as err:
            bad.refuse(err, f"{path}: image {ident}")
            images.pop(ident, None)
    ids = list(images)
    if not ids and classes is None:
        raise DataFileError(f"{path} lists no images; a training file needs some.")
    files = [_image_path(path, names[i], i, *search) for i in ids]
    for ident, image in zip(ids, files):      # before the boxes: a turned image explains them
        frame = image_frame(image, upright, **limits)
        if frame[:2] != images[ident]:
            width, height = images[ident]
            raise DataFileError(f"{path}, image {ident}: width and height say {width:g}x{height:g} "
                                f"but {frame_mismatch(image, images[ident], frame, upright)}.")
    boxes, zero_id = _boxes(path, document, images, class_of, bad)
    keep = _repeated_files(path, ids, files, bad)
    ids, files = [ids[k] for k in keep], [files[k] for k in keep]
    objects = sum(not crowd for i in ids for _, _, crowd, _ in boxes[i])
    bad.refuse_if_empty(objects, path, f" of its {len(document['annotations'])} annotations and "
                                       f"{len(document['images'])} images")
    if bad.left_out:
        warnings.warn(bad.summary(of=f" of {path}"), LeftOutWarning, stacklevel=3)
    return COCOFile(path, files, ids, [images[i] for i in ids], [boxes[i] for i in ids],
                    [ident for ident, _ in categories], classes is not None, limits,
                    upright=upright, left_out=bad.left_out, zero_annotation_id=zero_id), categories


def load_coco(files, images_dir=None, max_bytes=MAX_JSON_BYTES, *, upright=True, skip_bad=False,
              max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """One :class:`COCOFile` per COCO JSON file in ``files`` (training first).

    Parameters
    ----------
    files : sequence of str
        The JSON files, e.g. ``("train.json", "val.json")``; every file must have the
        categories of the first. The first trains (its crowd regions are left out), the others
        evaluate (crowd regions are difficult rows).
    images_dir : str or sequence of str, optional
        The folder that ``file_name`` is relative to, one for every file or one per file
        (``["images/train", "images/val"]``). Default: found per file (:func:`image_folders`:
        ``images/SPLIT`` or ``SPLIT`` for ``instances_SPLIT.json``, the JSON file's folder, an
        ``images`` folder in it or beside it).
    max_bytes : int, default :data:`MAX_JSON_BYTES`
        Larger files are refused before they are read.
    upright : bool, default True
        Read the images turned by their EXIF orientation, as labelling tools show them (the
        records' width and height must be that frame's); False: as stored.
    skip_bad : bool, default False
        Leave out and count the records that cannot be used, clip boxes within a pixel of the
        border (a warning says how many of which kind, the first few named; the datasets'
        ``left_out`` holds them); default: refuse the file at the first.
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
        A file that is too large or not COCO JSON, without categories, or left with no object
        by ``skip_bad``, or a record with a missing or wrong field,
        a repeated id, an unknown image or category, or a box outside its image (unless
        ``skip_bad``), or a size that is not the image's (naming its EXIF orientation where
        that turns it); the message names the file, the image and the field.
    FileNotFoundError
        A JSON file or a listed image that is missing.

    Example::

        >>> (train, val), classes = load_coco(["train.json", "val.json"])   # doctest: +SKIP
    """
    limits = {"max_pixels": max_pixels, "max_aspect": max_aspect}
    files = [os.fspath(path) for path in files]
    searches = _folders_per_file(files, images_dir)
    datasets, classes = [], None
    for path, search in zip(files, searches):
        dataset, categories = _read(path, search, max_bytes, classes, limits, upright, skip_bad)
        datasets.append(dataset)
        classes = categories if classes is None else classes
    return datasets, [name for _, name in classes]


def _folders_per_file(files, images_dir):
    """:func:`_search` of each file, ``images_dir`` one folder or one per file."""
    if images_dir is None or isinstance(images_dir, (str, os.PathLike)):
        dirs = [images_dir] * len(files)
    else:
        dirs = list(images_dir)
        if len(dirs) != len(files):
            raise ValueError(f"images_dir names {len(dirs)} folders for {len(files)} files; give "
                             "one folder, or one per file in the files' order.")
    return [_search(path, folder and os.fspath(folder)) for path, folder in zip(files, dirs)]


def coco_result_ids(path, images_dir=None, max_bytes=MAX_JSON_BYTES):
    """The ids that results on the COCO file ``path`` are written with, as pycocotools loads
    them (an id written ``"1"`` stays the string ``"1"``, so that ``COCO.loadRes`` and
    ``COCOeval`` on that file match them).

    Returns
    -------
    tuple
        ``({image file: image id}, {category id: category id as written})``: each image file
        found as :func:`load_coco` finds it and given as its real path (images that are not
        there are left out; a file listed under two ids has the first, with a warning naming
        both), and the file's category ids by their integer value.
    """
    path = os.fspath(path)
    document = _read_json(path, max_bytes)
    records = _unique(_records(document, "images", path), "image", path)
    folders = image_folders(path, images_dir)
    ids = {}
    for ident, record in records.items():
        try:
            image = _image_path(path, _field(record, "file_name", "name",
                                             f"{path}, image {ident}"), ident, folders)
        except FileNotFoundError:
            continue
        real = os.path.realpath(image)
        if real in ids:
            warnings.warn(f"{path}: {image} is listed under image ids {ids[real]!r} and "
                          f"{record['id']!r}; its results are written under the first, "
                          f"{ids[real]!r}.", stacklevel=2)
            continue
        ids[real] = record["id"]
    categories = _unique(_records(document, "categories", path), "category", path)
    return ids, {ident: record["id"] for ident, record in categories.items()}
