"""The classification recipe's datasets: loading, stratified splits, and GluonCV-style transforms.

A dataset comes as three splits: ``train`` to fit the weights, ``val`` (validation) to choose
the checkpoint, stop early and schedule, and ``test``, evaluated once on the model that ships.
A split the data does not have is carved from the training data, stratified by class and
seeded, so that the test figure is never one the model was chosen on.

Image folders and RecordIO files get what GluonCV's training scripts give ImageNet: random
resized crops and flips (drawn from NumPy's generator, so that a resume is exact) for training, a resize and center crop for evaluation, and mean/std
normalization. The preprocessing needed at inference is returned alongside, as a dict that the
exported ``model.json`` stores (see :mod:`gluonkit.deploy.export`).
"""
import collections
import contextlib
import io
import logging
import os

import numpy as np
from mxnet import gluon
from mxnet.gluon.data.vision import transforms

from gluonkit.data import DataFileError, class_labels, digits
from gluonkit.data.images import MAX_ASPECT, MAX_PIXELS, SUFFIXES, ImageFolderDataset, ImageRecordDataset
from gluonkit.deploy.inference import preprocess, shrink_to
from gluonkit.deploy.preprocessing import BICUBIC, BILINEAR
from gluonkit.recipes.common import OptionError

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "TEST_FRACTION", "VAL_FRACTION", "CapSize",
           "RandomFlip", "DatasetUnavailable", "Splits", "load_dataset", "dataset_labels",
           "stratified_indices", "stratified_split", "split_off"]

log = logging.getLogger("gluonkit")

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_CIFAR_MEAN, _CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
_CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                  "truck")
_CROP_FRACTION = 0.875      # evaluation: resize the shorter side to size / 0.875, crop the center
#: The share of every class carved from the training data as the test split, when the
#: data has none (no test folder or file).
TEST_FRACTION = 0.1
#: The share of every class carved from the training data as the validation split by
#: default, when the data has none (no val folder).
VAL_FRACTION = 0.1

Splits = collections.namedtuple("Splits", ["train", "val", "test", "classes", "preprocessing"])
Splits.__doc__ = """What :func:`load_dataset` returns: the ``train``, ``val`` (None when there is
no validation split) and ``test`` datasets, the ``classes`` (names, by label) and the
``preprocessing`` an image file needs at inference (``model.json`` stores it)."""


class _Indices(gluon.data.Sampler):
    """The fixed ``indices``, in order (for ``Dataset.sample``)."""

    def __init__(self, indices):
        self._indices = [int(i) for i in indices]

    def __iter__(self):
        return iter(self._indices)

    def __len__(self):
        return len(self._indices)


class CapSize(gluon.Block):
    """Shrink an HWC image so that its longer side is at most ``max_size`` (aspect kept)."""

    def __init__(self, max_size):
        super().__init__()
        self._max_size = max_size

    def forward(self, x):
        return shrink_to(x, self._max_size)


class RandomFlip(gluon.Block):
    """Flip an HWC image left to right with probability 0.5, drawn from NumPy's generator.

    ``transforms.RandomFlipLeftRight`` draws from MXNet's generator, whose state cannot be
    read: a run resumed in mid-epoch flipped other images than the run never stopped.
    ``fit`` saves and restores NumPy's state, so this flip resumes exactly.
    """

    def forward(self, x):
        return x.flip(axis=1) if np.random.random_sample() < 0.5 else x


class _Preprocess(gluon.Block):
    """An image as the exported model's ``preprocessing`` says: evaluation and
    ``gluonkit.predict`` run the same code (no resize beyond ``max_pixels``)."""

    def __init__(self, preprocessing, max_pixels=MAX_PIXELS):
        super().__init__()
        self._preprocessing, self._max_pixels = preprocessing, max_pixels

    def forward(self, x):
        return preprocess(x, self._preprocessing, name="an image of the test set",
                          max_pixels=self._max_pixels)


