"""RecordIO files written here as im2rec writes them, read back, then damaged: each damage is
refused with the file and record (or index line) named, before MXNet reads the record."""
import struct

import mxnet as mx
import numpy as np
import pytest

from gluonkit.data import DataFileError, class_labels, detection_labels, read_labels


def write_rec(path, labels, seed=0):
    """A RecordIO file and its .idx holding a random 9x9 PNG per label, keys 0, 1, 2, ..."""
    rng = np.random.RandomState(seed)
    record = mx.recordio.MXIndexedRecordIO(str(path.with_suffix(".idx")), str(path), "w")
    for key, label in enumerate(labels):
        header = mx.recordio.IRHeader(0, label, key, 0)
        record.write_idx(key, mx.recordio.pack_img(
            header, rng.randint(0, 255, (9, 9, 3), dtype=np.uint8), img_fmt=".png"))
    record.close()
    return path


def offsets(path):
    return [int(line.split("\t")[1]) for line in path.with_suffix(".idx").read_text().splitlines()]


def test_labels_read_back_equal_what_was_packed(tmp_path):
    path = write_rec(tmp_path / "a.rec", [2.0, 0.0, np.array([1, 0.25, 0.5], np.float32)])
    keys, labels = read_labels(str(path))
    assert keys == [0, 1, 2]
    assert [label.tolist() for label in labels] == [[2.0], [0.0], [1.0, 0.25, 0.5]]
    assert class_labels(str(path)).tolist() == class_labels(str(path), classes=3).tolist() == [2, 0, 1]
    gluon_reads = mx.gluon.data.vision.ImageRecordDataset(str(path))     # MXNet's own reader
    assert [np.ravel(y).tolist() for _, y in gluon_reads] == [label.tolist() for label in labels]


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[:-50])
    return r"record 2 \(byte \d+\): the record claims \d+ bytes but the file ends \d+ bytes later"


def _wrong_magic(path):
    data = bytearray(path.read_bytes())
    data[offsets(path)[1]:offsets(path)[1] + 4] = b"\0\0\0\0"
    path.write_bytes(bytes(data))
    return r"record 1 \(byte \d+\): no RecordIO record starts there \(magic 0x0"


def _absurd_label_count(path):
    data = bytearray(path.read_bytes())
    start = offsets(path)[0] + 8                 # past the magic and the length
    data[start:start + 4] = struct.pack("<I", 2 ** 31)
    path.write_bytes(bytes(data))
    return r"record 0: its header counts 2147483648 labels but the record has room for \d+"


def _huge_length(path):
    data = bytearray(path.read_bytes())
    start = offsets(path)[1] + 4
    data[start:start + 4] = struct.pack("<I", (1 << 29) - 1)    # 512 MB, flags 0
    path.write_bytes(bytes(data))
    return r"record 1 \(byte \d+\): the record claims 536870911 bytes"


def _bad_index_line(path):
    index = path.with_suffix(".idx")
    index.write_text(index.read_text().replace("1\t", "one\t"))
    return r"a\.idx, line 2: expected 'key<TAB>offset', got b'one"


def _repeated_key(path):
    index = path.with_suffix(".idx")
    index.write_text(index.read_text().replace("2\t", "0\t"))
    return r"a\.idx, line 3: key 0 is also on line 1"


def _offset_past_the_end(path):
    index = path.with_suffix(".idx")
    index.write_text(index.read_text() + "3\t999999\n")
    return r"a\.idx, line 4: record 3 starts at byte 999999 but .*a\.rec has \d+ bytes"


@pytest.mark.parametrize("damage", [_truncated, _wrong_magic, _absurd_label_count, _huge_length,
                                    _bad_index_line, _repeated_key, _offset_past_the_end])
def test_damage_is_named_with_its_file_and_record(tmp_path, damage):
    path = write_rec(tmp_path / "a.rec", [0.0, 1.0, 2.0])
    expected = damage(path)
    with pytest.raises(DataFileError, match=expected) as info:
        read_labels(str(path))
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)
    assert "MXNetError" not in str(info.value) and "Check failed" not in str(info.value)


@pytest.mark.parametrize("label, message", [
    (-1.0, "class -1 is not a whole number >= 0"),
    (1.5, "class 1.5 is not a whole number >= 0"),
    (np.nan, "class nan is not a whole number >= 0"),
    (3.0, r"class 3 is not one of the 3 classes \(0..2\); relabel it"),
])
def test_class_labels_out_of_range_are_named(tmp_path, label, message):
    path = write_rec(tmp_path / "a.rec", [0.0, 2.0, label])
    with pytest.raises(DataFileError, match=r"a\.rec, record 2: " + message):
        class_labels(str(path), classes=3)


def detection(*objects, head=2, width=5):
    return np.array([head, width] + [0] * (head - 2) + [v for o in objects for v in o], np.float32)


def test_detection_labels_are_the_class_ids_of_every_object(tmp_path):
    path = write_rec(tmp_path / "d.rec", [detection([1, 0, 0, 0.5, 0.5], [0, 0.2, 0.2, 1, 1]),
                                          detection([2, 0, 0, 1, 1, 1], head=3, width=6)])
    assert [ids.tolist() for ids in detection_labels(str(path))] == [[1, 0], [2]]


@pytest.mark.parametrize("label, message", [
    (detection([1, 0, 0, 0.5, 0.5], width=4), r"record 1: its labels \[2, 4, 1, 0, \.\.\.\] give an "
                                               r"object width of 4, which must be 5 or more"),
    (detection([1, 0, 0, 0.5, 0.5])[:-1], r"record 1: its 4 values after the header of 2 do not "
                                          r"divide into objects of 5 values \(4 left over\)"),
    (detection([1, 0, 0, 0.5, 0.5], [2, 0, 0, 1, 1])[:-2], r"record 1: its 8 values after the "
                                                           r"header of 2 do not divide into objects of 5 values \(3 left over\)"),
    (np.array([1, 5, 1, 0, 0, 0.5, 0.5], np.float32), r"record 1: its labels \[1, 5, 1, 0, \.\.\.\] "
                                                      r"give a header length of 1, which must be 2 or more"),
    (np.array([7], np.float32), r"record 1: its labels \[7\] do not start with a detection header"),
    (detection([7, 0, 0, 0.5, 0.5]), r"record 1, object 0: class 7 is not one of the 3 classes"),
    (detection([1, 0, 0, 0.5, 0.5], [0, 0.5, 0.5, 1.2, 1]),
     r"record 1, object 1: box \(0.5, 0.5, 1.2, 1\) is empty or outside the image"),
    (detection([1, 0.5, 0, 0.5, 0.5]), r"record 1, object 0: box \(0.5, 0, 0.5, 0.5\) is empty"),
])
def test_detection_labels_gluoncv_cannot_use_are_named(tmp_path, label, message):
    path = write_rec(tmp_path / "d.rec", [detection([0, 0, 0, 1, 1]), label])
    with pytest.raises(DataFileError, match=r"d\.rec, " + message):
        detection_labels(str(path), classes=3)


def test_a_detection_label_of_a_header_alone_is_an_image_without_objects(tmp_path):
    path = write_rec(tmp_path / "d.rec", [detection([0, 0, 0, 1, 1]), np.array([2, 5], np.float32),
                                          np.array([2, 6], np.float32)])
    assert [ids.tolist() for ids in detection_labels(str(path), classes=3)] == [[0], [], []]
