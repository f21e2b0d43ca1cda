"""Image files read and made ready for the network as ``gluonkit.predict`` reads them with
MXNet: the same checks (:mod:`gluonkit.imagefiles`), the same plan
(:mod:`gluonkit.preprocessing`), the same pixels.

With OpenCV installed (``opencv-python-headless``), files are decoded by OpenCV, as
``gluonkit.predict`` decodes them (turned upright by their EXIF orientation unless the
model's preprocessing says ``exif_orientation: 'ignore'``), and resized by OpenCV's ``resize``, as MXNet's
``imresize`` does: the same pixels for every ``interp``. Bicubic is the exception: MXNet's
bundled OpenCV rounds it otherwise than OpenCV 4 and 5, so :func:`resize` computes it in NumPy
as MXNet's does, to the pixel, with or without OpenCV.

Without OpenCV, Pillow decodes (as OpenCV does for 8-bit PNG, JPEG, BMP and TIFF; 16-bit and
CMYK files differ, and no EXIF orientation is applied) and NumPy resizes bilinear and area in floating point, where OpenCV uses
fixed point: a resized pixel may differ from MXNet's by one level of 255. The other
interpolations (``interp`` 0, 3 and 4: nearest, area to enlarge, Lanczos) then are not
reproduced, and :func:`check_interp` refuses them.
"""
import io

import numpy as np
from PIL import Image

try:
    import cv2
except ImportError:         # Pillow and NumPy instead
    cv2 = None

from ..imagefiles import ImageError, check_decoded, read_checked
from ..metadata import FORMAT, ExportError
from ..preprocessing import AREA, AUTO, BICUBIC, BILINEAR, plan

__all__ = ["read_image", "resize", "check_interp", "prepare"]

#: The ``interp`` values of a model's preprocessing that :func:`resize` reproduces without
#: OpenCV (with it: all).
INTERPOLATIONS = (BILINEAR, BICUBIC, AUTO)


def read_image(path, channels, max_pixels, max_aspect, upright=True):
    """The image file ``path`` as an (H, W, ``channels``) uint8 array, RGB or grayscale; with
    OpenCV turned by its EXIF orientation unless ``upright`` is False."""
    data, header = read_checked(path, max_pixels, max_aspect)
    if cv2 is not None:
        flag = cv2.IMREAD_COLOR if channels == 3 else cv2.IMREAD_GRAYSCALE
        if not upright:
            flag |= cv2.IMREAD_IGNORE_ORIENTATION
        pixels = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flag)
        if pixels is None:
            raise _damaged(path, header)
        check_decoded(pixels.shape, path, header, upright=upright)    # turned by its orientation
        if channels == 3:
            cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB, dst=pixels)
        return pixels.reshape(pixels.shape[:2] + (channels,))
    limit = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = max(max_pixels, limit or 0)   # the limit is checked already
        with Image.open(io.BytesIO(data)) as image:
            pixels = _decoded(image, channels)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        raise _damaged(path, header) from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    check_decoded(pixels.shape, path, header)
    return pixels.reshape(pixels.shape[:2] + (channels,))


def _damaged(path, header):
    return ImageError(f"{path} cannot be decoded: its {header[0]} data ({header[1]}x"
                      f"{header[2]} pixels) is damaged or cut short; copy the file again.")


#: How OpenCV turns color into gray, per format: libpng's fixed-point weights (OpenCV asks it
#: for 0.299, 0.587; it truncates), else OpenCV's own (rounded); JPEG decodes its luma only.
_GRAY = {"PNG": ((9797, 19234, 3737), 15, 0), None: ((4899, 9617, 1868), 14, 1 << 13)}


def _decoded(image, channels):
    """The pixels of the open Pillow ``image`` as OpenCV's decoder gives them (RGB, or gray)."""
    if channels == 3 or image.mode in ("L", "1"):
        return np.asarray(image.convert("RGB" if channels == 3 else "L"))
    if image.format == "JPEG":
        image.draft("L", image.size)           # the decoder's luma, as libjpeg's grayscale
        return np.asarray(image.convert("L"))
    weights, shift, rounding = _GRAY.get(image.format, _GRAY[None])
    rgb = np.asarray(image.convert("RGB")).astype(np.int64)
    return ((rgb @ np.array(weights) + rounding) >> shift).astype(np.uint8)


def _cubic_taps(size, new_size):
    """The source indices (new_size, 4) and weights (in 1/2048ths, as int64) of OpenCV's
    bicubic (a = -0.75, float32 then rounded to fixed point) along one axis."""
    x = ((np.arange(new_size) + 0.5) * (size / new_size) - 0.5).astype(np.float32)
    base = np.floor(x)
    t, a, one = (x - base).astype(np.float32), np.float32(-0.75), np.float32(1)
    u = t + one
    near = ((a + 2) * t - (a + 3)) * t * t + one
    v = one - t
    far = ((a + 2) * v - (a + 3)) * v * v + one
    first = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a
    weights = np.stack([first, near, far, one - first - near - far], 1)
    taps = np.clip(base.astype(np.int64)[:, None] + np.arange(-1, 3), 0, size - 1)
    return taps, np.rint(weights * np.float32(2048)).astype(np.int64)


