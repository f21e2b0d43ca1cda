"""COCO files written as annotation tools export them: read as pycocotools reads them, and
every malformed or hostile file refused in one line naming the file, the image and the field."""
import json
import os

import numpy as np
import pytest
from numpy.testing import assert_allclose
from pycocotools.coco import COCO

from coco_files import CATEGORIES, TRAIN, cvat_export, write_coco
from gluonkit.data import DataFileError, load_coco


def _pycocotools_labels(path):
    """Per image (in the file's order): ``[x0, y0, x1, y1, class, iscrowd]`` rows by pycocotools."""
    coco = COCO(path)
    index = {ident: i for i, ident in enumerate(sorted(coco.getCatIds()))}
    labels = []
    for image_id in [image["id"] for image in coco.dataset["images"]]:
        rows = [[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                 a["bbox"][1] + a["bbox"][3], index[a["category_id"]], a["iscrowd"]]
                for a in coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))]
        labels.append(np.array(rows, dtype=np.float64).reshape(-1, 6))
    return labels


def test_samples_equal_what_pycocotools_reads(tmp_path):
    train_json, val_json = write_coco(str(tmp_path))
    (train, val), classes = load_coco([train_json, val_json])
    assert classes == ["cat", "dog"] and (len(train), len(val)) == (3, 1)
    assert train.category_ids == [1, 3] and train.image_ids == [1, 2, 3] and val.image_ids == [101]
    # the same file as the second one evaluates: crowd regions kept, as difficult rows
    (train, evaluated), _ = load_coco([train_json, train_json])
    for i, reference in enumerate(_pycocotools_labels(train_json)):
        image, label = train[i]
        assert image.shape[:2] == (train.ground_truth()["images"][i]["height"],
                                   train.ground_truth()["images"][i]["width"])
        assert_allclose(label, reference[reference[:, 5] == 0])     # crowd left out
        assert_allclose(evaluated[i][1], reference)                # crowd kept, as difficult
    assert evaluated[1][1][:, 5].tolist() == [0, 1] and train[1][1][:, 5].tolist() == [0]
    assert train[2][1].shape == (0, 6)                             # a negative image stays
    first = evaluated.take(2)
    assert len(first) == 2 and first.image_ids == [1, 2] and first.crowd_as_difficult
    assert_allclose(first[1][1], evaluated[1][1])


def test_ground_truth_keeps_ids_crowd_and_area(tmp_path):
    train_json, _ = write_coco(str(tmp_path))
    (train, _), _ = load_coco([train_json, train_json])
    theirs = COCO(train_json)
    ours = train.ground_truth()
    assert [c["id"] for c in ours["categories"]] == [1, 3]
    assert [i["id"] for i in ours["images"]] == [1, 2, 3]
    got = sorted((a["image_id"], a["category_id"], a["iscrowd"], a["area"], tuple(a["bbox"]))
                 for a in ours["annotations"])
    want = sorted((a["image_id"], a["category_id"], a["iscrowd"], a["area"], tuple(a["bbox"]))
                  for a in theirs.dataset["annotations"])
    assert got == want


def test_images_beside_the_json_or_under_images_dir(tmp_path):
    paths = write_coco(str(tmp_path))
    moved = tmp_path / "elsewhere"
    os.rename(tmp_path / "images", moved)
    with pytest.raises(FileNotFoundError, match=r"instances_train\.json, image 1: 'a\.jpg' is "
                                                r"not in .*\(--images DIR, or TRAIN_DIR,VAL_DIR"):
        load_coco(paths)
    (train, _), _ = load_coco(paths, images_dir=str(moved))
    assert train.images[1] == os.path.join(str(moved), "sub/b.jpg")


