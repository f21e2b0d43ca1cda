"""VOC folders written here: read as GluonCV reads them, and every bad annotation refused with
its file named (malformed XML, missing fields, boxes outside the image, unknown classes,
entity bombs and external entities)."""
import os
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest
from gluoncv.data import CustomVOCDetectionBase
from numpy.testing import assert_allclose

from conftest import CLONE_ENV
from gluonkit.data import DataFileError, load_voc, read_annotation

GOOD = {"0": [("cat", (3, 2, 20, 15), 0), ("dog", (10, 8, 32, 24), 1)],
        "1": [("Dog ", (1, 1, 33, 25), 0)],
        "2": [("cat", (5, 5, 6, 6), 0)]}


def annotation(objects, width=32, height=24):
    """VOC XML of an image of ``width`` x ``height`` and ``objects`` (name, 1-based box, difficult)."""
    body = "".join(f"<object><name>{name}</name><difficult>{difficult}</difficult><bndbox>"
                   f"<xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox>"
                   f"</object>" for name, (x0, y0, x1, y1), difficult in objects)
    return (f"<annotation><filename>x.jpg</filename><size><width>{width}</width><height>{height}"
            f"</height><depth>3</depth></size>{body}</annotation>")


def write_voc(root, annotations, train=("0", "1"), val=("2",)):
    """A VOC folder: an image (32x24 JPEG) and an annotation (XML text) per id, and the lists."""
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(root / sub, exist_ok=True)
    rng = np.random.RandomState(0)
    for ident, xml in annotations.items():
        cv2.imwrite(str(root / "JPEGImages" / f"{ident}.jpg"), rng.randint(0, 255, (24, 32, 3), np.uint8))
        (root / "Annotations" / f"{ident}.xml").write_text(
            xml if isinstance(xml, str) else annotation(xml))
    for split, ids in (("train", train), ("val", val)):
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return root


def test_samples_equal_gluoncvs_reader(tmp_path):
    root = write_voc(tmp_path, GOOD)
    (train, val), classes = load_voc(str(root))
    assert classes == ["cat", "dog"] and (len(train), len(val)) == (2, 1)
    for split, ours in (("train", train), ("val", val)):
        theirs = CustomVOCDetectionBase(classes=classes, root=str(root), splits=(("", split),))
        assert len(theirs) == len(ours)
        for i in range(len(ours)):
            (image, label), (their_image, their_label) = ours[i], theirs[i]
            assert (image.asnumpy() == their_image.asnumpy()).all()
            assert label.dtype == their_label.dtype
            assert_allclose(label, their_label)
    assert train[0][1].tolist() == [[2, 1, 19, 14, 0, 0], [9, 7, 31, 23, 1, 1]]     # 0-based
    (train, _), classes = load_voc(str(root), classes=["dog", "cat"])
    assert classes == ["dog", "cat"] and train[0][1][:, 4].tolist() == [1, 0]


def _without(field):
    return annotation(GOOD["0"]).replace(f"<{field}>", "<gone>", 1).replace(f"</{field}>", "</gone>", 1)


@pytest.mark.parametrize("xml, message", [
    (annotation(GOOD["0"])[:-20], r"0\.xml is not well-formed XML \(unclosed token: line 1, column \d+\); fix"),
    ("", r"0\.xml is not well-formed XML"),
    (_without("size"), r"0\.xml: <size> is missing"),
    (_without("width"), r"0\.xml, <size>: <width> is missing or empty"),
    (_without("name"), r"0\.xml, object 0: <name> is missing or empty"),
    (_without("bndbox"), r"0\.xml, object 0 \('cat'\): <bndbox> is missing"),
    (_without("ymax"), r"0\.xml, object 0 \('cat'\): <ymax> is missing or empty"),
    (annotation(GOOD["0"]).replace("<xmin>3<", "<xmin>3px<"),
     r"0\.xml, object 0 \('cat'\): <xmin> is '3px', not a number"),
    (annotation(GOOD["0"]).replace("<difficult>1<", "<difficult>yes<"),
     r"0\.xml, object 1 \('dog'\): <difficult> is 'yes'; write 0 or 1"),
    (annotation(GOOD["0"], width=0), r"0\.xml: the image size 0x24 is not positive"),
    (annotation([("cat", (3, 2, 40, 15), 0)]),
     r"0\.xml, object 0 \('cat'\): box \(3, 2, 40, 15\) is outside the 32x24 image"),
    (annotation([("cat", (0, 2, 20, 15), 0)]), r"box \(0, 2, 20, 15\) is outside"),
    (annotation([("cat", (5, 2, 5, 15), 0)]), r"box \(5, 2, 5, 15\) is empty; fix"),
])
def test_a_bad_annotation_is_named(tmp_path, xml, message):
    root = write_voc(tmp_path, {**GOOD, "0": xml})
    with pytest.raises(DataFileError, match=message) as info:
        load_voc(str(root))
    assert str(root / "Annotations" / "0.xml") in str(info.value) and "\n" not in str(info.value)


