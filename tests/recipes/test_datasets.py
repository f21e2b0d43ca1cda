"""The classification recipe's data: stratified subsets and splits, size cap, GluonCV-style
normalization."""
import collections
import os
import re
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np
import pytest

from conftest import CLONE_ENV
from gluonkit.data import DataFileError, digits
from gluonkit.recipes.datasets import (IMAGENET_MEAN, IMAGENET_STD, CapSize, dataset_labels,
                                       load_dataset, stratified_indices, stratified_split)


def counts(split):
    """Samples of every class in ``split``."""
    return np.bincount([int(split[i][1]) for i in range(len(split))]).tolist()


def image_keys(dataset):
    """The images of ``dataset``, as a multiset of their bytes."""
    return collections.Counter(np.asarray(dataset[i][0]).tobytes() for i in range(len(dataset)))


def image_tree(root, counts, size=(12, 10), seed=0, split="train"):
    """Class folders under ``root/split`` with ``counts[c]`` random images each."""
    rng = np.random.RandomState(seed)
    for c, count in counts.items():
        os.makedirs(root / split / c, exist_ok=True)
        for i in range(count):
            cv2.imwrite(str(root / split / c / f"{i}.png"),
                        rng.randint(0, 255, size + (3,), dtype=np.uint8))


def test_stratified_limit_keeps_every_class_in_proportion():
    labels = np.repeat([0, 1, 2], [60, 30, 10])     # in class order, as image folders list them
    chosen = stratified_indices(labels, 20, seed=0)
    assert np.bincount(labels[chosen]).tolist() == [12, 6, 2]
    assert len(set(chosen)) == 20
    assert not np.array_equal(chosen, stratified_indices(labels, 20, seed=1))     # seeded
    np.testing.assert_array_equal(chosen, stratified_indices(labels, 20, seed=0))
    assert np.bincount(labels[stratified_indices(labels, 3, seed=4)]).tolist() == [1, 1, 1]


def test_stratified_holdout():
    labels = np.repeat([0, 1, 2], [50, 20, 3])
    train, held = stratified_split(labels, 0.1, seed=0)
    assert np.bincount(labels[held]).tolist() == [5, 2, 1]
    assert sorted(np.concatenate([train, held]).tolist()) == list(range(len(labels)))
    train, held = stratified_split(labels, 0.9, seed=0)
    assert np.bincount(labels[train]).tolist() == [5, 2, 1]      # every class keeps one or more


def test_image_folder_limit_and_holdout_cover_every_class(tmp_path):
    image_tree(tmp_path, {"a": 30, "b": 15, "c": 5})
    train, val, test, names, _ = load_dataset(f"imagefolder:{tmp_path}", image_size=8, limit=10)
    assert names == ["a", "b", "c"]
    assert counts(train) == [6, 3, 1]          # not the first 10 files
    assert counts(test) == [3, 2, 1]           # the stratified 10% holdout
    assert counts(val) == [3, 1, 1]            # 10% of every class of the rest
    assert dataset_labels(mx.gluon.data.vision.ImageFolderDataset(str(tmp_path / "train"))).tolist() \
        == [0] * 30 + [1] * 15 + [2] * 5


def test_the_validation_split_is_carved_from_the_training_images_stratified_and_seeded():
    data = load_dataset("digits", seed=3)
    assert image_keys(data.train) + image_keys(data.val) == image_keys(digits(train=True))
    assert image_keys(data.test) == image_keys(digits(train=False))     # the test set, untouched
    assert len(data.val) == 143 and set(counts(data.val)) <= {14, 15}   # 10% of every digit
    again, other = load_dataset("digits", seed=3), load_dataset("digits", seed=4)
    assert image_keys(again.val) == image_keys(data.val) != image_keys(other.val)
    assert len(load_dataset("digits", val_fraction=0.25).val) == 359
    whole = load_dataset("digits", val_fraction=0)
    assert whole.val is None and len(whole.train) == len(digits(train=True))
    with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\), got 1.0"):
        load_dataset("digits", val_fraction=1.0)


def test_image_folders_give_their_own_validation_and_test_splits(tmp_path):
    image_tree(tmp_path, {"a": 20, "b": 10})
    carved = load_dataset(f"imagefolder:{tmp_path}", image_size=8)
    assert (counts(carved.train), counts(carved.val), counts(carved.test)) == \
        ([16, 8], [2, 1], [2, 1])                       # 10% test, then 10% of the rest
    image_tree(tmp_path, {"a": 3, "b": 2}, split="val")
    with_val = load_dataset(f"imagefolder:{tmp_path}", image_size=8, val_fraction=0.5)
    assert (counts(with_val.train), counts(with_val.val), counts(with_val.test)) == \
        ([18, 9], [3, 2], [2, 1])                       # DIR/val replaces the carve
    image_tree(tmp_path, {"a": 4, "b": 4}, split="test")
    both = load_dataset(f"imagefolder:{tmp_path}", image_size=8)
    assert (counts(both.train), counts(both.val), counts(both.test)) == ([20, 10], [3, 2], [4, 4])


def test_size_cap_shrinks_the_longer_side_only():
    big = mx.nd.array(np.zeros((300, 900, 3)), dtype="uint8")
    assert CapSize(512)(big).shape == (171, 512, 3)
    small = mx.nd.array(np.zeros((40, 30, 3)), dtype="uint8")
    assert CapSize(512)(small) is small


def test_own_sizes_are_capped_and_normalized(tmp_path):
    image_tree(tmp_path, {"a": 2, "b": 2}, size=(40, 100))
    train, _, test, _, preprocessing = load_dataset(f"imagefolder:{tmp_path}", image_size=0,
                                                    max_size=50)
    assert train[0][0].shape == (3, 20, 50)
    assert preprocessing["max_size"] == 50 and preprocessing["resize"] is None