def dataset_labels(dataset):
    """The class label of every sample of ``dataset``, as a NumPy int array; image folders and
    RecordIO files are read without decoding their images."""
    if isinstance(dataset, gluon.data.vision.ImageFolderDataset):
        return np.array([label for _, label in dataset.items], dtype=np.int64)
    if isinstance(dataset, gluon.data.vision.ImageRecordDataset):
        return class_labels(dataset.filename)
    return np.array([int(np.ravel(dataset[i][1])[0]) for i in range(len(dataset))], dtype=np.int64)


def _stratified_order(labels, seed):
    """A seeded random order of the samples: one of each class first, then the classes
    interleaved evenly, so that any first n hold every class in proportion to its size."""
    rng = np.random.RandomState(seed)
    keys = np.empty(len(labels))
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        keys[members] = (np.arange(len(members)) + rng.uniform(0.25, 0.75)) / len(members)
        keys[members[0]] = -1.0
    return np.lexsort((rng.uniform(size=len(labels)), keys))


def stratified_indices(labels, count, seed=0):
    """``count`` sample indices (sorted), chosen with ``seed``: one of every class first (when
    ``count`` allows), then every class in proportion to its size."""
    labels = np.asarray(labels)
    return np.sort(_stratified_order(labels, seed)[:min(count, len(labels))])


def stratified_split(labels, fraction=0.1, seed=0):
    """``(train, held)`` sorted index arrays: ``fraction`` of every class held out (at least one
    sample of each class that has two or more, never all of them), seeded; ``fraction`` is in
    [0, 1)."""
    if not 0 <= fraction < 1:
        raise ValueError(f"fraction must be in [0, 1), got {fraction!r}: the share of every class "
                         "held out.")
    if fraction == 0:
        return np.arange(len(labels)), np.zeros(0, dtype=np.int64)
    labels = np.asarray(labels)
    held = []
    rng = np.random.RandomState(seed)
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        if len(members) > 1:
            count = max(1, int(round(len(members) * fraction)))
            held.extend(members[:min(count, len(members) - 1)])
    held = np.sort(np.array(held, dtype=np.int64))
    return np.setdiff1d(np.arange(len(labels)), held), held


def _subset(dataset, labels, indices):
    """``(samples, labels)`` of ``dataset`` at ``indices``."""
    return dataset.sample(_Indices(indices)), labels[indices]


def split_off(dataset, fraction, seed=0, labels=None):
    """``(rest, held)``: ``dataset`` less a held-out ``fraction`` of every class, and that part
    (None for ``fraction`` 0), chosen with ``seed`` as :func:`stratified_split` chooses.

    ``labels`` are the samples' classes (default: :func:`dataset_labels`).

    Example::

        train, val = split_off(gluonkit.data.digits(), 0.1)     # 1,294 and 144 images
    """
    labels = dataset_labels(dataset) if labels is None else np.asarray(labels)
    (rest, _), (held, held_labels) = _split(dataset, labels, fraction, seed)
    return (rest, held) if len(held_labels) else (dataset, None)


def _train_transform(image_size, max_size, mean, std):
    """GluonCV's ImageNet-style training pipeline: random resized crops of ``image_size`` and
    flips; with ``image_size`` 0 images keep their own sizes, shrunk to ``max_size``."""
    if image_size == 0:
        steps = [CapSize(max_size), RandomFlip()]
    else:
        steps = [transforms.RandomResizedCrop(image_size), RandomFlip()]
    return transforms.Compose(steps + [transforms.ToTensor(), transforms.Normalize(mean, std)])


def _preprocessing(channels, mean, std, resize=None, resize_short=None, crop=None, max_size=None):
    """What an image file needs before the exported network sees it (stored in model.json):
    read with ``channels``, resized to ``resize`` (height, width) or its shorter side to
    ``resize_short`` then center-cropped to ``crop`` (bicubic, as ``mx.image.resize_short``
    and ``center_crop``), or shrunk to ``max_size`` on its longer side (bilinear, as training's
    :class:`CapSize`); scaled to [0, 1], normalized by ``mean`` and ``std``, laid out as NCHW."""
    pair = (lambda n: [n, n] if n else None)
    return {"channels": channels, "resize": pair(resize), "resize_short": resize_short,
            "crop": pair(crop), "max_size": max_size,
            "interp": BICUBIC if resize_short else BILINEAR,
            "scale": 1 / 255, "mean": list(mean), "std": list(std), "layout": "NCHW"}


