"""Image files checked before a pixel is decoded, by any decoder: headers, limits, whole files.

Every image gluonkit reads from a file, with MXNet (:mod:`gluonkit.data.images`) or with
Pillow (:mod:`gluonkit.serve`), passes these checks:

1. the header is read first (no pixels decoded; BMP and TIFF headers by Pillow): a file
   that is empty or not a PNG, JPEG, BMP or TIFF image is refused;
2. images above ``max_pixels`` pixels (default Pillow's own decompression-bomb limit,
   89,478,485) or longer than ``max_aspect`` times their width or height (default 100) are
   refused before a byte of pixels is allocated;
3. a PNG or JPEG whose data ends before the image does (a cut file) is refused (MXNet's
   decoder would return blank pixels for some);
4. the decoded image must have the header's size, or, where the decoder turned it upright
   (OpenCV does, for JPEG and PNG), the size its EXIF orientation gives: orientations
   5 to 8 swap width and height (:func:`check_decoded`). The orientation is read from the
   header too (a JPEG's APP1 segment, a PNG's eXIf chunk), within bounded reads; malformed
   EXIF data counts as no orientation. A TIFF is always turned: Pillow's header size and
   OpenCV's decode (with or without ``IMREAD_IGNORE_ORIENTATION``) both apply its orientation.

Every refusal is an :class:`ImageError` (a ``ValueError``) naming the file. Resizes are checked
before they run (:func:`check_resize`): no image is resized to more than ``max_pixels``.
This module imports neither mxnet nor numpy.
"""
import argparse
import collections
import os
import struct
import warnings

from PIL import Image

from ..errors import DataFileError
from ..validate import finite_real, positive_int

__all__ = ["ImageError", "ImageHeader", "MAX_PIXELS", "MAX_ASPECT", "DECODER_MAX_PIXELS", "SUFFIXES",
           "check_limits", "check_header", "image_header", "image_size", "read_checked", "check_whole",
           "check_decoded", "check_resize", "add_limit_options"]

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
_ORIENTATION_TAG = 0x0112
_EXIF_BYTES = 1 << 16                         # a JPEG segment's most; a PNG eXIf chunk beyond is skipped
_RAISE = "raise the limit (max_pixels=, or --max-image-pixels on the commands) if you trust it"


class ImageError(DataFileError):
    """An image that gluonkit does not decode: empty, not an image, cut short, damaged or
    beyond the limits. The message names the file (a ``DataFileError``, so a ``ValueError``)."""


class ImageHeader(collections.namedtuple("ImageHeader", "format width height")):
    """What an image file's header says: ``(format, width, height)``, and ``orientation``,
    its EXIF orientation (1 to 8; 1, upright, without EXIF data or a valid tag)."""

    def __new__(cls, fmt, width, height, orientation=1):
        header = super().__new__(cls, fmt, width, height)
        header.orientation = orientation if orientation in range(1, 9) else 1
        return header


def _exif_orientation(tiff):
    """The orientation tag of ``tiff`` (bytes of an EXIF block: a TIFF header and IFD0), or 1
    where the block is malformed or has none. Reads only inside ``tiff``."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return 1
    offset = struct.unpack_from(order + "I", tiff, 4)[0]
    if offset + 2 > len(tiff):
        return 1
    count = struct.unpack_from(order + "H", tiff, offset)[0]
    for entry in range(offset + 2, min(offset + 2 + 12 * count, len(tiff) - 11), 12):
        tag, kind = struct.unpack_from(order + "HH", tiff, entry)
        if tag == _ORIENTATION_TAG and kind == 3:          # a SHORT, stored in the entry
            return struct.unpack_from(order + "H", tiff, entry + 8)[0]
    return 1


def _png_orientation(f):
    """The EXIF orientation of the PNG file ``f`` (from its eXIf chunk, before the pixels)."""
    f.seek(8)
    while True:
        head = f.read(8)
        if len(head) < 8:
            return 1
        length, kind = struct.unpack(">I4s", head)
        if kind in (b"IDAT", b"IEND"):
            return 1
        if kind == b"eXIf" and length <= _EXIF_BYTES:
            return _exif_orientation(f.read(length))
        f.seek(length + 4, 1)                              # the data and its CRC


def check_limits(max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(max_pixels, max_aspect)`` checked: a positive integer up to
    :data:`DECODER_MAX_PIXELS` and a number >= 1."""
    max_pixels = positive_int(max_pixels, "max_pixels")
    if max_pixels > DECODER_MAX_PIXELS:
        raise ValueError(f"max_pixels must be at most {DECODER_MAX_PIXELS:,} (2^30, the most "
                         f"MXNet's decoder reads), got {max_pixels:,}.")
    return max_pixels, finite_real(max_aspect, "max_aspect", minimum=1.0)


def _jpeg_size(f):
    """``(width, height, orientation)`` from the frame header of the JPEG file ``f`` and its
    EXIF segment (APP1) before it, or None.

    The marker segments are walked by their lengths up to the first frame header (SOFn);
    Pillow's JPEG plugin parses every segment, which cost more than a small image's decode.
    """
    f.seek(2)
    orientation = 1
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
                return (int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big"),
                        orientation) if len(frame) == 5 else None
            segment = int.from_bytes(length, "big") - 2        # at most 65533 bytes
            if code == 0xE1 and orientation == 1:
                data = f.read(segment)
                if data[:6] == b"Exif\0\0":
                    orientation = _exif_orientation(data[6:])
            else:
                f.seek(segment, 1)