def test_normalization_statistics(tmp_path):
    """Evaluation: resize the shorter side to size/0.875, center crop, (x/255 - mean)/std."""
    image_tree(tmp_path, {"a": 3, "b": 3}, size=(16, 16))
    (tmp_path / "val").mkdir()
    os.rename(tmp_path / "train" / "a", tmp_path / "val" / "a")
    os.makedirs(tmp_path / "train" / "a")
    for i in range(3):
        os.link(tmp_path / "val" / "a" / f"{i}.png", tmp_path / "train" / "a" / f"{i}.png")
    os.makedirs(tmp_path / "val" / "b")
    os.link(tmp_path / "train" / "b" / "0.png", tmp_path / "val" / "b" / "0.png")
    train, val, _, _, preprocessing = load_dataset(f"imagefolder:{tmp_path}", image_size=8)
    x = val[0][0].asnumpy()
    raw = mx.image.imread(str(tmp_path / "val" / "a" / "0.png"))
    crop = mx.image.center_crop(mx.image.resize_short(raw, 9), (8, 8))[0].asnumpy()
    expected = (crop.transpose(2, 0, 1) / 255.0 - np.array(IMAGENET_MEAN)[:, None, None]) \
        / np.array(IMAGENET_STD)[:, None, None]
    np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-5)
    assert preprocessing == {"channels": 3, "resize": None, "resize_short": 9, "crop": [8, 8], "interp": 2,
                             "max_size": None, "scale": 1 / 255, "mean": list(IMAGENET_MEAN),
                             "std": list(IMAGENET_STD), "layout": "NCHW"}
    # training: random resized crops of the size, normalized alike (mean near 0 over many)
    assert train[0][0].shape == (3, 8, 8)


def test_digits_limit_is_stratified():
    train, val, test, names, preprocessing = load_dataset("digits", limit=50)
    assert np.bincount([int(train[i][1]) for i in range(50)]).min() >= 4
    assert preprocessing["resize"] == [8, 8] and preprocessing["channels"] == 1


def test_unknown_dataset():
    with pytest.raises(ValueError, match="--dataset 'mnist' is not one of"):
        load_dataset("mnist")


def _write_rec(path, labels, seed=0):
    """A classification RecordIO file and its .idx as im2rec writes them: a 9x9 PNG per label."""
    rng = np.random.RandomState(seed)
    record = mx.recordio.MXIndexedRecordIO(str(path.with_suffix(".idx")), str(path), "w")
    for key, label in enumerate(labels):
        record.write_idx(key, mx.recordio.pack_img(mx.recordio.IRHeader(0, float(label), key, 0),
                                                   rng.randint(0, 255, (9, 9, 3), np.uint8), img_fmt=".png"))
    record.close()
    return path


def test_a_class_folder_without_images_is_refused_before_training(tmp_path):
    image_tree(tmp_path, {"a": 3, "b": 3})
    os.makedirs(tmp_path / "train" / "c")
    (tmp_path / "train" / "c" / "notes.txt").write_text("not an image")
    with pytest.raises(DataFileError, match=r"train/c: no \.png, \.jpg, \.jpeg, \.bmp, \.tif, \.tiff "
                                            r"image in this class folder; add images of the class "
                                            r"or remove the folder"), pytest.warns(UserWarning):
        load_dataset(f"imagefolder:{tmp_path}", image_size=8)
    os.remove(tmp_path / "train" / "c" / "notes.txt")
    os.makedirs(tmp_path / "train" / "d")
    with pytest.raises(DataFileError, match=r"train/c: .* class folder \(nor in 1 more\)"):
        load_dataset(f"imagefolder:{tmp_path}", image_size=8)


def test_an_empty_class_folder_is_refused_in_val_as_in_train(tmp_path):
    image_tree(tmp_path, {"a": 3, "b": 3})
    image_tree(tmp_path / "held", {"a": 2})
    os.rename(tmp_path / "held" / "train", tmp_path / "val")
    os.makedirs(tmp_path / "val" / "b")      # a class without images, in val/ only
    with pytest.raises(DataFileError, match=r"val/b: no \.png, .* image in this class folder"):
        load_dataset(f"imagefolder:{tmp_path}", image_size=8)


def test_test_labels_beyond_the_training_classes_are_refused_when_loading(tmp_path):
    train = _write_rec(tmp_path / "train.rec", [0, 1, 2, 0, 1, 2])
    test = _write_rec(tmp_path / "test.rec", [0, 1, 5, 2], seed=1)
    with pytest.raises(DataFileError, match=rf"test\.rec, record 2: class 5 is not one of the 3 classes "
                                            rf"\(0..2\); {train} holds no other"):
        load_dataset(f"rec:{train},{test}", image_size=8)
    _write_rec(tmp_path / "test.rec", [0, 1, 2, 2], seed=1)
    assert load_dataset(f"rec:{train},{test}", image_size=8).classes == ["0", "1", "2"]


def test_the_classify_command_prints_a_damaged_file_in_one_line(tmp_path):
    train = _write_rec(tmp_path / "train.rec", [0, 1, 2, 0, 1, 2])
    train.write_bytes(train.read_bytes()[:-40])
    done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.classify", "--dataset", f"rec:{train}",
                           "--out", str(tmp_path / "out"), "--epochs", "1", "--image-size", "8"],
                          capture_output=True, text=True, timeout=120, env=CLONE_ENV)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert re.fullmatch(rf"gluonkit-classify: {train}, record 5 \(byte \d+\): the record claims \d+ bytes "
                        r"but the file ends \d+ bytes later; the file is truncated or damaged \(re-create "
                        r"the \.rec and its \.idx with im2rec\)\.", done.stderr.strip().splitlines()[-1])
