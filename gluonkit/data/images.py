"""Image files decoded one way for training, evaluation and prediction, within limits.

Every image gluonkit reads from a file (an image folder, a RecordIO record, ``gluonkit.predict``)
goes through :func:`decode_image`:

1. the header is read first (no pixels decoded; BMP and TIFF headers by Pillow): a file
   that is empty or not a PNG, JPEG, BMP or TIFF image is refused;
2. images above ``max_pixels`` pixels (default Pillow's own decompression-bomb limit,
   89,478,485) or longer than ``max_aspect`` times their width or height (default 100) are
   refused before a byte of pixels is allocated;
3. a PNG or JPEG whose data ends before the image does (a cut file) is refused (MXNet's
   decoder would return blank pixels for some);
4. OpenCV decodes it at once, in the calling thread (the pixels MXNet's ``imdecode`` gives,
   since that calls OpenCV too, without a round trip through MXNet's asynchronous engine).

Every refusal is an :class:`ImageError` (a ``ValueError``) naming the file. Resizes are checked
before they run (:func:`check_resize`): no image is resized to more than ``max_pixels``.
"""
import io
import os
import struct
import warnings

import cv2
import mxnet as mx
import numpy as np
from gluoncv.data import RecordFileDetection
from mxnet import gluon
from PIL import Image

from ..validate import finite_real, positive_int
from .errors import DataFileError
from .records import detection_objects

__all__ = ["ImageError", "MAX_PIXELS", "MAX_ASPECT", "DECODER_MAX_PIXELS", "SUFFIXES",
           "check_limits", "decode_image", "read_image", "image_size", "check_resize", "ImageFolderDataset",
           "ImageRecordDataset", "DetectionRecordDataset"]

#: Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``): a 1 GB RGBA image.
MAX_PIXELS = 89_478_485
#: The longest side may be at most this many times the shortest.
MAX_ASPECT = 100.0
#: MXNet's decoder (OpenCV) refuses larger images whatever gluonkit allows.
DECODER_MAX_PIXELS = 1 << 30
#: The file name endings of the formats MXNet 1.9.1's decoder reads.
SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
_FORMATS = ("PNG", "JPEG", "BMP", "TIFF")   # Pillow's names for them
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_BYTES_PER_PIXEL = 8                          # 16-bit RGBA, uncompressed: the largest they hold
_METADATA_BYTES = 64 << 20                    # room for profiles, thumbnails and text chunks
_RAISE = "raise the limit (max_pixels=, or --max-image-pixels on the commands) if you trust it"


class ImageError(DataFileError):
    """An image that gluonkit does not decode: empty, not an image, cut short, damaged or
    beyond the limits. The message names the file (a ``DataFileError``, so a ``ValueError``)."""


