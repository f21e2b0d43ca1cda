"""RecordIO files (MXNet's im2rec format) read with checks: damage is named, never obeyed.

MXNet reads a damaged file with C++ errors that name no file ("Invalid RecordIO File"), first
allocating whatever length a damaged record header claims (up to 512 MB), and its index reader
fails on a bad line with a bare ``ValueError``. Here the index and each record's header are
checked against the file before MXNet reads the record, and every failure is a
:class:`DataFileError` naming the file and the record (its key in the index) or index line.

A record is ``[magic][length][IRHeader][labels][image]``: the ``IRHeader``'s first field counts
the float32 labels that follow it (0: one label inside the header).
"""
import math
import os
import struct

import mxnet as mx
import numpy as np

from .errors import DataFileError

__all__ = ["index_of", "read_index", "read_labels", "class_labels", "detection_objects",
           "detection_labels"]

_MAGIC = 0xCED7230A                       # dmlc's RecordIO magic number, before every record
_RECORD_HEAD = struct.Struct("<II")       # magic, then 3 flag bits and 29 length bits
_LENGTH_MASK = (1 << 29) - 1
_IR_HEAD = struct.Struct("<IfQQ")         # mx.recordio.IRHeader: flag, label, id, id2
_REMAKE = "re-create the .rec and its .idx with im2rec"


def index_of(path):
    """The index file beside the RecordIO file ``path``: 'data.rec' -> 'data.idx'."""
    return os.path.splitext(path)[0] + ".idx"


def read_index(path):
    """``[(key, byte offset)]`` of the records of ``path`` in its index's order.

    Raises
    ------
    DataFileError
        An index line that is not ``key<TAB>offset``, a key given twice (MXNet would read the
        later record for both), or an offset outside the .rec file.
    """
    index, size = index_of(path), os.path.getsize(path)
    entries, seen = [], {}
    with open(index, "rb") as f:
        for number, line in enumerate(f, 1):
            fields = line.strip().split(b"\t")
            try:
                key, offset = (int(field) for field in fields) if len(fields) == 2 else (None, None)
            except ValueError:
                key = None
            if key is None:
                raise DataFileError(f"{index}, line {number}: expected 'key<TAB>offset', got "
                                    f"{line[:60]!r}; {_REMAKE}.")
            if key in seen:
                raise DataFileError(f"{index}, line {number}: key {key} is also on line "
                                    f"{seen[key]}; give every record its own key ({_REMAKE}).")
            if not 0 <= offset <= size - _RECORD_HEAD.size:
                raise DataFileError(f"{index}, line {number}: record {key} starts at byte {offset} "
                                    f"but {path} has {size} bytes; the .idx belongs to another "
                                    f"file or the .rec is truncated ({_REMAKE}).")
            seen[key] = number
            entries.append((key, offset))
    return entries


def _check_head(raw, path, key, offset, size):
    """The record header at ``offset`` must hold the magic number and a length inside the file."""
    raw.seek(offset)
    magic, word = _RECORD_HEAD.unpack(raw.read(_RECORD_HEAD.size))
    if magic != _MAGIC:
        raise DataFileError(f"{path}, record {key} (byte {offset}): no RecordIO record starts "
                            f"there (magic {magic:#x}, expected {_MAGIC:#x}); the file is damaged "
                            f"or its .idx belongs to another file ({_REMAKE}).")
    length, left = word & _LENGTH_MASK, size - offset - _RECORD_HEAD.size
    if length > left:
        raise DataFileError(f"{path}, record {key} (byte {offset}): the record claims {length} "
                            f"bytes but the file ends {left} bytes later; the file is truncated "
                            f"or damaged ({_REMAKE}).")


def _label(payload, path, key):
    """The labels of one record, as a 1-D float32 array, after checking its label count."""
    if len(payload) < _IR_HEAD.size:
        raise DataFileError(f"{path}, record {key}: {len(payload)} bytes, too short for its "
                            f"{_IR_HEAD.size}-byte header ({_REMAKE}).")
    count = _IR_HEAD.unpack_from(payload)[0]
    room = (len(payload) - _IR_HEAD.size) // 4
    if count > room:
        raise DataFileError(f"{path}, record {key}: its header counts {count} labels but the "
                            f"record has room for {room}; the header is damaged ({_REMAKE}).")
    return np.array(mx.recordio.unpack(payload)[0].label, dtype=np.float32).reshape(-1)


def _check_class(value, where, classes, fix):
    """``value`` must be a class index: a whole number >= 0, and below ``classes`` if given."""
    if not (math.isfinite(value) and value >= 0 and value == int(value)):
        raise DataFileError(f"{where}: class {value:g} is not a whole number >= 0; label the "
                            "classes 0, 1, 2, ...")
    if classes is not None and value >= classes:
        raise DataFileError(f"{where}: class {value:g} is not one of the {classes} classes "
                            f"(0..{classes - 1}); {fix}.")


