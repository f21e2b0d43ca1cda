"""export_model(..., pixels='NHWC' | 'NCHW'): model.onnx takes the resized uint8 pixels and
normalizes them in its graph; gluonkit-serve then feeds pixels, with the results of the float
export (the same tensor inside the graph: float32 division and subtraction as NumPy's)."""
import json

import cv2
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from image_files import pixels
from serve_env import serve_json, serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

PREPROCESSING = {"channels": 3, "resize_short": 20, "crop": [16, 16], "interp": 2,
                 "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def _net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, activation="relu"), gluon.nn.BatchNorm(),
            gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 3, 16, 16)))
    return net


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_a_pixel_input_export_serves_what_the_float_export_serves(serve_python, tmp_path, layout):
    net = _net()
    for name, extra in (("float", {}), ("pixels", {"pixels": layout})):
        gluonkit.export_model(net, tmp_path / name / "model", (3, 16, 16), outputs=list("abc"),
                              preprocessing=PREPROCESSING, **extra)
    images = tmp_path / "images"
    images.mkdir()
    for i, (w, h) in enumerate([(16, 16), (45, 31), (23, 60)]):
        cv2.imwrite(str(images / f"{i}.png"), pixels(h, w, seed=i))
    floats = serve_json(serve_python, tmp_path / "float" / "model.onnx", images, "--top-k", "3")
    served = serve_json(serve_python, tmp_path / "pixels" / "model.onnx", images, "--top-k", "3",
                        "--dump", tmp_path / "dump")
    expected = gluonkit.predict(str(tmp_path / "float" / "model"), [str(images)], top_k=3)
    for got, fl, want in zip(served, floats, expected):
        assert [t["class"] for t in got["top"]] == [t["class"] for t in want["top"]]
        assert [t["probability"] for t in got["top"]] == [t["probability"] for t in fl["top"]]
        np.testing.assert_allclose([t["probability"] for t in got["top"]],
                                   [t["probability"] for t in want["top"]], atol=1e-6)
    entry = json.loads((tmp_path / "dump" / "index.json").read_text())[1]
    given = np.load(tmp_path / "dump" / entry["input"], allow_pickle=False)
    assert given.dtype == np.uint8
    assert given.shape == ((1, 16, 16, 3) if layout == "NHWC" else (1, 3, 16, 16))
    tensor = gluonkit.inference.preprocess(entry["image"], PREPROCESSING).asnumpy()
    chw = given[0].transpose(2, 0, 1) if layout == "NHWC" else given[0]
    mean, std = (np.float32(PREPROCESSING[k]).reshape(3, 1, 1) for k in ("mean", "std"))
    np.testing.assert_array_equal((chw.astype(np.float32) / np.float32(255) - mean) / std, tensor)
