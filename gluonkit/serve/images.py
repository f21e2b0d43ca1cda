"""Image files read with Pillow and made ready for the network with NumPy, as
``gluonkit.predict`` reads them with MXNet: the same checks (:mod:`gluonkit.imagefiles`), the
same plan (:mod:`gluonkit.preprocessing`), the same arithmetic.

Resizes interpolate as OpenCV's ``resize`` (which MXNet calls): pixel centers aligned, no
antialiasing, bilinear or bicubic (a = -0.75), edges replicated, or area (each pixel the
mean of the pixels it covers, for shrinking); OpenCV computes in fixed point, so a resized
pixel may differ from MXNet's by one level of 255. Other interpolations (``interp`` 0, 3
and 4: nearest, area to enlarge, Lanczos) are not reproduced: :func:`check_interp` refuses
them.
"""
import io

import numpy as np
from PIL import Image

from ..imagefiles import ImageError, check_decoded, read_checked
from ..metadata import ExportError
from ..preprocessing import AREA, AUTO, BICUBIC, BILINEAR, plan

__all__ = ["read_image", "resize", "check_interp", "prepare"]

#: The ``interp`` values of a model's preprocessing that :func:`resize` reproduces.
INTERPOLATIONS = (BILINEAR, BICUBIC, AUTO)


def read_image(path, channels, max_pixels, max_aspect):
    """The image file ``path`` as an (H, W, ``channels``) uint8 array, RGB or grayscale."""
    data, header = read_checked(path, max_pixels, max_aspect)
    limit = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = max(max_pixels, limit or 0)   # the limit is checked already
        with Image.open(io.BytesIO(data)) as image:
            pixels = _decoded(image, channels)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        raise ImageError(f"{path} cannot be decoded: its {header[0]} data ({header[1]}x"
                         f"{header[2]} pixels) is damaged or cut short; copy the file "
                         "again.") from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    check_decoded(pixels.shape, path, header)
    return pixels.reshape(pixels.shape[:2] + (channels,))


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


def _cubic(d):
    """OpenCV's bicubic kernel (a = -0.75) at distances ``d``."""
    a, d = -0.75, np.abs(d)
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                    np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))


def _weights(size, new_size, interp):
    """The (new_size, size) matrix that interpolates one axis."""
    if interp == AREA:              # each new pixel covers ``size / new_size`` old ones
        scale, old = size / new_size, np.arange(size)
        edges = np.arange(new_size + 1) * scale
        covered = np.minimum(edges[1:, None], old + 1) - np.maximum(edges[:-1, None], old)
        return (np.clip(covered, 0, None) / scale).astype(np.float32)
    x = (np.arange(new_size) + 0.5) * (size / new_size) - 0.5
    base = np.floor(x)
    offsets = np.array([0, 1]) if interp == BILINEAR else np.array([-1, 0, 1, 2])
    taps = base[:, None] + offsets
    weights = (1 - np.abs(x[:, None] - taps)) if interp == BILINEAR else _cubic(x[:, None] - taps)
    matrix = np.zeros((new_size, size), dtype=np.float32)
    rows = np.repeat(np.arange(new_size), len(offsets))
    np.add.at(matrix, (rows, np.clip(taps, 0, size - 1).astype(int).ravel()), weights.ravel())
    return matrix


def resize(image, width, height, interp):
    """``image`` (HWC uint8) resized to ``width`` x ``height`` as OpenCV's ``resize``."""
    rows = np.tensordot(_weights(image.shape[0], height, interp), image.astype(np.float32),
                        axes=(1, 0))
    pixels = np.tensordot(_weights(image.shape[1], width, interp), rows, axes=(1, 1))
    return np.clip(np.floor(pixels.transpose(1, 0, 2) + 0.5), 0, 255).astype(np.uint8)


def check_interp(preprocessing, path):
    """``ExportError`` naming ``path`` unless :func:`resize` reproduces the resizes of
    ``preprocessing`` (its ``interp``: OpenCV's code, or 9)."""
    interp = preprocessing.get("interp", BILINEAR)
    if interp not in INTERPOLATIONS:
        raise ExportError(f"{path} resizes images with OpenCV interpolation {interp}, which "
                          "gluonkit.serve does not reproduce (it does 1: bilinear, 2: bicubic, "
                          "9: area to shrink, bicubic to enlarge); predict with gluonkit-predict, or "
                          "export with one of those.")


def prepare(path, preprocessing, max_pixels, max_aspect):
    """``(plan, tensor)``: the image file ``path`` as the network's input (CHW float32) and its
    :class:`gluonkit.preprocessing.Plan`."""
    channels = preprocessing["channels"]
    image = read_image(path, channels, max_pixels, max_aspect)
    steps = plan(image.shape[1::-1], preprocessing, path, max_pixels)
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
    mean = np.asarray(preprocessing.get("mean", [0.0] * channels), dtype=np.float32)
    std = np.asarray(preprocessing.get("std", [1.0] * channels), dtype=np.float32)
    tensor = (image.astype(np.float32) / np.float32(255) - mean) / std
    return steps, np.ascontiguousarray(tensor.transpose(2, 0, 1))
