"""Image files decoded one way for training, evaluation and prediction, within limits.

Every image gluonkit reads from a file (an image folder, a RecordIO record, ``gluonkit.predict``)
goes through :func:`decode_image` or :func:`read_image`: the checks of
:mod:`gluonkit.deploy.imagefiles` first (header, limits, a whole file), then OpenCV decodes it at once,
in the calling thread (the pixels MXNet's ``imdecode`` gives, since that calls OpenCV too,
without a round trip through MXNet's asynchronous engine), turned upright by the image's EXIF
orientation unless ``upright=False`` (MXNet's decoder does not turn them). The detection
datasets read them upright too, as labelling tools show them, unless their data was labelled
on the stored pixels (``upright=False``, recorded in the exported model's preprocessing as
``exif_orientation: 'ignore'``): one frame in training, evaluation and prediction
(:func:`image_frame`). Every refusal is an :class:`ImageError` naming the file.
"""
import io
import os
import warnings

import cv2
import mxnet as mx
import numpy as np
from gluoncv.data import RecordFileDetection
from mxnet import gluon

from ..deploy.imagefiles import (DECODER_MAX_PIXELS, MAX_ASPECT, MAX_PIXELS, SUFFIXES, ImageError,
                          check_decoded, check_header, check_limits, check_resize, check_whole,
                          image_header, image_size, read_checked)
from .records import detection_objects

__all__ = ["ImageError", "MAX_PIXELS", "MAX_ASPECT", "DECODER_MAX_PIXELS", "SUFFIXES",
           "check_limits", "decode_image", "read_image", "image_size", "image_frame",
           "frame_mismatch", "check_resize",
           "ImageFolderDataset", "ImageRecordDataset", "DetectionRecordDataset"]


def _decode(data, name, header, channels, upright):
    """The image that ``data`` (whose checked ``header`` it is, and found whole) encodes, as
    an (H, W, ``channels``) uint8 NDArray, RGB, turned by its EXIF orientation if ``upright``,
    refused unless of the header's size (turned).

    OpenCV decodes it in this thread, as MXNet's ``imdecode`` would (the same pixels) but
    without a trip through MXNet's engine and a wait for it; the NDArray holds OpenCV's buffer.
    """
    fmt, width, height = header
    flag = cv2.IMREAD_COLOR if channels == 3 else cv2.IMREAD_GRAYSCALE
    if not upright:
        flag |= cv2.IMREAD_IGNORE_ORIENTATION
    pixels = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flag)
    if pixels is None:
        raise ImageError(f"{name} cannot be decoded: its {fmt} data ({width}x{height} pixels) "
                         "is damaged or cut short; copy the file again.")
    check_decoded(pixels.shape, name, header, upright)
    if channels == 3:
        cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB, dst=pixels)
    # the NDArray takes over OpenCV's buffer (DLPack): no copy of the pixels
    return mx.nd.from_numpy(pixels.reshape(pixels.shape[:2] + (channels,)), zero_copy=True)


def decode_image(data, name, channels=3, *, upright=True, max_pixels=MAX_PIXELS,
                 max_aspect=MAX_ASPECT):
    """The image encoded in ``data`` (bytes) as an (H, W, ``channels``) uint8 NDArray, RGB.

    Parameters
    ----------
    data : bytes
        A PNG, JPEG, BMP or TIFF file's contents.
    name : str
        What the errors call it: the file, or a record of a file.
    channels : {3, 1}
        RGB, or grayscale.
    upright : bool, default True
        Turn the image by its EXIF orientation (a phone photo stored sideways comes out as
        it is shown). False: the pixels as stored, the frame of boxes annotated on them (the
        detection datasets read images so; MXNet's own ``imdecode`` does too).
    max_pixels, max_aspect
        The limits (see the module's description).

    Raises
    ------
    ImageError
        For anything but an image within the limits, naming ``name``.
    """
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    header = check_header(io.BytesIO(data), name, max_pixels, max_aspect)
    check_whole(data, name, header)
    return _decode(data, name, header, channels, upright)


