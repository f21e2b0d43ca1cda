"""gluonkit.serve's input tensors in the serving environment (OpenCV 4 or 5, numpy 2, no mxnet)
equal gluonkit.predict's in MXNet, to the bit: the decode and every resize a model's
preprocessing can ask for, on images of odd sizes, enlarged and shrunk."""
import json
import os
import subprocess

import cv2
import numpy as np
import pytest

import gluonkit
from conftest import ROOT
from image_files import pixels
from serve_env import serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

PREPROCESSING = [{"resize": [h, w], "interp": interp}
                 for interp in (0, 1, 2, 3, 4, 9) for h, w in [(60, 500), (31, 47), (224, 224)]]
PREPROCESSING += [{"resize_short": 33, "crop": [29, 29]}, {"resize_short": 7, "crop": [5, 7]},
                  {"resize_short_within": [96, 144], "interp": 9},
                  {"resize_short_within": [17, 40], "interp": 9},
                  {"pad_to": [[32, 32], [48, 64]], "interp": 9}, {"max_size": 23}]
SIZES = [(13, 9), (500, 60), (37, 101), (77, 77)]          # (width, height)

#: Run in the serving environment: the tensors gluonkit.serve makes of the cases' images.
PREPARE = """
import json, sys
import numpy as np
from gluonkit.serve.images import cv2, prepare
cases = json.load(open(sys.argv[1]))
np.savez(sys.argv[2], *[prepare(path, p, 10 ** 8, 100)[1] for path, p in cases])
print(cv2.__version__)
"""


def _image(folder, width, height, channels, seed, depth):
    """A PNG of smooth and noisy parts (resizes round differently on both), 8 or 16-bit (which
    Pillow alone decodes otherwise than OpenCV)."""
    noise = pixels(height, width, seed).astype(np.float64)
    ramp = np.linspace(0, 255, width)[None, :, None] * np.linspace(0.2, 1, height)[:, None, None]
    image = np.where(np.arange(width)[None, :, None] < width // 2, ramp, noise)[:, :, :channels]
    if depth == 16:
        image = image * 257 + pixels(height, width, seed + 1)[:, :, :channels]
    path = folder / f"{width}x{height}-{channels}-{depth}.png"
    cv2.imwrite(str(path), image.astype(np.uint16 if depth == 16 else np.uint8))
    return str(path)


def _cmyk_jpeg(folder):
    """A CMYK JPEG (which Pillow alone decodes a few levels off OpenCV)."""
    from PIL import Image

    path = folder / "cmyk.jpg"
    Image.fromarray(pixels(21, 35)).convert("CMYK").save(path, quality=90)
    return str(path)


def _oriented_jpeg(folder, orientation):
    """A JPEG stored sideways, with the EXIF orientation that turns it upright."""
    from PIL import Image

    path = folder / f"orientation{orientation}.jpg"
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels(21, 35)).save(path, quality=90, exif=exif.tobytes())
    return str(path)


def test_served_tensors_are_gluonkit_predict_s_to_the_bit(serve_python, tmp_path):
    images = [_image(tmp_path, w, h, c, i, depth) for i, (w, h) in enumerate(SIZES)
              for c in (1, 3) for depth in (8, 16)]
    images += [_cmyk_jpeg(tmp_path), _oriented_jpeg(tmp_path, 3), _oriented_jpeg(tmp_path, 6)]
    cases = [(path, dict(p, channels=channels, mean=[0.5] * channels, std=[0.25] * channels))
             for path in images for p in PREPROCESSING for channels in (1, 3)]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    result = subprocess.run([serve_python, "-c", PREPARE, tmp_path / "cases.json",
                             tmp_path / "got.npz"], env=dict(os.environ, PYTHONPATH=ROOT),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split(".")[0]) >= 4          # OpenCV 4 or 5, not MXNet's 3.4
    got = np.load(tmp_path / "got.npz")
    for i, (path, p) in enumerate(cases):
        want = gluonkit.inference.preprocess(path, p, max_pixels=10 ** 8).asnumpy()
        np.testing.assert_array_equal(got[f"arr_{i}"], want, err_msg=f"{path} {p}")