def _bad(document_edit):
    document = cvat_export(TRAIN)
    document_edit(document)
    return document


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["annotations"][0].update(bbox=[30, 3, 20, 12]),
     r"image 1, annotation 1: 'bbox' \[30, 3, 20, 12\] is outside the 40x30 image"),
    (lambda d: d["annotations"][0].update(bbox=[3, 3, 0, 12]), r"annotation 1: 'bbox' .* is empty"),
    (lambda d: d["annotations"][0].update(bbox=[3, 3, 12]), r"annotation 1: 'bbox' is \[3, 3, 12\], not"),
    (lambda d: d["annotations"][0].update(category_id=2),
     r"image 1, annotation 1: category_id 2 is not one of the categories \(1, 3\)"),
    (lambda d: d["annotations"][0].update(image_id=77), r"annotation 1: image_id 77 is not in 'images'"),
    (lambda d: d["annotations"][1].update(id=1), r"annotation id 1 appears twice"),
    (lambda d: d["images"][1].update(id=1), r"image id 1 appears twice"),
    (lambda d: d["categories"].append({"id": 1, "name": "bird"}), r"category id 1 appears twice"),
    (lambda d: d["categories"].append({"id": 9, "name": "cat"}), r"category name 'cat' is used by two"),
    (lambda d: d["images"][0].update(width=0), r"image 1: 'width' is 0, not a positive number"),
    (lambda d: d["images"][0].update(file_name="../x.jpg"), r"image 1: file_name '\.\./x\.jpg' is not a path relative"),
    (lambda d: d["images"][0].pop("file_name"), r"image 1: 'file_name' is missing; fix the record"),
    (lambda d: d["annotations"][0].pop("bbox"), r"annotation 1: 'bbox' is missing; give \[x, y"),
    (lambda d: d["images"][0].update(width=400, height=300),
     r"image 1: width and height say 400x300 but .*a\.jpg is 40x30 pixels"),
    (lambda d: d["annotations"][0].update(iscrowd=2), r"annotation 1: 'iscrowd' is 2, not 0 or 1"),
    (lambda d: d.pop("annotations"), r"'annotations' is missing or not a list"),
    (lambda d: d["images"][2].update(file_name="missing.jpg"), r"image 3: 'missing\.jpg' is not in"),
])
def test_malformed_records_are_refused_naming_file_image_and_field(tmp_path, edit, message):
    write_coco(str(tmp_path))
    path = tmp_path / "annotations" / "bad.json"
    path.write_text(json.dumps(_bad(edit)))
    with pytest.raises((DataFileError, FileNotFoundError), match=r"bad\.json[:,] .*" + message) as info:
        load_coco([str(path)])
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_box_past_the_edge_by_rounding_is_clipped(tmp_path):
    document = cvat_export([("a.jpg", 40, 30, [(1, [-0.2, 1, 40.3, 29.4], 0)])])
    (paths,) = [write_coco(str(tmp_path), {"t": [("a.jpg", 40, 30, [])]}, {"t": document})]
    (data,), _ = load_coco(paths)
    assert data[0][1].tolist() == [[0, 1, 40, 30, 0, 0]]


@pytest.mark.parametrize("text, message", [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ('{"images": [], "annotations": [], "categories": [{"id": 1' + "0" * 5000 + ', "name": "a"}]}',
     "more than 18 digits"),
    ('{"images": [{"id": 1, "width": 1e999}]}', "too large"),
    ('{"images": [{"id": 1, "width": NaN}]}', "NaN is not a number"),
    ('{"images": [', "not a COCO JSON file: Expecting value"),
    ("[1, 2]", "holds a JSON list, not an object"),
    ("", r"is empty \(0 bytes\)"),
    ('{"images": [], "images": []}', "the key 'images' appears twice in one object"),
])
def test_hostile_json_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(DataFileError, match=message) as info:
        load_coco([str(path)])
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_file_above_the_size_limit_is_refused_unread(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(cvat_export(TRAIN)))
    with pytest.raises(DataFileError, match=r"big\.json is [\d,]+ bytes, above the limit of 1,000"):
        load_coco([str(path)], max_bytes=1000)


def test_validation_file_must_have_the_training_categories(tmp_path):
    train_json, val_json = write_coco(str(tmp_path))
    document = json.loads(open(val_json).read())
    document["categories"] = CATEGORIES[:1]
    with open(val_json, "w") as f:
        json.dump(document, f)
    with pytest.raises(DataFileError, match=r"instances_val\.json: its categories .* differ from "
                                            "the training file's"):
        load_coco([train_json, val_json])


def test_a_byte_order_mark_is_read_as_utf8_and_a_training_file_needs_images(tmp_path):
    train_json, _ = write_coco(str(tmp_path))
    text = open(train_json, encoding="utf-8").read()
    with open(train_json, "w", encoding="utf-8-sig") as f:       # as some Windows tools write
        f.write(text)
    (train,), classes = load_coco([train_json])
    assert len(train) == 3 and classes == ["cat", "dog"]
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"images": [], "annotations": [], "categories": CATEGORIES}))
    with pytest.raises(DataFileError, match=r"empty\.json lists no images; a training file"):
        load_coco([str(empty)])


