"""The UCI handwritten digits, embedded: a real dataset that needs no download."""
import gzip
import os
from functools import lru_cache

import numpy as np
from mxnet import gluon

__all__ = ["digits"]

_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.csv.gz")
_TEST_FRACTION = 0.2
_SPLIT_SEED = 0


@lru_cache(maxsize=None)
def _load():
    """Images (n, 1, 8, 8) float32 in [0, 1], labels (n,) int32, and the test mask."""
    with gzip.open(_FILE, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    images = (table[:, :-1] / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = table[:, -1].astype(np.int32)
    # Stratified split: the same fraction of every class goes to the test set.
    rng = np.random.RandomState(_SPLIT_SEED)
    test = np.zeros(len(labels), dtype=bool)
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        test[members[:int(round(len(members) * _TEST_FRACTION))]] = True
    for array in (images, labels, test):
        array.setflags(write=False)
    return images, labels, test


def digits(train=True):
    """The UCI handwritten digits bundled with gluonkit (1,797 images, 10 classes).

    This is the copy that scikit-learn ships (``load_digits``): 8x8 images of digits written
    by 43 people, each pixel the count of set pixels in a 4x4 block of a 32x32 bitmap (0..16).
    A fixed, stratified split puts 20% of every class in the test set (1,438 training and
    359 test images); the split never changes between calls, runs or machines.

    Parameters
    ----------
    train : bool, default True
        The training split if True, else the test split.

    Returns
    -------
    mxnet.gluon.data.ArrayDataset
        Samples ``(image, label)``: ``image`` a float32 numpy array of shape (1, 8, 8) scaled
        to [0, 1], ``label`` an int32 in 0..9. It batches with ``gluon.data.DataLoader``.

    Example::

        >>> train = gluonkit.data.digits()
        >>> image, label = train[0]
        >>> len(train), image.shape, image.dtype, len(gluonkit.data.digits(train=False))
        (1438, (1, 8, 8), dtype('float32'), 359)
        >>> loader = gluon.data.DataLoader(train, batch_size=64, shuffle=True)
    """
    if not isinstance(train, bool):
        raise TypeError(f"train must be True (training split) or False (test split), got {train!r}.")
    images, labels, test = _load()
    keep = ~test if train else test
    return gluon.data.ArrayDataset(images[keep], labels[keep])