def read_image(path, channels=3, *, upright=True, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The image file ``path`` as an (H, W, ``channels``) uint8 NDArray, RGB; like
    :func:`decode_image`, and the file is read only once its header passed the checks.

    Example::

        >>> read_image("cat.png").shape
        (480, 640, 3)
    """
    data, header = read_checked(path, max_pixels, max_aspect)
    # the bytes checked are the bytes decoded: a file replaced meanwhile is not read again
    return _decode(data, os.fspath(path), header, channels, upright)


def image_frame(path, upright=True, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(width, height, orientation)`` of the image file ``path`` from its header alone: its
    size as :func:`read_image` gives it (``upright``: turned by its EXIF orientation, which for
    5 to 8 swaps width and height; else as stored) and the orientation tag (1 to 8)."""
    header = image_header(path, max_pixels=max_pixels, max_aspect=max_aspect)
    _, width, height = header
    if upright and header.orientation >= 5:
        width, height = height, width
    return width, height, header.orientation


def frame_mismatch(image, said, frame, upright):
    """Why the annotated size ``said`` (width, height) does not fit the image file ``image``
    whose :func:`image_frame` is ``frame``, and the fix: a phrase to follow "the annotation
    says WxH but". Names the EXIF orientation tag where it turns the image."""
    width, height, orientation = frame
    if orientation < 5:
        return (f"{image} is {width}x{height} pixels, so its boxes cannot be placed on it; fix "
                "the size and the boxes (or the image)")
    stored, shown = ((height, width), (width, height)) if upright else \
        ((width, height), (height, width))
    sizes = (f"{image} is stored as {stored[0]}x{stored[1]} pixels with the EXIF tag "
             f"Orientation = {orientation} (0x0112), which turns it to {shown[0]}x{shown[1]} as "
             "viewers and labelling tools show it")
    if tuple(said) == stored:
        return (f"{sizes}, the frame images are read in: if the boxes were drawn on the image "
                f"as shown (Label Studio and CVAT show it so), give it that size, {shown[0]}x"
                f"{shown[1]}; if on the stored pixels, pass --exif-orientation ignore "
                "(exif_orientation='ignore')")
    if tuple(said) == shown:
        return (f"{sizes}, the size annotated, but the images are read as stored "
                "(--exif-orientation ignore): leave that option out")
    return f"{sizes}; fix the size (or the image)"


class ImageFolderDataset(gluon.data.vision.ImageFolderDataset):
    """Gluon's ``ImageFolderDataset`` (one folder per class) whose images are read by
    :func:`read_image`: within ``max_pixels`` and ``max_aspect``, errors naming the file.

    Every format :func:`read_image` decodes is listed (:data:`SUFFIXES`, BMP and TIFF too,
    where Gluon takes only JPEG and PNG); hidden entries (``.ipynb_checkpoints``,
    ``.DS_Store``) are neither classes nor images; other files are left out with one
    warning per folder.
    """

    def _list_images(self, root):
        self.synsets, self.items = [], []
        for folder in sorted(os.listdir(root)):
            path = os.path.join(root, folder)
            if folder.startswith(".") or not os.path.isdir(path):
                continue
            label = len(self.synsets)
            self.synsets.append(folder)
            others = []
            for name in sorted(os.listdir(path)):
                if name.startswith("."):
                    continue
                if name.lower().endswith(SUFFIXES):
                    self.items.append((os.path.join(path, name), label))
                else:
                    others.append(name)
            if others:
                warnings.warn(f"{path}: left out {len(others)} file(s) that are not images "
                              f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
                              f"images are {', '.join(SUFFIXES)} files.", stacklevel=4)

    def __init__(self, root, flag=1, transform=None, *, max_pixels=MAX_PIXELS,
                 max_aspect=MAX_ASPECT):
        super().__init__(root, flag, transform)
        self._limits = dict(zip(("max_pixels", "max_aspect"), check_limits(max_pixels, max_aspect)))

    def __getitem__(self, idx):
        path, label = self.items[idx]
        image = read_image(path, 3 if self._flag else 1, **self._limits)
        if self._transform is not None:
            return self._transform(image, label)
        return image, label


class ImageRecordDataset(gluon.data.vision.ImageRecordDataset):
    """Gluon's ``ImageRecordDataset`` (a RecordIO file of images) whose images are decoded by
    :func:`decode_image`: within ``max_pixels`` and ``max_aspect``, errors naming the file
    and the record; turned upright by their EXIF orientation."""

    _upright = True

    def __init__(self, filename, flag=1, transform=None, *, max_pixels=MAX_PIXELS,
                 max_aspect=MAX_ASPECT):
        super().__init__(filename, flag, transform)
        self._limits = dict(zip(("max_pixels", "max_aspect"), check_limits(max_pixels, max_aspect)))

    def __getitem__(self, idx):
        record = super(gluon.data.vision.ImageRecordDataset, self).__getitem__(idx)   # raw bytes
        header, data = mx.recordio.unpack(record)
        image = decode_image(data, f"{self.filename} (record {idx})", 3 if self._flag else 1,
                             upright=self._upright, **self._limits)
        if self._transform is not None:
            return self._transform(image, header.label)
        return image, header.label


class DetectionRecordDataset(RecordFileDetection, ImageRecordDataset):
    """GluonCV's ``RecordFileDetection`` (a detection RecordIO file) whose images are decoded
    by :func:`decode_image`, as :class:`ImageRecordDataset` decodes them: within the limits,
    errors naming the file and the record. Samples and labels are GluonCV's: an (objects, 5+)
    array of xmin, ymin, xmax, ymax in pixels, class id, (more); an image without objects,
    stored as a label header alone (which ``RecordFileDetection`` refuses), has none. The
    pixels are turned by their EXIF orientation unless ``upright`` is False (boxes placed on
    the stored pixels)."""

    def __init__(self, filename, *, upright=True, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
        ImageRecordDataset.__init__(self, filename, max_pixels=max_pixels, max_aspect=max_aspect)
        self._upright = bool(upright)

    def __getitem__(self, idx):
        image, label = super(RecordFileDetection, self).__getitem__(idx)   # decoded as above
        objects = detection_objects(label, f"{self.filename} (record {idx})")
        height, width = image.shape[:2]
        boxes = objects[:, 1:5] * np.array([width, height, width, height], np.float32)
        return image, np.concatenate([boxes, objects[:, :1], objects[:, 5:]], axis=1)