def _identify(f, name):
    """The :class:`ImageHeader` of the open binary file ``f``."""
    prefix = f.read(24)
    if not prefix:
        raise ImageError(f"{name} is empty (0 bytes); remove it or replace it with an image.")
    size = None
    if prefix[:8] == _PNG_SIGNATURE and prefix[12:16] == b"IHDR":  # the first chunk, always
        size, fmt = struct.unpack(">II", prefix[16:24]) + (_png_orientation(f),), "PNG"
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
                    size = factory(f, name).size  # a TIFF's turned already, as OpenCV's decode
                break
            except (SyntaxError, ValueError, IndexError, TypeError, OSError, struct.error):
                continue
    if size is None:
        raise ImageError(f"{name} cannot be decoded as an image: it is not a whole PNG, JPEG, "
                         "BMP or TIFF file (the formats MXNet decodes); remove it, or convert "
                         "it to PNG.")
    return ImageHeader(fmt, *size)


def check_header(f, name, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The :class:`ImageHeader` ``(format, width, height)`` (and ``orientation``) of the image
    file open as ``f`` (a binary file), read from its header alone; ``ImageError`` for a file
    that is not an image within the limits."""
    header = _identify(f, name)
    fmt, width, height = header
    if width < 1 or height < 1:
        raise ImageError(f"{name} has a header of {width}x{height} pixels; the file is damaged.")
    if width * height > max_pixels:
        raise ImageError(f"{name} is {width}x{height} = {width * height:,} pixels, above the "
                         f"limit of {max_pixels:,}; shrink it, or {_RAISE}.")
    if max(width, height) > max_aspect * min(width, height):
        raise ImageError(f"{name} is {width}x{height} pixels, an aspect ratio above the limit "
                         f"of {max_aspect:g}:1; crop it, or raise the limit (max_aspect=, or "
                         "--max-aspect-ratio on the commands).")
    return header


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


def read_checked(path, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(data, header)``: the bytes of the image file ``path``, read only once its header
    (``(format, width, height)``) passed the checks, and not cut short."""
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            header = check_header(f, path, max_pixels, max_aspect)
            size, limit = os.fstat(f.fileno()).st_size, _BYTES_PER_PIXEL * header[1] * header[2]
            if size > limit + _METADATA_BYTES:
                raise ImageError(f"{path} is {size:,} bytes, more than a {header[1]}x{header[2]} "
                                 "image holds; the file is damaged.")
            f.seek(0)
            data = f.read(size + 1)   # not read(limit): that would allocate the limit each time
    except OSError as err:
        raise ImageError(f"{path} cannot be read ({err.strerror or err}).") from None
    check_whole(data, path, header)
    return data, header


def image_header(path, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """The :class:`ImageHeader` of the image file ``path`` (its size as stored and its EXIF
    orientation), from its header alone (no pixels decoded), checked as :func:`read_checked`
    checks it: a cheap look at every file of a dataset before training reads them."""
    max_pixels, max_aspect = check_limits(max_pixels, max_aspect)
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return check_header(f, path, max_pixels, max_aspect)
    except OSError as err:
        raise ImageError(f"{path} cannot be read ({err.strerror or err}).") from None


def image_size(path, *, max_pixels=MAX_PIXELS, max_aspect=MAX_ASPECT):
    """``(width, height)`` of the image file ``path`` as stored, from :func:`image_header`."""
    return image_header(path, max_pixels=max_pixels, max_aspect=max_aspect)[1:]


def check_whole(data, name, header):
    """``ImageError`` if the PNG or JPEG ``data`` (whose checked ``header`` it is) ends before
    its image does."""
    fmt = header[0]
    if fmt in _COMPLETE and not _COMPLETE[fmt](data):
        raise ImageError(f"{name} is cut short: its {fmt} data ends before the image does; "
                         "copy the file again.")


def check_decoded(shape, name, header, upright=False):
    """``ImageError`` unless the decoded image's ``shape`` (HWC) has the header's size; with
    ``upright`` (a decoder that applies the EXIF orientation), the size once turned by the
    header's ``orientation`` (5 to 8 swap width and height)."""
    _, width, height = header
    turned = upright and getattr(header, "orientation", 1) >= 5
    if tuple(shape[:2]) != ((width, height) if turned else (height, width)):
        says = f" turned by its EXIF orientation {header.orientation}" if turned else ""
        raise ImageError(f"{name} decodes to {shape[1]}x{shape[0]} pixels but its header says "
                         f"{width}x{height}{says}; the file is damaged.")


def check_resize(name, size, new_size, max_pixels=MAX_PIXELS):
    """``ImageError`` if resizing the image ``name`` from ``size`` to ``new_size`` (both
    (width, height)) would make an empty image or more than ``max_pixels`` pixels."""
    (width, height), (new_width, new_height) = size, new_size
    if min(new_width, new_height) < 1 or new_width * new_height > max_pixels:
        raise ImageError(f"{name} ({width}x{height} pixels) would be resized to "
                         f"{new_width}x{new_height}, outside 1 to {max_pixels:,} pixels; crop "
                         f"it to a more usual shape, or {_RAISE}.")


def add_limit_options(group):
    """``--max-image-pixels`` and ``--max-aspect-ratio``: the limits on the image files a
    command reads, added to the argument ``group`` (an argparse parser or group)."""
    def limit(index, convert):
        def parse(text):
            try:
                values = [MAX_PIXELS, MAX_ASPECT]
                values[index] = convert(text)
                return check_limits(*values)[index]
            except (TypeError, ValueError) as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        parse.__name__ = "limit"
        return parse

    group.add_argument("--max-image-pixels", type=limit(0, int), default=MAX_PIXELS, metavar="N",
                       help="refuse image files of more pixels (Pillow's decompression-bomb "
                            "limit; at most 2^30, MXNet's decoder's)")
    group.add_argument("--max-aspect-ratio", type=limit(1, float), default=MAX_ASPECT, metavar="R",
                       help="refuse image files whose longer side is more than R times the other")
    return group
