"""The embedded shapes detection set: deterministic, boxes inside images and on what is drawn."""
import numpy as np
import pytest
from mxnet import gluon

from gluonkit.data import ShapesDetection

COLOURS = {0: (220, 40, 40), 1: (40, 170, 60), 2: (40, 70, 220)}


def _samples(split, count=60):
    data = ShapesDetection(split)
    return [(data[i][0].asnumpy(), data[i][1]) for i in range(count)]


@pytest.mark.parametrize("split", ["train", "val"])
def test_boxes_lie_inside_images_and_frame_exactly_the_drawn_pixels(split):
    for image, label in _samples(split):
        height, width, _ = image.shape
        assert label.dtype == np.float32 and label.shape[1] == 6 and len(label) >= 1
        colour_of = {cls: (image == colour).all(axis=2) for cls, colour in COLOURS.items()}
        for x0, y0, x1, y1, cls, difficult in label.astype(int):
            assert 0 <= x0 <= x1 < width and 0 <= y0 <= y1 < height and difficult == 0
            inside = colour_of[cls][y0:y1 + 1, x0:x1 + 1]
            # the object's colour touches all four sides of its box ...
            assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()
            # ... and the box holds all of it: a 1-pixel ring around it has none
            ring = colour_of[cls][max(y0 - 1, 0):y1 + 2, max(x0 - 1, 0):x1 + 2].sum()
            assert ring == inside.sum()
        drawn = sum(mask.sum() for mask in colour_of.values())
        boxed = sum(colour_of[int(r[4])][int(r[1]):int(r[3]) + 1, int(r[0]):int(r[2]) + 1].sum()
                    for r in label)
        assert drawn == boxed        # no coloured pixel outside the boxes, boxes do not overlap


def test_each_class_has_its_shape():
    fills = {0: [], 1: [], 2: []}
    for image, label in _samples("train"):
        for x0, y0, x1, y1, cls, _ in label.astype(int):
            box = (image[y0:y1 + 1, x0:x1 + 1] == COLOURS[cls]).all(axis=2)
            fills[cls].append(box.mean())
    assert np.allclose(fills[1], 1.0)                             # a square fills its box
    assert 0.70 < min(fills[0]) and max(fills[0]) < 0.85          # an ellipse ~ pi / 4
    assert 0.45 < min(fills[2]) and max(fills[2]) < 0.62          # a triangle ~ 1 / 2


def test_same_seed_same_data_other_seed_or_split_other_data():
    a, b = ShapesDetection("train")[7], ShapesDetection("train", seed=0)[7]
    assert (a[0].asnumpy() == b[0].asnumpy()).all() and (a[1] == b[1]).all()
    c, v = ShapesDetection("train", seed=1)[7], ShapesDetection("val")[7]
    for other in (c, v):
        assert other[0].shape != a[0].shape or (other[0].asnumpy() != a[0].asnumpy()).any()


def test_a_sample_read_again_is_the_one_drawn_and_changing_a_copy_changes_nothing():
    data = ShapesDetection("val")
    image, label = data[3]
    image[:] = 0
    label[:] = -5
    again, fresh = data[3], ShapesDetection("val")[3]        # kept after the first read / drawn anew
    assert (again[0].asnumpy() == fresh[0].asnumpy()).all() and (again[1] == fresh[1]).all()
    assert again[0].asnumpy().max() > 0 and (again[1][:, :4] >= 0).all()


def test_splits_sizes_classes_and_gluon_compatibility():
    train, val = ShapesDetection("train"), ShapesDetection("val")
    assert (len(train), len(val), len(ShapesDetection(length=5))) == (320, 80, 5)
    assert train.classes == ("circle", "square", "triangle")
    shapes = {train[i][0].shape for i in range(40)}
    assert len(shapes) >= 4 and all(s[2] == 3 and 128 <= min(s[:2]) and max(s[:2]) <= 192 for s in shapes)
    classes = np.concatenate([train[i][1][:, 4] for i in range(40)])
    assert set(classes.astype(int)) == {0, 1, 2}
    image, label = train.transform(lambda x, y: (x.shape, len(y)))[0]
    assert image == train[0][0].shape and label == len(train[0][1])
    assert isinstance(train, gluon.data.Dataset) and train[-1][1].shape == train[319][1].shape


@pytest.mark.parametrize("kwargs, error", [({"split": "test"}, "split must be one of"),
                                           ({"seed": -1}, "seed"), ({"length": 0}, "length")])
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(ValueError, match=error):
        ShapesDetection(**kwargs)


def test_index_out_of_range_raises_index_error():
    with pytest.raises(IndexError, match="out of range"):
        ShapesDetection("val")[80]
