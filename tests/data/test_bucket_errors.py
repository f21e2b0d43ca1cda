"""bucket_loader: wrong bucket arguments and ragged labels get clear errors; Pad fixes the latter."""
import numpy as np
import pytest
from gluoncv.data.batchify import Pad
from mxnet import gluon

from gluonkit.data import bucket_loader


def detection_set():
    rng = np.random.RandomState(0)
    images = [rng.rand(3, s, s).astype("float32") for s in (8, 8, 12, 12)]
    boxes = [np.full((k, 5), k, dtype="float32") for k in (1, 3, 2, 1)]
    return gluon.data.SimpleDataset(list(zip(images, boxes)))


@pytest.mark.parametrize("buckets", [True, 2.5, "2", None])
def test_buckets_of_the_wrong_type_are_named(buckets):
    with pytest.raises(TypeError, match=f"buckets must be an int .*got {buckets!r}"):
        bucket_loader(detection_set(), 2, buckets=buckets)


def test_ragged_labels_ask_for_pad_and_pad_works():
    loader = bucket_loader(detection_set(), 2, buckets=2, shuffle=False, seed=0)
    with pytest.raises(ValueError, match=r"labels of a batch have different shapes.*batchify.Pad"):
        list(loader)
    loader = bucket_loader(detection_set(), 2, buckets=2, shuffle=False, seed=0,
                           label_fn=Pad(axis=0, pad_val=-1))
    (x0, y0), (x1, y1) = list(loader)
    assert x0.shape == (2, 3, 8, 8) and y0.shape == (2, 3, 5)
    expected = np.full((2, 3, 5), -1, dtype="float32")
    expected[0, :1], expected[1, :3] = 1, 3
    np.testing.assert_array_equal(y0.asnumpy(), expected)
    assert x1.shape == (2, 3, 12, 12) and y1.shape == (2, 2, 5)
