"""Detection data as the annotation tools' own exporters write it (Label Studio's converter,
datumaro's COCO and VOC exporters): photos turned by an EXIF orientation read in the frame
they were labelled in, an image folder per split, and imperfect records left out on request."""
import os
import re
import warnings

import cv2
import numpy as np
import pytest
from numpy.testing import assert_allclose
from PIL import Image

from annotation_tools import datumaro_export, label_studio_coco, tools_python  # noqa: F401
from gluonkit.data import DataFileError, load_coco, load_voc
from gluonkit.data.images import read_image
from gluonkit.inference import preprocess
from gluonkit.recipes.detect import load_detection
from gluonkit.serve.images import prepare

RED, GRAY = (220, 20, 20), (90, 90, 90)


def _photo(path, upright, orientation):
    """Save the (H, W, 3) RGB ``upright`` image as a JPEG whose pixels are stored turned so
    that its EXIF ``orientation`` (1, 3 or 6) shows it upright."""
    stored = {1: upright, 3: np.rot90(upright, 2), 6: np.rot90(upright, 1)}[orientation]
    image = Image.fromarray(np.ascontiguousarray(stored))
    exif = image.getexif()
    exif[0x0112] = orientation
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image.save(path, exif=exif, quality=100)


def _square(width, height, box):
    """A gray image with a red square at ``box`` (x, y, w, h)."""
    image = np.full((height, width, 3), GRAY, np.uint8)
    x, y, w, h = box
    image[y:y + h, x:x + w] = RED
    return image


def _is_red(image, box):
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    patch = image.asnumpy()[y0 + 1:y1 - 1, x0 + 1:x1 - 1].reshape(-1, 3).mean(axis=0)
    return patch[0] > 150 and patch[1] < 80


def test_label_studio_boxes_on_turned_photos_lie_on_the_red_square(tools_python, tmp_path):
    # Label Studio shows photos upright; under its box the training image must hold the square
    box = [26, 16, 10, 10]
    for name, orientation in (("plain", 1), ("flipped", 3)):
        _photo(str(tmp_path / "images" / f"{name}.jpg"), _square(40, 30, box), orientation)
    result = label_studio_coco(tools_python, tmp_path, [
        (f"images/{name}.jpg", (40, 30), [("square", box)]) for name in ("plain", "flipped")],
        {"square": None})
    (train,), _ = load_coco([result])
    for i in range(2):
        image, label = train[i]
        assert _is_red(image, label[0, :4]), train.images[i]
    # the same frame where the model predicts (gluonkit-predict) and serves (gluonkit.serve)
    shown = read_image(train.images[1]).asnumpy()
    preprocessing = {"channels": 3, "scale": 1 / 255}
    expected = shown.transpose(2, 0, 1) / 255
    assert_allclose(preprocess(train.images[1], preprocessing).asnumpy(), expected, atol=1e-6)
    assert_allclose(prepare(train.images[1], preprocessing, 10 ** 6, 100)[1], expected, atol=1e-6)


def test_a_turned_size_is_refused_naming_the_exif_tag(tools_python, tmp_path):
    # shown 30x40 (orientation 6), stored 40x30: the converter writes the stored size
    box = [10, 26, 10, 10]
    _photo(str(tmp_path / "images" / "side.jpg"), _square(30, 40, box), 6)
    corner = [2, 2, 5, 5]                   # a box inside both frames
    result = label_studio_coco(tools_python, tmp_path, [("images/side.jpg", (30, 40),
                                                         [("square", box), ("square", corner)])],
                               {"square": None})
    with pytest.raises(DataFileError, match=r"result\.json, image 0: width and height say 40x30 "
                                            r"but .*side\.jpg is stored as 40x30 pixels with the "
                                            r"EXIF tag Orientation = 6 \(0x0112\), which turns it "
                                            r"to 30x40 .*give it that size, 30x40; if on the "
                                            r"stored pixels, pass --exif-orientation ignore"):
        load_coco([result])
    # labelled on the stored pixels (GluonCV's habit): read as stored, where told so
    (train,), _ = load_coco([result], upright=False, skip_bad=True)   # the square's box is out
    assert train[0][0].shape == (30, 40, 3) and not train.upright
    assert_allclose(train[0][1], [[2, 2, 7, 7, 0, 0]], atol=1e-9)   # the converter rounds
    stored = {"channels": 3, "scale": 1 / 255, "exif_orientation": "ignore"}
    assert preprocess(train.images[0], stored).shape == (3, 30, 40)
    assert prepare(train.images[0], stored, 10 ** 6, 100)[1].shape == (3, 30, 40)
    assert preprocess(train.images[0], dict(stored, exif_orientation="apply")).shape == (3, 40, 30)