def read_labels(path):
    """The labels of every record of the RecordIO file ``path`` (with its .idx beside it), in
    the index's order, the images read but not decoded.

    Returns
    -------
    tuple
        ``(keys, labels)``: the records' keys, and their labels as 1-D float32 arrays.

    Raises
    ------
    DataFileError
        A damaged index (see :func:`read_index`), a record that does not start where the index
        says, is cut short, or whose header counts more labels than it holds.
    """
    entries, size = read_index(path), os.path.getsize(path)
    labels = []
    reader = mx.recordio.MXIndexedRecordIO(index_of(path), path, "r")
    try:
        with open(path, "rb") as raw:
            for key, offset in entries:
                _check_head(raw, path, key, offset, size)
                try:   # MXNet's reader joins a record stored in parts (its data held the magic)
                    payload = reader.read_idx(key)
                except mx.base.MXNetError:
                    payload = None
                if payload is None:
                    raise DataFileError(f"{path}, record {key} (byte {offset}): the record is "
                                        f"damaged (its parts do not fit together; {_REMAKE}).")
                labels.append(_label(payload, path, key))
    finally:
        reader.close()
    return [key for key, _ in entries], labels


def class_labels(path, classes=None, fix="relabel it"):
    """The class label of every record of ``path`` (the first label of each), as int64.

    Parameters
    ----------
    classes : int, optional
        The number of classes: a label of ``classes`` or more is refused.
    fix : str, default 'relabel it'
        What the message of a label out of range tells the user to do.

    Raises
    ------
    DataFileError
        As :func:`read_labels`; also a label that is negative, not a whole number, or (with
        ``classes``) not below ``classes``; the message names the record and the label.
    """
    keys, labels = read_labels(path)
    firsts = np.array([label[0] for label in labels], dtype=np.float64)
    for key, value in zip(keys, firsts):
        _check_class(value, f"{path}, record {key}", classes, fix)
    return firsts.astype(np.int64)


def detection_objects(label, where):
    """The objects of one detection label as stored, an (objects, width) float32 array of
    ``class id, xmin, ymin, xmax, ymax, (more)`` rows; none for an image without objects (a
    label that is its header alone, as GluonCV's detection im2rec packs it).

    ``label`` is ``[header length A >= 2, object width B >= 5, (A - 2 more header values),
    objects of B values each]``; ``where`` names the record in the ``DataFileError`` raised for
    a label of another layout, which says what does not fit.
    """
    label = np.asarray(label, np.float32).ravel()
    shown = "[" + ", ".join(f"{v:g}" for v in label[:4]) + (", ...]" if label.size > 4 else "]")
    fix = ("pack it with GluonCV's detection im2rec: [2, 5, class, xmin, ymin, xmax, ymax, ...] "
           "for objects of 5 values, [2, 5] for an image without objects")
    if label.size < 2 or not all(math.isfinite(v) and v == int(v) for v in label[:2]):
        raise DataFileError(f"{where}: its labels {shown} do not start with a detection header "
                            f"(header length, object width); {fix}.")
    head, width = int(label[0]), int(label[1])
    if head < 2 or head > label.size:
        raise DataFileError(f"{where}: its labels {shown} give a header length of {head}, which "
                            f"must be 2 or more and at most the {label.size} values stored; {fix}.")
    if width < 5:
        raise DataFileError(f"{where}: its labels {shown} give an object width of {width}, which "
                            f"must be 5 or more (class, xmin, ymin, xmax, ymax); {fix}.")
    if (label.size - head) % width:
        raise DataFileError(f"{where}: its {label.size - head} values after the header of {head} "
                            f"do not divide into objects of {width} values ({(label.size - head) % width} "
                            f"left over); {fix}.")
    return label[head:].reshape(-1, width)


def detection_labels(path, classes=None, fix="relabel it"):
    """The class ids of the objects of every record of ``path``, a detection RecordIO file as
    GluonCV's ``RecordFileDetection`` reads it, with its label layout checked.

    A label is ``[header length A >= 2, object width B >= 5, (A - 2 more header values),
    class id, xmin, ymin, xmax, ymax, (B - 5 more values), ...]`` with the box in 0-1
    coordinates of the image (:func:`detection_objects`); an image without objects has the
    header alone.

    Parameters
    ----------
    classes : int, optional
        The number of classes: a class id of ``classes`` or more is refused.
    fix : str, default 'relabel it'
        What the message of a class id out of range tells the user to do.

    Returns
    -------
    list of numpy.ndarray
        One int64 array of class ids per record, in the index's order.

    Raises
    ------
    DataFileError
        As :func:`read_labels`; also a label whose layout GluonCV cannot read, an object whose
        class id is not a whole number >= 0 (or not below ``classes``), or whose box is empty or
        outside the image.
    """
    found = []
    for key, label in zip(*read_labels(path)):
        where = f"{path}, record {key}"
        objects = detection_objects(label, where)
        for number, (cls, x0, y0, x1, y1) in enumerate(objects[:, :5].astype(np.float64)):
            _check_class(cls, f"{where}, object {number}", classes, fix)
            if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
                raise DataFileError(f"{where}, object {number}: box ({x0:g}, {y0:g}, {x1:g}, "
                                    f"{y1:g}) is empty or outside the image (0-1 coordinates: "
                                    "0 <= xmin < xmax <= 1, 0 <= ymin < ymax <= 1); fix the box.")
        found.append(objects[:, 0].astype(np.int64))
    return found