def check_limits(max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(max_pixels, max_aspect)`` checked: a positive integer up to
    :data:`DECODER_MAX_PIXELS` and a number >= 1."""
    max_pixels = positive_int(max_pixels, "max_pixels")
    if max_pixels > DECODER_MAX_PIXELS:
        raise ValueError(f"max_pixels must be at most {DECODER_MAX_PIXELS:,} (2^30, the most "
                         f"MXNet's decoder reads), got {max_pixels:,}.")
    return max_pixels, finite_real(max_aspect, "max_aspect", minimum=1.0)


def _jpeg_size(f):
    """``(width, height)`` from the frame header of the JPEG file ``f``, or None.

    The marker segments are walked by their lengths up to the first frame header (SOFn);
    Pillow's JPEG plugin parses every segment, which cost more than a small image's decode.
    """
    f.seek(2)
    while True:
        marker = f.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        code = marker[1]
        if code == 0xFF:                       # a fill byte before the marker
            f.seek(-1, 1)
        elif code in (0xD8, 0xD9, 0xDA):       # an image, its end or a scan before any frame
            return None
        elif code != 0x01 and not 0xD0 <= code <= 0xD7:       # those have no length
            length = f.read(2)
            if len(length) < 2 or int.from_bytes(length, "big") < 2:   # a length counts itself
                return None
            if 0xC0 <= code <= 0xCF and code not in (0xC4, 0xC8, 0xCC):
                frame = f.read(5)              # precision, height, width
                return (int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big")) \
                    if len(frame) == 5 else None
            f.seek(int.from_bytes(length, "big") - 2, 1)


def _identify(f, name):
    """``(format, width, height)`` from the header of the open binary file ``f``."""
    prefix = f.read(24)
    if not prefix:
        raise ImageError(f"{name} is empty (0 bytes); remove it or replace it with an image.")
    size = None
    if prefix[:8] == _PNG_SIGNATURE and prefix[12:16] == b"IHDR":  # the first chunk, always
        size, fmt = struct.unpack(">II", prefix[16:24]), "PNG"
    elif prefix[:3] == b"\xff\xd8\xff":
        size, fmt = _jpeg_size(f), "JPEG"
    else:
        Image.init()
        for fmt in _FORMATS[2:]:   # Pillow's plugins read the header only, never the pixels
            factory, accept = Image.OPEN[fmt]
            if accept is not None and accept(prefix[:16]) is not True:
                continue
            f.seek(0)
            try:
                with warnings.catch_warnings():    # such as Pillow's on damaged EXIF data
                    warnings.simplefilter("ignore")
                    size = factory(f, name).size
                break
            except (SyntaxError, ValueError, IndexError, TypeError, OSError, struct.error):
                continue
    if size is None:
        raise ImageError(f"{name} cannot be decoded as an image: it is not a whole PNG, JPEG, "
                         "BMP or TIFF file (the formats MXNet decodes); remove it, or convert "
                         "it to PNG.")
    return fmt, size[0], size[1]


def _header(f, name, max_pixels, max_aspect):
    """The checked ``(format, width, height)`` of the image file open as ``f``."""
    fmt, width, height = _identify(f, name)
    if width < 1 or height < 1:
        raise ImageError(f"{name} has a header of {width}x{height} pixels; the file is damaged.")
    if width * height > max_pixels:
        raise ImageError(f"{name} is {width}x{height} = {width * height:,} pixels, above the "
                         f"limit of {max_pixels:,}; shrink it, or {_RAISE}.")
    if max(width, height) > max_aspect * min(width, height):
        raise ImageError(f"{name} is {width}x{height} pixels, an aspect ratio above the limit "
                         f"of {max_aspect:g}:1; crop it, or raise the limit (max_aspect=, or "
                         "--max-aspect-ratio on the commands).")
    return fmt, width, height


def _png_complete(data):
    """Whether PNG ``data`` holds every chunk up to IEND, the last one."""
    position = 8
    while position + 12 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, position)
        position += 12 + length
        if kind == b"IEND":
            return position <= len(data)
    return False


def _jpeg_complete(data):
    """Whether JPEG ``data`` has its end-of-image marker after the first scan starts.

    The marker segments before the scan are walked by their lengths (a thumbnail inside them
    has markers of its own); inside the scan data 0xFF is always escaped, so the first
    0xFFD9 there ends the image.
    """
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return False
        marker = data[position + 1]
        if marker == 0xFF or marker == 0x01 or 0xD0 <= marker <= 0xD7:   # fill, markers alone
            position += 1 if marker == 0xFF else 2
            continue
        length = int.from_bytes(data[position + 2:position + 4], "big")
        if marker == 0xDA:
            return data.find(b"\xff\xd9", position + 2 + length) >= 0
        position += 2 + length
    return False


_COMPLETE = {"PNG": _png_complete, "JPEG": _jpeg_complete}


def _decode(data, name, header, channels):
    """The image that ``data`` (whose checked ``header`` it is) encodes, as an (H, W,
    ``channels``) uint8 NDArray, RGB: refused unless whole, and of the header's size.

    OpenCV decodes it in this thread, as MXNet's ``imdecode`` would (the same pixels) but
    without a trip through MXNet's engine and a wait for it; the NDArray holds OpenCV's buffer.
    """
    fmt, width, height = header
    if fmt in _COMPLETE and not _COMPLETE[fmt](data):
        raise ImageError(f"{name} is cut short: its {fmt} data ends before the image does; "
                         "copy the file again.")
    flag = cv2.IMREAD_COLOR if channels == 3 else cv2.IMREAD_GRAYSCALE
    pixels = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flag)
    if pixels is None:
        raise ImageError(f"{name} cannot be decoded: its {fmt} data ({width}x{height} pixels) "
                         "is damaged or cut short; copy the file again.")
    if pixels.shape[:2] != (height, width):
        raise ImageError(f"{name} decodes to {pixels.shape[1]}x{pixels.shape[0]} pixels but its "
                         f"header says {width}x{height}; the file is damaged.")
    if channels == 3:
        cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB, dst=pixels)
    # the NDArray takes over OpenCV's buffer (DLPack): no copy of the pixels
    return mx.nd.from_numpy(pixels.reshape(height, width, channels), zero_copy=True)


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
    header = _header(io.BytesIO(data), name, max_pixels, max_aspect)
    return _decode(data, name, header, channels)


def read_image(path, channels=3, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The image file ``path`` as an (H, W, ``channels``) uint8 NDArray, RGB; like
    :func:`decode_image`, and the file is read only once its header passed the checks.

    Example::

        >>> read_image("cat.png").shape
        (480, 640, 3)
    """
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            header = _header(f, path, max_pixels, max_aspect)
            size, limit = os.fstat(f.fileno()).st_size, _BYTES_PER_PIXEL * header[1] * header[2]
            if size > limit + _METADATA_BYTES:
                raise ImageError(f"{path} is {size:,} bytes, more than a {header[1]}x{header[2]} "
                                 "image holds; the file is damaged.")
            f.seek(0)
            data = f.read(size + 1)   # not read(limit): that would allocate the limit each time
    except OSError as err:
        raise ImageError(f"{path} cannot be read ({err.strerror or err}).") from None
    # the bytes checked are the bytes decoded: a file replaced meanwhile is not read again
    return _decode(data, path, header, channels)


def image_size(path, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(width, height)`` of the image file ``path`` from its header alone (no pixels
    decoded), checked as :func:`read_image` checks it: a cheap look at every file of a dataset
    before training reads them."""
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return _header(f, path, max_pixels, max_aspect)[1:]
    except OSError as err:
        raise ImageError(f"{path} cannot be read ({err.strerror or err}).") from None


def check_resize(name, size, new_size, max_pixels=MAX_PIXELS):
    """``ImageError`` if resizing the image ``name`` from ``size`` to ``new_size`` (both
    (width, height)) would make an empty image or more than ``max_pixels`` pixels."""
    (width, height), (new_width, new_height) = size, new_size
    if min(new_width, new_height) < 1 or new_width * new_height > max_pixels:
        raise ImageError(f"{name} ({width}x{height} pixels) would be resized to "
                         f"{new_width}x{new_height}, outside 1 to {max_pixels:,} pixels; crop "
                         f"it to a more usual shape, or {_RAISE}.")


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
    errors naming the file and the record. Samples and labels are GluonCV's: an (objects, 5+)
    array of xmin, ymin, xmax, ymax in pixels, class id, (more); an image without objects,
    stored as a label header alone (which ``RecordFileDetection`` refuses), has none."""

    def __init__(self, filename, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
        ImageRecordDataset.__init__(self, filename, max_pixels=max_pixels, max_aspect=max_aspect)

    def __getitem__(self, idx):
        image, label = super(RecordFileDetection, self).__getitem__(idx)   # decoded as above
        objects = detection_objects(label, f"{self.filename} (record {idx})")
        height, width = image.shape[:2]
        boxes = objects[:, 1:5] * np.array([width, height, width, height], np.float32)
        return image, np.concatenate([boxes, objects[:, :1], objects[:, 5:]], axis=1)
