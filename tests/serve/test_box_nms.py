"""MXNet's box_nms translated to ONNX (gluonkit.onnx_detection) gives, in onnxruntime, what
MXNet gives: per-class suppression, topk before suppression, background and -1 rows."""
import mxnet as mx
import numpy as np
import pytest

from gluonkit.onnx_export import onnx_model
from serve_env import run_onnx, serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow


def detections(seed, batch=2, count=60, classes=3):
    """Rows [id, score, xmin, ymin, xmax, ymax] with many overlaps, ties and invalid rows."""
    r = np.random.RandomState(seed)
    corner = r.uniform(0, 40, (batch, count, 2))
    size = r.uniform(5, 30, (batch, count, 2))
    ids = r.randint(-1, classes, (batch, count, 1)).astype(np.float32)
    scores = np.round(r.uniform(-0.2, 1, (batch, count, 1)), 2)      # ties, and below 0
    return np.concatenate([ids, scores, corner, corner + size], axis=2).astype(np.float32)


SETTINGS = [dict(overlap_thresh=0.45, valid_thresh=0.01, topk=40, id_index=0, score_index=1,
                 coord_start=2, force_suppress=False),                                  # YOLOv3, SSD
            dict(overlap_thresh=0.3, valid_thresh=0.0, topk=-1, id_index=0, force_suppress=False,
                 background_id=0),
            dict(overlap_thresh=0.7, valid_thresh=0.0, topk=25, id_index=-1, score_index=1,
                 coord_start=2, force_suppress=True),                                   # an RPN
            dict(overlap_thresh=0.5, topk=10, id_index=0, force_suppress=True)]


@pytest.mark.parametrize("settings", SETTINGS, ids=range(len(SETTINGS)))
def test_box_nms_in_onnxruntime_equals_mxnet(serve_python, tmp_path, settings):
    data = mx.sym.var("data")
    symbol = mx.sym.contrib.box_nms(data, **settings)
    inputs = detections(len(str(settings)))
    metadata = {"format": 2, "kind": "classifier", "input": {"name": "data",
                "shape": list(inputs.shape[1:])}, "outputs": [{"name": "out", "classes": None}],
                "preprocessing": None}
    (tmp_path / "model.onnx").write_bytes(onnx_model(symbol, {}, metadata).SerializeToString())
    expected = mx.nd.contrib.box_nms(mx.nd.array(inputs), **settings).asnumpy()
    got, = run_onnx(serve_python, tmp_path, inputs)
    assert got.shape == expected.shape
    assert (expected[:, :, 0] >= 0).sum() > 10       # the case keeps boxes of several classes
    np.testing.assert_array_equal(got, expected)