class DatasetUnavailable(FileNotFoundError, RuntimeError):
    """A dataset that is not on disk and could not be downloaded.

    A ``FileNotFoundError``, which the commands print as one line, and a ``RuntimeError``,
    as this error was before it had its own type.
    """


def _cifar10(data_dir):
    root = os.path.expanduser(data_dir)
    log.info("CIFAR-10 from %s (downloaded there first if missing, 170 MB).", root)
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # gluon prints every retry
            return (gluon.data.vision.CIFAR10(root=root, train=True),
                    gluon.data.vision.CIFAR10(root=root, train=False))
    except (OSError, RuntimeError) as err:   # requests' ConnectionError is an OSError
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        if len(reason) > 160:
            reason = reason[:160] + "..."
        raise DatasetUnavailable(
            f"CIFAR-10 is not in {root} and downloading it failed ({reason}). Connect to the "
            "internet, or copy cifar-10-binary.tar.gz there, or use --dataset digits "
            "(embedded, no download).") from None


def _image_folders(dataset, where, limits):
    """``(train, val, test, class names)`` of DIR/train and, where they exist, DIR/val and
    DIR/test (None for a folder that is not there)."""
    if not os.path.isdir(os.path.join(where, "train")):
        raise FileNotFoundError(f"--dataset {dataset}: expected class folders in "
                                f"{os.path.join(where, 'train')}.")
    train = ImageFolderDataset(os.path.join(where, "train"), **limits)
    _check_classes_hold_images(train, os.path.join(where, "train"))
    held = {}
    for split in ("val", "test"):
        path = os.path.join(where, split)
        if os.path.isdir(path):
            held[split] = ImageFolderDataset(path, **limits)
            _check_classes_hold_images(held[split], path)
            if held[split].synsets != train.synsets:
                raise DataFileError(f"--dataset {dataset}: {path} has classes "
                                    f"{held[split].synsets} but train has {train.synsets}.")
    return train, held.get("val"), held.get("test"), list(train.synsets)


def _check_classes_hold_images(folder, root):
    """The ``ImageFolderDataset`` ``folder`` of ``root`` must have class folders, each holding an
    image it reads; DataFileError naming the first empty one."""
    if not folder.synsets:
        raise DataFileError(f"{root}: no class folders; put each class's images in a folder "
                            "named after the class.")
    found = {label for _, label in folder.items}
    empty = [name for label, name in enumerate(folder.synsets) if label not in found]
    if empty:
        more = f" (nor in {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise DataFileError(f"{os.path.join(root, empty[0])}: no {', '.join(SUFFIXES)} image in "
                            f"this class folder{more}; "
                            "add images of the class or remove the folder (a class without images "
                            "cannot be learned, yet would be exported as one).")


def _record_files(dataset, where, limits):
    files = where.split(",")
    for path in files:
        if not (os.path.isfile(path) and os.path.isfile(os.path.splitext(path)[0] + ".idx")):
            raise FileNotFoundError(f"--dataset {dataset}: need {path} and its .idx index "
                                    "(made by im2rec.py).")
    classes = int(class_labels(files[0]).max()) + 1   # one more than the largest label
    if len(files) > 1:
        class_labels(files[1], classes, f"{files[0]} holds no other: relabel it, or add training "
                                        "samples of that class")
    train = ImageRecordDataset(files[0], **limits)
    test = ImageRecordDataset(files[1], **limits) if len(files) > 1 else None
    return train, None, test, [str(c) for c in range(classes)]


