"""Every resize of an export's preprocessing uses the ``interp`` its model.json records, with
the size rules docs/preprocessing.md writes down: checked against MXNet's own ``mx.image``
functions called the long way, as a user rebuilding the input from model.json would."""
import json

import mxnet as mx
import numpy as np
import pytest

import gluonkit
from gluonkit.inference import preprocess
from gluonkit.preprocessing import plan
from image_files import pixels

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _tensor(image):
    """An HWC uint8 NDArray as the network's input, the long way."""
    x = image.astype("float32") / 255
    return ((x - mx.nd.array(MEAN)) / mx.nd.array(STD)).transpose((2, 0, 1)).asnumpy()


@pytest.mark.parametrize("interp", [0, 1, 2, 3, 9])
def test_resize_short_and_crop_use_the_recorded_interp(interp):
    image = mx.nd.array(pixels(54, 77), dtype="uint8")           # 77 x 54: the short side is 54
    p = {"channels": 3, "resize_short": 40, "crop": [32, 32], "interp": interp, "mean": MEAN,
         "std": STD}
    short = mx.image.resize_short(image, 40, interp=interp)       # 57 x 40 (57 = 40 * 77 // 54)
    expected, _ = mx.image.center_crop(short, (32, 32), interp=interp)
    assert short.shape == (40, 57, 3)
    np.testing.assert_array_equal(preprocess(image, p).asnumpy(), _tensor(expected))


@pytest.mark.parametrize("interp", [0, 2, 3])
def test_max_size_uses_the_recorded_interp(interp):
    image = mx.nd.array(pixels(30, 101), dtype="uint8")
    p = {"channels": 3, "max_size": 50, "interp": interp, "mean": MEAN, "std": STD}
    expected = mx.image.imresize(image, 50, 15, interp=interp)    # 15 = round(30 * 50 / 101)
    np.testing.assert_array_equal(preprocess(image, p).asnumpy(), _tensor(expected))


def test_the_shorter_side_rounds_down_and_the_cap_to_even():
    steps = plan((77, 54), {"channels": 3, "resize_short": 40}, "x", 10 ** 8).steps
    assert steps == [("resize", 57, 40, 1)]                      # 40 * 77 / 54 = 57.04
    steps = plan((79, 54), {"channels": 3, "resize_short": 40}, "x", 10 ** 8).steps
    assert steps == [("resize", 58, 40, 1)]                      # 58.5 rounds down
    steps = plan((100, 25), {"channels": 3, "max_size": 10}, "x", 10 ** 8).steps
    assert steps == [("resize", 10, 2, 1)]                       # 2.5 rounds to even


def test_a_format_2_export_is_served_as_it_always_was(tmp_path):
    """Exports written before interp applied everywhere resized the shorter side bicubic and
    the longer one's cap bilinear, whatever interp said: they keep doing so."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.GlobalAvgPool2D(), mx.gluon.nn.Flatten(), mx.gluon.nn.Dense(2))
    net.initialize()
    p = {"channels": 3, "resize_short": 40, "crop": [32, 32], "interp": 0, "mean": MEAN,
         "std": STD}
    prefix = str(tmp_path / "model")
    gluonkit.export_model(net, prefix, (3, 32, 32), outputs=["a", "b"], preprocessing=p,
                          onnx=False)
    with open(prefix + ".json") as f:
        metadata = json.load(f)
    assert metadata["format"] == 3
    image = pixels(54, 77)
    short = mx.image.resize_short(mx.nd.array(image, dtype="uint8"), 40, interp=2)
    old, _ = mx.image.center_crop(short, (32, 32), interp=2)
    new, _ = mx.image.center_crop(mx.image.resize_short(mx.nd.array(image, dtype="uint8"), 40,
                                                        interp=0), (32, 32), interp=0)
    logits = {}
    for fmt in (3, 2):
        with open(prefix + ".json", "w") as f:
            json.dump(dict(metadata, format=fmt), f)
        logits[fmt] = gluonkit.predict(prefix, [image], top_k=1)[0]["top"][0]["probability"]
    probabilities = {fmt: mx.nd.softmax(net(mx.nd.array(_tensor(x))[None])).asnumpy().max()
                     for fmt, x in ((3, new), (2, old))}
    assert logits == pytest.approx(probabilities, abs=1e-6)
    assert not np.array_equal(_tensor(old), _tensor(new))


def test_the_classifier_recipe_records_the_interp_it_validates_with():
    from gluonkit.recipes.datasets import _preprocessing

    cropped = _preprocessing(3, MEAN, STD, resize_short=37, crop=32)
    capped = _preprocessing(3, MEAN, STD, max_size=64)
    assert (cropped["interp"], capped["interp"]) == (2, 1)


@pytest.mark.parametrize("size, padded", [((96, 14), (96, 32)), ((96, 1), (96, 32)),
                                          ((16, 32), (64, 32)), ((112, 16), (112, 16)),
                                          ((33, 33), (33, 33))])
def test_an_input_too_small_for_the_proposals_is_padded_to_whole_strides(size, padded):
    """[16, 7]: a Faster R-CNN keeping 100 proposals out of 15 anchors a cell needs 7 cells;
    96 x 14 has 6 x 1."""
    steps = plan(size, {"channels": 3, "min_cells": [16, 7]}, "x", 10 ** 8)
    assert steps.input_size == padded
    assert steps.steps == ([] if padded == size else [("pad",) + padded])
    assert steps.to_image([0, 0, *padded]) == [0, 0, *size]       # boxes keep their pixels