def test_label_studio_string_ids_and_ids_from_0(tools_python, tmp_path):
    # category="1" in the labelling config: the converter writes "id": "1", "category_id": "2"
    image = _square(40, 30, [5, 5, 10, 10])
    cv2.imwrite(str(tmp_path / "a.jpg"), image[:, :, ::-1])
    os.makedirs(tmp_path / "images")
    os.rename(tmp_path / "a.jpg", tmp_path / "images" / "a.jpg")
    result = label_studio_coco(tools_python, tmp_path, [
        ("images/a.jpg", (40, 30), [("circle", [5, 5, 10, 10]), ("square", [20, 10, 8, 8])])],
        {"circle": 1, "square": 2})
    with open(result) as f:
        assert '"category_id": "2"' in f.read()
    (train, val), classes = load_coco([result, result])
    assert classes == ["circle", "square"] and train.category_ids == [1, 2]
    assert train[0][1][:, 4].tolist() == [0, 1]
    assert val.zero_annotation_id and [a["id"] for a in val.ground_truth()["annotations"]] == [1, 2]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["categories"][0].update(id="one"),
     r"the first category of the list: 'id' is 'one', not an integer \(or a string of one: "
     r"Label Studio's converter writes"),
    (lambda d: d["categories"][1].pop("id"), r"the second category of the list: 'id' is missing"),
])
def test_ids_that_are_not_integers_are_refused_naming_the_place(tmp_path, edit, message):
    import json
    from coco_files import TRAIN, write_coco
    path = write_coco(str(tmp_path), {"train": TRAIN})[0]
    with open(path) as f:
        document = json.load(f)
    edit(document)
    with open(path, "w") as f:
        json.dump(document, f)
    with pytest.raises(DataFileError, match=message):
        load_coco([path])


def test_a_file_under_two_image_ids_is_warned_about(tools_python, tmp_path):
    os.makedirs(tmp_path / "images")
    cv2.imwrite(str(tmp_path / "images" / "a.jpg"), _square(40, 30, [5, 5, 10, 10]))
    task = ("images/a.jpg", (40, 30), [("square", [5, 5, 10, 10])])
    result = label_studio_coco(tools_python, tmp_path, [task, task], {"square": None})
    with pytest.warns(UserWarning, match=r"a\.jpg is listed under image ids 0 and 1, so it trains"):
        (train,), _ = load_coco([result])
    assert len(train) == 2
    with pytest.warns(UserWarning, match=r"left out 1 record .*: repeated image file "
                                         r"\(1: .*image 1, .*a\.jpg \(also image 0\)\)"):
        (train,), _ = load_coco([result], skip_bad=True)
    assert train.image_ids == [0]


def _frames(folder, count, seed):
    """``count`` JPEGs of random pixels (40x30) in ``folder``; their paths."""
    rng = np.random.RandomState(seed)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(count):
        paths.append(os.path.join(folder, f"frame_{i:03d}.jpg"))
        cv2.imwrite(paths[-1], rng.randint(0, 255, (30, 40, 3), np.uint8))
    return paths


