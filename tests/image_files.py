"""Image files for the tests: decompression bombs built in milliseconds, and damaged files.

Test modules import them with ``from image_files import zero_png``.
"""
import struct
import zlib

import cv2
import numpy as np


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def zero_png(width, height):
    """A valid grayscale PNG of ``width`` x ``height`` black pixels, a few hundred bytes per
    megapixel: its zlib stream repeats one deflate block of 1 MiB of zeros (a full flush
    makes every block independent), so even 30000 x 30000 is built in milliseconds."""
    total, block = (width + 1) * height, 1 << 20      # each row: a filter byte, then pixels

    def deflated(size, mode):
        stream = zlib.compressobj(9, zlib.DEFLATED, -15)
        return stream.compress(bytes(size)) + stream.flush(mode)

    data = deflated(block, zlib.Z_FULL_FLUSH) * (total // block) + deflated(total % block, zlib.Z_FINISH)
    adler = ((total % 65521) << 16) | 1               # Adler-32 of `total` zero bytes
    return (b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", b"\x78\xda" + data + struct.pack(">I", adler)) + _chunk(b"IEND", b""))


def pixels(height=40, width=50, seed=0):
    """Random RGB pixels, HWC uint8."""
    return np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)


def encoded(image, suffix):
    """``image`` (RGB) encoded as a ``suffix`` file's bytes ('.png', '.jpg', ...)."""
    ok, data = cv2.imencode(suffix, image[:, :, ::-1])
    assert ok
    return data.tobytes()


def png_header_only(image):
    """A PNG of ``image`` cut right after its header (signature and IHDR chunk)."""
    return encoded(image, ".png")[:33]