BILLION_LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE annotation [\n<!ENTITY lol "lol">\n'
                  + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 or "")) * 10}">\n'
                            for i in range(1, 10))
                  + ']>\n<annotation><size><width>32</width><height>24</height></size>'
                  '<object><name>&lol9;</name></object></annotation>')


@pytest.mark.parametrize("xml", [
    BILLION_LAUGHS,
    '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY secret SYSTEM "file:///etc/hostname">]>'
    '<annotation><size><width>32</width><height>24</height></size><object><name>&secret;'
    '</name></object></annotation>',
], ids=["billion-laughs", "external-entity"])
def test_entities_are_refused_whatever_expat_allows(tmp_path, xml):
    path = tmp_path / "bomb.xml"
    path.write_text(xml)
    with pytest.raises(DataFileError, match=r"bomb\.xml: refused \(EntitiesForbidden: XML entities"):
        read_annotation(str(path))


def test_classes_unknown_to_training_are_named(tmp_path):
    root = write_voc(tmp_path, {**GOOD, "2": [("cat", (5, 5, 6, 6), 0), ("hexagon", (1, 1, 9, 9), 0)]})
    with pytest.raises(DataFileError, match=r"2\.xml, object 1: class 'hexagon' is not one of the "
                                            r"classes of train\.txt's images \(cat, dog\)"):
        load_voc(str(root))
    with pytest.raises(DataFileError, match=r"0\.xml, object 1: class 'dog' is not one of the "
                                            r"classes named \(cat, hexagon\)"):
        load_voc(str(root), classes=["cat", "hexagon"])


def test_list_lines_that_escape_the_folder_or_name_missing_files_are_named(tmp_path):
    root = write_voc(tmp_path, GOOD, train=("0", "../../etc/passwd"))
    with pytest.raises(DataFileError, match=r"train\.txt, line 2: '\.\./\.\./etc/passwd' is not an image id"):
        load_voc(str(root))
    root = write_voc(tmp_path / "b", GOOD, train=("0", "", "7"))
    with pytest.raises(FileNotFoundError, match=r"train\.txt, line 3 lists '7' but .*7\.xml is missing"):
        load_voc(str(root))
    root = write_voc(tmp_path / "c", GOOD)
    os.remove(root / "JPEGImages" / "1.jpg")
    with pytest.raises(FileNotFoundError, match=r"train\.txt, line 2 lists '1' but .*1\.jpg is missing"):
        load_voc(str(root))


def test_the_detect_command_prints_one_line_and_exits_1(tmp_path):
    root = write_voc(tmp_path / "voc", {**GOOD, "1": BILLION_LAUGHS})
    done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.detect", "--dataset", f"voc:{root}",
                           "--out", str(tmp_path / "out"), "--epochs", "1"],
                          capture_output=True, text=True, timeout=120, env=CLONE_ENV)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"gluonkit-detect: {root / 'Annotations' / '1.xml'}: refused (EntitiesForbidden: XML entities "
        "and external references can expand without bound or read other files); VOC annotations need "
        "none, remove the <!DOCTYPE ...> block.")
    assert "Traceback" not in done.stderr