def load_dataset(dataset, data_dir="", image_size=32, limit=None, max_size=512, seed=0, *,
                 val_fraction=VAL_FRACTION, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The three splits and what inference needs, for a ``--dataset`` value.

    Image files (folders, RecordIO) are decoded by :mod:`gluonkit.data.images`, within
    ``max_pixels`` and ``max_aspect``.

    The test split is the data's own (the digits' and CIFAR-10's test sets, DIR/test, the
    second .rec file), else a stratified :data:`TEST_FRACTION` of the training data. The
    validation split is DIR/val where there is one, else a stratified ``val_fraction`` of
    what training data is left (none for 0); both carves are seeded with ``seed``.
    ``limit`` then keeps ``limit`` samples of each split, every class in proportion.

    Returns
    -------
    Splits
        ``(train, val, test, classes, preprocessing)``; ``val`` is None without a
        validation split.
    """
    kind, _, where = dataset.partition(":")
    train_fn = test_fn = val = None
    if kind == "digits" and not where:
        train, test, names = digits(train=True), digits(train=False), [str(d) for d in range(10)]
        preprocessing = _preprocessing(1, (0.0,), (1.0,), resize=8)
    elif kind == "cifar10" and not where:
        train, test = _cifar10(data_dir)
        names = list(_CIFAR_CLASSES)
        normalize = transforms.Normalize(_CIFAR_MEAN, _CIFAR_STD)
        train_fn = transforms.Compose([RandomFlip(), transforms.ToTensor(), normalize])
        test_fn = transforms.Compose([transforms.ToTensor(), normalize])
        preprocessing = _preprocessing(3, _CIFAR_MEAN, _CIFAR_STD, resize=32)
    elif kind in ("imagefolder", "rec") and where:
        read = _image_folders if kind == "imagefolder" else _record_files
        train, val, test, names = read(dataset, where, {"max_pixels": max_pixels,
                                                        "max_aspect": max_aspect})
        if image_size:
            preprocessing = _preprocessing(3, IMAGENET_MEAN, IMAGENET_STD, crop=image_size,
                                           resize_short=int(round(image_size / _CROP_FRACTION)))
        else:
            preprocessing = _preprocessing(3, IMAGENET_MEAN, IMAGENET_STD, max_size=max_size)
        train_fn = _train_transform(image_size, max_size, IMAGENET_MEAN, IMAGENET_STD)
        test_fn = _Preprocess(preprocessing, max_pixels)
    else:
        raise OptionError(f"--dataset {dataset!r} is not one of digits, cifar10, imagefolder:DIR, "
                         "rec:FILE.rec.")
    carve = test is None or (val is None and val_fraction)
    labels = dataset_labels(train) if carve or limit else None
    if test is None:
        (train, labels), test = _split(train, labels, TEST_FRACTION, seed)
    else:
        test = (test, None)
    if val is None and val_fraction:
        (train, labels), val = _split(train, labels, val_fraction, seed)
        val = val if len(val[1]) else None      # every class has a single sample
    elif val is not None:
        val = (val, None)
    splits = [(train, labels), val, test]
    if limit:
        splits = [_limited(*split, limit, seed) if split else None for split in splits]
    train, val, test = (split[0] if split else None for split in splits)
    if train_fn is not None:
        train, test = train.transform_first(train_fn), test.transform_first(test_fn)
        val = val.transform_first(test_fn) if val is not None else None
    return Splits(train, val, test, names, preprocessing)


def _split(dataset, labels, fraction, seed):
    """``((rest, its labels), (held, its labels))``: a stratified ``fraction`` of every class
    of ``dataset`` held out, as :func:`stratified_split` chooses it."""
    kept, held = stratified_split(labels, fraction, seed)
    return _subset(dataset, labels, kept), _subset(dataset, labels, held)


def _limited(dataset, labels, limit, seed):
    """``(samples, labels)``: ``limit`` samples of ``dataset``, every class in proportion."""
    labels = dataset_labels(dataset) if labels is None else labels
    return _subset(dataset, labels, stratified_indices(labels, limit, seed))