def test_datumaro_coco_layout_finds_an_image_folder_per_split(tools_python, tmp_path):
    # annotations/instances_{train,val}.json beside images/train/ and images/val/, the same
    # file names in both
    train, val = _frames(str(tmp_path / "src" / "train"), 2, 0), _frames(str(tmp_path / "src" / "val"), 2, 1)
    items = [(subset, f"frame_{i:03d}", path, [[2, 3, 10, 8, 0]])
             for subset, paths in (("train", train), ("val", val)) for i, path in enumerate(paths)]
    root = datumaro_export(tools_python, tmp_path, "coco_instances", items, ["circle"])
    files = [os.path.join(root, "annotations", f"instances_{s}.json") for s in ("train", "val")]
    (train_set, val_set), _ = load_coco(files)
    assert train_set.images[0] == os.path.join(root, "images", "train", "frame_000.jpg")
    assert val_set.images[0] == os.path.join(root, "images", "val", "frame_000.jpg")
    assert not np.array_equal(train_set[0][0].asnumpy(), val_set[0][0].asnumpy())
    # --images TRAIN_DIR,VAL_DIR: a folder per file, wherever they are
    moved = tmp_path / "elsewhere"
    os.rename(os.path.join(root, "images"), moved)
    with pytest.raises(FileNotFoundError, match=r"'frame_000\.jpg' is not in"):
        load_coco(files)
    train_set, val_set, _ = load_detection(f"coco:{files[0]},{files[1]}",
                                           images_dir=f"{moved / 'train'},{moved / 'val'}")
    assert val_set.images[1] == str(moved / "val" / "frame_001.jpg")


def test_datumaro_coco_with_imperfect_boxes_trains_on_the_rest(tools_python, tmp_path):
    frames = _frames(str(tmp_path / "src"), 3, 0)
    items = [("train", "frame_000", frames[0], [[2, 3, 10, 8, 0], [5, 5, 0, 8, 0]]),   # zero width
             ("train", "frame_001", frames[1], [[30, 3, 10.8, 8, 0]]),    # 0.8 px past the border
             ("train", "frame_002", frames[2], [[30, 3, 20, 8, 0], [1, 1, 5, 5, 0]])]  # far past
    root = datumaro_export(tools_python, tmp_path, "coco_instances", items, ["circle"])
    path = os.path.join(root, "annotations", "instances_train.json")
    with pytest.raises(DataFileError, match=r"instances_train\.json, image 1, annotation 2: "
                                            r"'bbox' \[5, 5, 0, 8\] is empty"):
        load_coco([path])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (train,), _ = load_coco([path], skip_bad=True)
    summary = str(caught[0].message)
    assert re.search(r"left out 2 records of .*instances_train\.json: empty box \(1: .*image 1, "
                     r"annotation 2\), box outside its image \(1: .*image 3, annotation 4\)\.",
                     summary), summary
    assert train.left_out == {"empty box": [f"{path}: image 1, annotation 2"],
                              "box outside its image": [f"{path}: image 3, annotation 4"]}
    labels = [train[i][1][:, :4].tolist() for i in range(3)]
    assert labels == [[[2, 3, 12, 11]], [[30, 3, 40, 11]], [[1, 1, 6, 6]]]   # clipped to 40


def test_datumaro_voc_with_imperfect_boxes_trains_on_the_rest(tools_python, tmp_path):
    frames = _frames(str(tmp_path / "src"), 2, 0)
    # datumaro writes x + w as <xmax>: VOC's pixels from 1 end at width + 1, 41 here
    items = [("train", "frame_000", frames[0], [[2, 3, 10, 8, 0], [30, 3, 11.8, 8, 1]]),
             ("train", "frame_001", frames[1], [[30, 3, 30, 8, 0]]),
             ("val", "frame_100", frames[0], [[2, 3, 10, 8, 0]])]   # VOC: one name per image
    root = datumaro_export(tools_python, tmp_path, "voc_detection", items, ["circle", "square"])
    with pytest.raises(DataFileError, match=r"frame_00[01]\.xml, object [01] \('(circle|square)'\): "
                                            r"box .* is outside the 40x30 image"):
        load_voc(root)
    with pytest.warns(UserWarning, match=r"left out 1 object of train\.txt's annotations: box "
                                         r"outside its image \(1: .*frame_001\.xml, object 0\)\."):
        (train, val), classes = load_voc(root, skip_bad=True)
    assert classes == ["circle", "square"]
    assert train[0][1][:, :5].tolist() == [[1, 2, 11, 10, 0], [29, 2, 40, 10, 1]]   # clipped
    assert train[1][1].shape == (0, 6) and len(val) == 1