def test_an_image_that_cannot_be_decoded_is_named_with_its_file(tmp_path):
    root = write_voc(tmp_path, GOOD)
    good = (root / "JPEGImages" / "1.jpg").read_bytes()
    (root / "JPEGImages" / "1.jpg").write_bytes(b"not an image")
    with pytest.raises(DataFileError, match=r"1\.jpg"):          # its header, when loading
        load_voc(str(root))
    (root / "JPEGImages" / "1.jpg").write_bytes(good[:len(good) // 2])   # a whole header, cut
    (train, _), _ = load_voc(str(root))
    assert train[0][0].shape == (24, 32, 3)                  # the others still read
    with pytest.raises(DataFileError, match=r"1\.jpg"):
        train[1]


def test_a_size_that_is_not_the_images_is_refused_when_loading(tmp_path):
    """<size> 400x400 with a box at x=390 over a 32x24 JPEG used to train silently."""
    root = write_voc(tmp_path, {**GOOD, "1": annotation([("dog", (390, 1, 399, 20), 0)], 400, 400)})
    with pytest.raises(DataFileError, match=re.escape(
            f"{root / 'Annotations' / '1.xml'}: <size> says 400x400 but "
            f"{root / 'JPEGImages' / '1.jpg'} is 32x24 pixels, so its boxes cannot be placed on "
            "it; fix the size and the boxes (or the image).")):
        load_voc(str(root))


def test_an_exif_oriented_photo_labelled_as_stored_reads_as_stored_when_told(tmp_path):
    # GluonCV's reader (MXNet's imdecode) gives boxes and pixels as stored; by default images
    # are read upright, as labelling tools show them, and a stored size is refused naming the tag
    from PIL import Image
    root = write_voc(tmp_path, GOOD)
    photo = Image.open(root / "JPEGImages" / "0.jpg")
    exif = photo.getexif()
    exif[0x0112] = 6
    photo.save(root / "JPEGImages" / "0.jpg", exif=exif, quality=100)
    with pytest.raises(DataFileError, match=r"0\.xml: <size> says 32x24 but .*0\.jpg is stored "
                                            r"as 32x24 pixels with the EXIF tag Orientation = 6 "
                                            r"\(0x0112\), which turns it to 24x32 .*pass "
                                            r"--exif-orientation ignore"):
        load_voc(str(root))
    (train, _), classes = load_voc(str(root), upright=False)
    image, label = train[0]
    theirs = CustomVOCDetectionBase(classes=classes, root=str(root), splits=(("", "train"),))
    assert image.shape == (24, 32, 3)
    assert (image.asnumpy() == theirs[0][0].asnumpy()).all()
    assert label.tolist() == [[2, 1, 19, 14, 0, 0], [9, 7, 31, 23, 1, 1]]


def _tag(path, orientation):
    """Give the JPEG ``path`` the EXIF tag Orientation = ``orientation``, pixels unchanged."""
    from PIL import Image
    photo = Image.open(path)
    exif = photo.getexif()
    exif[0x0112] = orientation
    photo.save(path, exif=exif, quality=100)


@pytest.mark.parametrize("orientation", [5, 6, 7, 8])
def test_a_turned_photo_is_named_by_its_tag_before_its_boxes_are_checked(tmp_path, orientation):
    # stored 32x24, shown 24x32; <size> the stored one, the box drawn as shown (y up to 30)
    root = write_voc(tmp_path, {**GOOD, "0": [("cat", (3, 2, 20, 30), 0)]})
    _tag(root / "JPEGImages" / "0.jpg", orientation)
    with pytest.raises(DataFileError) as info:
        load_voc(str(root))
    assert str(info.value) == (
        f"{root / 'Annotations' / '0.xml'}: <size> says 32x24 but {root / 'JPEGImages' / '0.jpg'} "
        f"is stored as 32x24 pixels with the EXIF tag Orientation = {orientation} (0x0112), which "
        "turns it to 24x32 as viewers and labelling tools show it, the frame images are read in: "
        "if the boxes were drawn on the image as shown (Label Studio and CVAT show it so), give "
        "it that size, 24x32; if on the stored pixels, pass --exif-orientation ignore "
        "(exif_orientation='ignore').")


def test_an_upright_size_read_as_stored_is_named_by_the_tag_before_the_boxes(tmp_path):
    # <size> the upright 24x32, the box on the stored pixels (x up to 30), read as stored
    root = write_voc(tmp_path, {**GOOD, "0": annotation([("cat", (3, 2, 30, 15), 0)], 24, 32)})
    _tag(root / "JPEGImages" / "0.jpg", 6)
    with pytest.raises(DataFileError) as info:
        load_voc(str(root), upright=False)
    assert str(info.value) == (
        f"{root / 'Annotations' / '0.xml'}: <size> says 24x32 but {root / 'JPEGImages' / '0.jpg'} "
        "is stored as 32x24 pixels with the EXIF tag Orientation = 6 (0x0112), which turns it to "
        "24x32 as viewers and labelling tools show it, the size annotated, but the images are "
        "read as stored (--exif-orientation ignore): leave that option out.")


def test_skipping_every_object_of_a_split_is_refused_naming_its_list_and_the_counts(tmp_path):
    root = write_voc(tmp_path, {**GOOD, "0": [("cat", (5, 2, 5, 15), 0)],
                                "1": [("dog", (3, 3, 9, 3), 0)]})
    with pytest.raises(DataFileError) as info:
        load_voc(str(root), skip_bad=True)
    xml = root / "Annotations"
    assert str(info.value) == (
        f"{root / 'ImageSets' / 'Main' / 'train.txt'}: no image is left with an object: "
        "--skip-bad-annotations left out 2 objects of the 2 in its annotations: empty box (2: "
        f"{xml / '0.xml'}, object 0; {xml / '1.xml'}, object 0); fix those records (or export "
        "the file again) rather than leave them all out.")


def test_a_list_without_images_and_a_training_split_without_objects_are_named(tmp_path):
    root = write_voc(tmp_path / "a", GOOD, train=())
    with pytest.raises(DataFileError, match=r"train\.txt lists no image; put the ids of the train images in it"):
        load_voc(str(root))
    empty = {ident: [] for ident in GOOD}
    root = write_voc(tmp_path / "b", empty)
    with pytest.raises(DataFileError, match=r"train\.txt: none of its 2 images' annotations holds an <object>, "
                                            r"so there is no class to train"):
        load_voc(str(root))
    (train, val), classes = load_voc(str(root), classes=["cat"])      # named classes: negatives only
    assert classes == ["cat"] and [len(label) for label in train.labels + val.labels] == [0, 0, 0]


@pytest.mark.parametrize("annotations, train, val, message", [
    ("empty", ("0", "1"), ("2",), "none of its 2 images' annotations holds an <object>"),
    ("good", (), ("2",), "train.txt lists no image"),
    ("good", ("0", "1"), (), "val.txt lists no image"),
    ("no-val-object", ("0", "1"), ("2",), "none of the 1 validation images (val.txt) holds an object, so "
                                          "validation could not score the detector"),
    ("no-val-object", ("0", "1"), ("2", "0"), "none of the 1 validation images (val.txt, --limit 1) holds an "
                                               "object"),
], ids=["no-object", "empty-train", "empty-val", "no-val-object", "no-val-object-in-the-limit"])
def test_the_detect_command_names_an_empty_list_or_split_in_one_line(tmp_path, annotations, train, val, message):
    objects = {"good": GOOD, "empty": {ident: [] for ident in GOOD}, "no-val-object": {**GOOD, "2": []}}
    root = write_voc(tmp_path / "voc", objects[annotations], train=train, val=val)
    limit = ["--limit", "1"] if "--limit" in message else []
    done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.detect", "--dataset", f"voc:{root}", *limit,
                           "--out", str(tmp_path / "out"), "--epochs", "1", "--image-size", "64"],
                          capture_output=True, text=True, timeout=120, env=CLONE_ENV)
    assert done.returncode == 1, done.stderr[-2000:]
    assert message in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