def test_a_missing_images_folder_and_a_folder_given_as_the_file_are_named(tmp_path):
    paths = write_coco(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"the images folder .*nowhere does not exist"):
        load_coco(paths, images_dir=str(tmp_path / "nowhere"))
    with pytest.raises(IsADirectoryError) as info:
        load_coco([str(tmp_path / "annotations")])
    assert str(info.value) == (f"{tmp_path / 'annotations'} is a folder, not a file; pass the COCO "
                               "JSON file itself (--dataset coco:TRAIN.json,VAL.json).")
    with pytest.raises(NotADirectoryError) as info:
        load_coco(paths, images_dir=paths[1])
    assert str(info.value) == (f"the images folder {paths[1]} (--images) is a file, not a folder; "
                               f"pass the folder that {paths[0]}'s file_name entries are relative "
                               "to.")


def test_the_layouts_searched_are_named_when_an_image_is_in_none(tmp_path):
    # CVAT names its file instances_default.json: images/train/ is not one of its layouts
    (path,) = write_coco(str(tmp_path), {"default": TRAIN})
    os.rename(tmp_path / "images", tmp_path / "train")
    os.makedirs(tmp_path / "images")
    os.rename(tmp_path / "train", tmp_path / "images" / "train")
    with pytest.raises(FileNotFoundError) as info:
        load_coco([path])
    here, root = tmp_path / "annotations", tmp_path
    assert str(info.value) == (
        f"{path}, image 1: 'a.jpg' is not in {here} or {root / 'images'} (nor in "
        f"{root / 'images' / 'default'}, {root / 'default'}, {here / 'images' / 'default'}, "
        f"{here / 'default'}, {here / 'images'}, which do not exist); add the file, or say where "
        "the images are (--images DIR, or TRAIN_DIR,VAL_DIR for a folder per file).")


def test_an_empty_categories_list_is_refused_naming_the_file(tmp_path):
    (path,) = write_coco(str(tmp_path), {"train": TRAIN})
    document = json.loads(open(path).read())
    document["categories"], document["annotations"] = [], []
    with open(path, "w") as f:
        json.dump(document, f)
    with pytest.raises(DataFileError) as info:
        load_coco([path])
    assert str(info.value) == (f"{path}: 'categories' is empty, so the file names no class; "
                               'export it with its labels (a list of {"id": 1, "name": "cat"}, '
                               "...).")


def test_skipping_every_object_is_refused_naming_the_file_and_the_counts(tmp_path):
    images = [("a.jpg", 40, 30, [(1, [3, 3, 0, 12], 0), (3, [5, 5, 10, 0], 0)]), ("c.jpg", 32, 32, [])]
    (path,) = write_coco(str(tmp_path), {"train": images})
    with pytest.raises(DataFileError) as info:
        load_coco([path], skip_bad=True)
    assert str(info.value) == (
        f"{path}: no image is left with an object: --skip-bad-annotations left out 2 records of "
        f"its 2 annotations and 2 images: empty box (2: {path}: image 1, annotation 1; {path}: "
        "image 1, annotation 2); fix those records (or export the file again) rather than leave "
        "them all out.")
    # one object left: it trains
    images[0][3][1] = (3, [5, 5, 10, 10], 0)
    (path,) = write_coco(str(tmp_path), {"train": images})
    with pytest.warns(UserWarning, match="left out 1 record"):
        (train,), _ = load_coco([path], skip_bad=True)
    assert train[0][1].tolist() == [[5, 5, 15, 15, 1, 0]]


def test_image_ids_are_found_by_file_not_by_name(tmp_path):
    from gluonkit.data import coco_result_ids
    paths = write_coco(str(tmp_path))
    other = tmp_path / "other" / "images"
    os.makedirs(other)
    os.link(tmp_path / "images" / "a.jpg", other / "a.jpg")           # the same name elsewhere
    ids, categories = coco_result_ids(paths[0])
    assert categories == {1: 1, 3: 3}
    assert ids == {os.path.realpath(str(tmp_path / "images" / name)): i
                   for name, i in (("a.jpg", 1), ("sub/b.jpg", 2), ("c.jpg", 3))}
    assert os.path.realpath(str(other / "a.jpg")) not in ids


def test_a_repeated_category_id_is_named_in_plain_english(tmp_path):
    (path,) = write_coco(str(tmp_path), {"train": TRAIN})
    document = json.loads(open(path).read())
    document["categories"].append({"id": 1, "name": "bird"})
    with open(path, "w") as f:
        json.dump(document, f)
    with pytest.raises(DataFileError) as info:
        load_coco([path])
    assert str(info.value) == (f"{path}: category id 1 appears twice (the first and third "
                               "categories of the list); ids must be unique.")
