"""An image whose input the network's graph cannot run ends neither gluonkit-predict nor
gluonkit.predict with MXNet's error: that image is reported in one line, the others predicted."""
import json
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import CLONE_ENV
from image_files import pixels


def _fixed_size_classifier(prefix):
    """A classifier whose Dense layer takes the features of an 8x8 input only, exported with a
    preprocessing that keeps other sizes (a size cap)."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(2, 3, padding=1), gluon.nn.Flatten(), gluon.nn.Dense(2))
    net.initialize()
    net(mx.nd.zeros((1, 3, 8, 8)))
    gluonkit.export_model(net, prefix, (3, 8, 8), outputs=["a", "b"], onnx=False,
                          preprocessing={"channels": 3, "max_size": 8})
    return net


def test_predict_reports_the_image_the_graph_cannot_run(tmp_path):
    prefix = str(tmp_path / "model")
    net = _fixed_size_classifier(prefix)
    good, wide = tmp_path / "good.png", tmp_path / "wide.png"
    import cv2
    cv2.imwrite(str(good), pixels(8, 8))
    cv2.imwrite(str(wide), pixels(4, 8))                       # 8 x 4: an 8x4 input
    results = list(gluonkit.iter_predict(prefix, [str(wide), str(good)], on_error="report"))
    assert results[0]["image"] == str(wide) and "cannot be run by" in results[0]["error"]
    assert "8x4 pixels, input 8x4" in results[0]["error"]
    x = gluonkit.inference.preprocess(str(good), {"channels": 3, "max_size": 8})
    assert results[1]["top"][0]["probability"] == pytest.approx(
        float(mx.nd.softmax(net(x[None])).max().asscalar()), abs=1e-7)
    with pytest.raises(gluonkit.ImageError, match="wide.png"):
        gluonkit.predict(prefix, [str(wide)])

    done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.predict", "--model", prefix,
                           str(wide), str(good), "--json"], env=CLONE_ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    printed = json.loads(done.stdout)
    assert [r["image"] for r in printed] == [str(wide), str(good)] and "error" in printed[0]
    assert done.stderr.count("\n") == 1 and "wide.png" in done.stderr