def _bicubic(image, width, height):
    """``image`` resized bicubic exactly as MXNet's bundled OpenCV (3.4) does: rows in
    integers, then columns in float32 rounded half to even, but the last ``len % 8`` values
    of each row (left to its scalar code) in integers rounded half up."""
    columns, across = _cubic_taps(image.shape[1], width)
    rows, down = _cubic_taps(image.shape[0], height)
    mixed = (image.astype(np.int64)[:, columns] * across[None, :, :, None]).sum(2)[rows]
    exact = (mixed * down[:, :, None, None]).sum(1)
    scaled = mixed.astype(np.float32) * (down.astype(np.float32)
                                         * np.float32(1 / 2048 ** 2))[:, :, None, None]
    pixels = ((scaled[:, 0] + scaled[:, 1]) + scaled[:, 2]) + scaled[:, 3]
    pixels = np.rint(pixels).reshape(height, -1)
    tail = pixels.shape[1] // 8 * 8
    pixels[:, tail:] = ((exact + (1 << 21)) >> 22).reshape(height, -1)[:, tail:]
    return np.clip(pixels, 0, 255).astype(np.uint8).reshape(height, width, image.shape[2])


def _weights(size, new_size, interp):
    """The (new_size, size) matrix that interpolates one axis (bilinear or area)."""
    if interp == AREA:              # each new pixel covers ``size / new_size`` old ones
        scale, old = size / new_size, np.arange(size)
        edges = np.arange(new_size + 1) * scale
        covered = np.minimum(edges[1:, None], old + 1) - np.maximum(edges[:-1, None], old)
        return (np.clip(covered, 0, None) / scale).astype(np.float32)
    x = (np.arange(new_size) + 0.5) * (size / new_size) - 0.5
    taps = np.floor(x)[:, None] + np.array([0, 1])
    weights = 1 - np.abs(x[:, None] - taps)
    matrix = np.zeros((new_size, size), dtype=np.float32)
    rows = np.repeat(np.arange(new_size), 2)
    np.add.at(matrix, (rows, np.clip(taps, 0, size - 1).astype(int).ravel()), weights.ravel())
    return matrix


def resize(image, width, height, interp):
    """``image`` (HWC uint8) resized to ``width`` x ``height`` as MXNet's ``imresize``: the
    same pixels with OpenCV installed (and bicubic always), else within one level of 255."""
    if interp == BICUBIC:
        return _bicubic(image, width, height)
    if cv2 is not None:
        return cv2.resize(np.ascontiguousarray(image), (width, height), interpolation=interp).reshape(
            height, width, image.shape[2])
    rows = np.tensordot(_weights(image.shape[0], height, interp), image.astype(np.float32),
                        axes=(1, 0))
    pixels = np.tensordot(_weights(image.shape[1], width, interp), rows, axes=(1, 1))
    return np.clip(np.floor(pixels.transpose(1, 0, 2) + 0.5), 0, 255).astype(np.uint8)


def check_interp(preprocessing, path):
    """``ExportError`` naming ``path`` unless :func:`resize` reproduces the resizes of
    ``preprocessing`` (its ``interp``: OpenCV's code, or 9)."""
    interp = preprocessing.get("interp", BILINEAR)
    if cv2 is None and interp not in INTERPOLATIONS:
        raise ExportError(f"{path} resizes images with OpenCV interpolation {interp}, which "
                          "gluonkit.serve reproduces only with OpenCV (without it: 1 bilinear, 2 "
                          "bicubic, 9 area to shrink, bicubic to enlarge); pip install "
                          "opencv-python-headless, or predict with gluonkit-predict.")


def prepare(path, preprocessing, max_pixels, max_aspect, format=FORMAT, pixels=None):
    """``(plan, tensor)``: the image file ``path`` as the network's input (CHW float32) and its
    :class:`gluonkit.preprocessing.Plan` (``format``: the metadata's); with ``pixels`` ('NCHW'
    or 'NHWC', a ``model.onnx`` that normalizes in its graph) the input is the resized uint8
    pixels in that layout."""
    channels = preprocessing["channels"]
    image = read_image(path, channels, max_pixels, max_aspect,
                       preprocessing.get("exif_orientation", "apply") == "apply")
    steps = plan(image.shape[1::-1], preprocessing, path, max_pixels, format)
    for kind, *args in steps.steps:
        if kind == "resize":
            image = resize(image, *args)
        elif kind == "crop":
            x0, y0, width, height = args
            image = image[y0:y0 + height, x0:x0 + width]
        else:                                   # pad: zeros at the bottom and right
            width, height = args
            image = np.pad(image, ((0, height - image.shape[0]), (0, width - image.shape[1]),
                                   (0, 0)))
    if pixels is not None:
        return steps, np.ascontiguousarray(image if pixels == "NHWC" else image.transpose(2, 0, 1))
    mean = np.asarray(preprocessing.get("mean", [0.0] * channels), dtype=np.float32)
    std = np.asarray(preprocessing.get("std", [1.0] * channels), dtype=np.float32)
    tensor = (image.astype(np.float32) / np.float32(255) - mean) / std
    return steps, np.ascontiguousarray(tensor.transpose(2, 0, 1))
