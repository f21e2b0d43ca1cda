"""Image files decoded by MXNet one way for training, evaluation and prediction, within limits.

Every image gluonkit reads from a file (an image folder, a RecordIO record, ``gluonkit.predict``)
goes through :func:`decode_image` or :func:`read_image`: the checks of
:mod:`gluonkit.imagefiles` first (header, limits, a whole file), then MXNet decodes it, and
the decode is waited for inside the error handling, since MXNet decodes asynchronously and
would otherwise fail later, elsewhere. Every refusal is an :class:`ImageError` naming the file.
"""
import io
import os

import mxnet as mx
from gluoncv.data import RecordFileDetection
from mxnet import gluon

from ..imagefiles import (DECODER_MAX_PIXELS, MAX_ASPECT, MAX_PIXELS, SUFFIXES, ImageError,
                          check_decoded, check_header, check_limits, check_resize, check_whole,
                          read_checked)

__all__ = ["ImageError", "MAX_PIXELS", "MAX_ASPECT", "DECODER_MAX_PIXELS", "SUFFIXES",
           "check_limits", "decode_image", "read_image", "check_resize", "ImageFolderDataset",
           "ImageRecordDataset", "DetectionRecordDataset"]


def _decode(decode, data, name, header):
    """The image that ``decode()`` has MXNet decode from ``data`` (whose checked ``header``
    it is), refused unless whole, waited for, and of the header's size."""
    fmt, width, height = header
    check_whole(data, name, header)
    try:
        image = decode()
        image.wait_to_read()            # MXNet decodes asynchronously: its errors surface here
    except mx.base.MXNetError:
        raise ImageError(f"{name} cannot be decoded: its {fmt} data ({width}x{height} pixels) "
                         "is damaged or cut short; copy the file again.") from None
    check_decoded(image.shape, name, header)
    return image


def decode_image(data, name, channels=3, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The image encoded in ``data`` (bytes) as an (H, W, ``channels``) uint8 NDArray, RGB.

    Parameters
    ----------
    data : bytes
        A PNG, JPEG, BMP or TIFF file's contents.
    name : str
        What the errors call it: the file, or a record of a file.
    channels : {3, 1}
        RGB, or grayscale.
    max_pixels, max_aspect
        The limits (see the module's description).

    Raises
    ------
    ImageError
        For anything but an image within the limits, naming ``name``.
    """
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    header = check_header(io.BytesIO(data), name, max_pixels, max_aspect)
    return _decode(lambda: mx.image.imdecode(data, flag=1 if channels == 3 else 0), data, name,
                   header)


def read_image(path, channels=3, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The image file ``path`` as an (H, W, ``channels``) uint8 NDArray, RGB; like
    :func:`decode_image`, and the file is read only once its header passed the checks.

    Example::

        >>> read_image("cat.png").shape
        (480, 640, 3)
    """
    data, header = read_checked(path, max_pixels, max_aspect)
    # the bytes checked are the bytes decoded: a file replaced meanwhile is not read again
    return _decode(lambda: mx.image.imdecode(data, flag=1 if channels == 3 else 0), data,
                   os.fspath(path), header)


class ImageFolderDataset(gluon.data.vision.ImageFolderDataset):
    """Gluon's ``ImageFolderDataset`` (one folder per class) whose images are read by
    :func:`read_image`: within ``max_pixels`` and ``max_aspect``, errors naming the file."""

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
    and the record."""

    def __init__(self, filename, flag=1, transform=None, *, max_pixels=MAX_PIXELS,
                 max_aspect=MAX_ASPECT):
        super().__init__(filename, flag, transform)
        self._limits = dict(zip(("max_pixels", "max_aspect"), check_limits(max_pixels, max_aspect)))

    def __getitem__(self, idx):
        record = super(gluon.data.vision.ImageRecordDataset, self).__getitem__(idx)   # raw bytes
        header, data = mx.recordio.unpack(record)
        image = decode_image(data, f"{self.filename} (record {idx})", 3 if self._flag else 1,
                             **self._limits)
        if self._transform is not None:
            return self._transform(image, header.label)
        return image, header.label


class DetectionRecordDataset(RecordFileDetection, ImageRecordDataset):
    """GluonCV's ``RecordFileDetection`` (a detection RecordIO file) whose images are decoded
    by :func:`decode_image`, as :class:`ImageRecordDataset` decodes them: within the limits,
    errors naming the file and the record. Samples and labels are GluonCV's."""
