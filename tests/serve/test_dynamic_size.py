"""export_model(..., dynamic_size=True): a fully convolutional network's model.onnx runs in
onnxruntime at sizes other than the exported one, as the network does in MXNet."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from gluonkit.nn import Branches
from serve_env import run_onnx, serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow


def _unet_like():
    """A Branches network of convolutions only: a trunk, a mask head and an upsampled head."""
    trunk = gluon.nn.HybridSequential()
    trunk.add(gluon.nn.Conv2D(4, 3, padding=1, activation="relu"), gluon.nn.MaxPool2D())
    net = Branches(trunk=trunk)
    net.add("mask", gluon.nn.Conv2D(2, 1))
    up = gluon.nn.HybridSequential()
    up.add(gluon.nn.Conv2DTranspose(3, 2, strides=2))
    net.add("full", up)
    net.initialize()
    net(mx.nd.zeros((1, 2, 16, 16)))
    return net


def test_a_fully_convolutional_export_runs_at_other_sizes(serve_python, tmp_path):
    net = _unet_like()
    gluonkit.export_model(net, tmp_path / "model", (2, 16, 16),
                          outputs={"mask": None, "full": None}, dynamic_size=True, onnx=True)
    assert json.loads((tmp_path / "model.json").read_text())["input"]["dynamic_size"] is True
    x = np.random.RandomState(0).rand(2, 2, 24, 32).astype(np.float32)
    got = run_onnx(serve_python, tmp_path, x)
    expected = [o.asnumpy() for o in net(mx.nd.array(x))]
    assert [g.shape for g in got] == [(2, 2, 12, 16), (2, 3, 24, 32)]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-5)
