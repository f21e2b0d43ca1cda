"""model.onnx beside every export (gluonkit.onnx_export): its graph as onnxruntime needs it,
its metadata inside, and what happens without the onnx package or with an operator the
converter does not know. (onnxruntime runs it in tests/serve, in an environment of its own.)"""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon, nd

import gluonkit
from gluonkit.data.images import read_image as mxnet_read
from gluonkit.serve.images import read_image as serve_read, resize
from image_files import encoded, pixels

onnx = pytest.importorskip("onnx")

PREPROCESSING = {"channels": 1, "resize": [8, 8], "mean": [0.5], "std": [0.25]}


def small_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, activation="relu"), gluon.nn.BatchNorm(), gluon.nn.Dense(3))
    net.initialize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    return net


def test_export_writes_model_onnx_with_its_metadata(tmp_path):
    meta = gluonkit.export_model(small_net(), tmp_path / "model", (1, 8, 8), outputs=list("abc"),
                                 preprocessing=PREPROCESSING, task="mine")
    model = onnx.load(str(tmp_path / "model.onnx"))
    onnx.checker.check_model(model)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    assert [i.name for i in model.graph.input] == ["data"]          # no parameter as an input
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert not dims[0].HasField("dim_value") and [d.dim_value for d in dims[1:]] == [1, 8, 8]
    assert [o.name for o in model.graph.output] == ["class"]
    saved = json.loads((tmp_path / "model.json").read_text())
    inside = json.loads({p.key: p.value for p in model.metadata_props}["gluonkit"])
    assert inside == {k: v for k, v in saved.items() if k not in ("files", "sha256")}
    assert inside["task"] == "mine" and inside["outputs"][0]["classes"] == ["a", "b", "c"]
    assert saved["files"]["onnx"] == "model.onnx" == os.path.basename(meta["files"]["onnx"])
    assert saved["sha256"]["onnx"] == gluonkit.metadata.file_sha256(tmp_path / "model.onnx")


def _dims(value):
    return [d.dim_value if d.HasField("dim_value") else d.dim_param
            for d in value.type.tensor_type.shape.dim]


def test_declared_shapes_are_what_the_graph_runs(tmp_path):
    """Named free axes, fixed class counts, no initializer that no node reads, gluonkit as the
    producer, a description; model.json says the outputs are logits and the channels RGB."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, activation="relu"), gluon.nn.GlobalAvgPool2D(),
            gluon.nn.Dense(5))
    net.initialize()
    net(mx.nd.zeros((1, 3, 16, 16)))
    meta = gluonkit.export_model(net, tmp_path / "model", (3, 16, 16), outputs=list("abcde"),
                                 preprocessing={"channels": 3, "max_size": 16})
    model = onnx.load(str(tmp_path / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert _dims(model.graph.input[0]) == ["batch", 3, "height", "width"]
    assert _dims(model.graph.output[0]) == ["batch", 5]
    used = {name for node in model.graph.node for name in node.input}
    assert all(init.name in used for init in model.graph.initializer)
    assert (model.producer_name, model.producer_version) == ("gluonkit", gluonkit.__version__)
    assert "logits" in model.graph.doc_string and "RGB" in model.doc_string
    assert meta["values"].startswith("logits") and meta["input"]["color"] == "RGB"


def test_faster_rcnn_declares_the_one_image_it_runs(tmp_path):
    from gluonkit.recipes import detection_serving, rcnn

    net = rcnn.build_faster_rcnn("faster_rcnn_mobilenet0.25_custom", ["a", "b"], short=64,
                                 max_size=96)
    net.initialize()
    net(mx.nd.zeros((1, 3, 64, 64)))
    gluonkit.export_model(net, tmp_path / "model", (3, 64, 64), outputs=["a", "b"],
                          kind="detector", images_per_call=1,
                          preprocessing=detection_serving.serving_preprocessing(
                              "faster_rcnn", (64, 96), min_cells=rcnn.proposal_cells(net)))
    model = onnx.load(str(tmp_path / "model.onnx"))
    assert _dims(model.graph.input[0]) == [1, 3, "height", "width"]
    assert [_dims(o)[0] for o in model.graph.output] == [1, 1, 1]


def test_every_head_of_a_multi_output_network_is_a_named_output(tmp_path):
    from gluonkit.recipes.multitask import HEAD_CLASSES, MultiTaskNet

    net = MultiTaskNet()
    net.initialize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    gluonkit.export_model(net, tmp_path / "model", (1, 8, 8), outputs=HEAD_CLASSES,
                          preprocessing=PREPROCESSING)
    model = onnx.load(str(tmp_path / "model.onnx"))
    assert [o.name for o in model.graph.output] == list(HEAD_CLASSES) == ["digit", "parity", "aux"]
    inside = json.loads(model.metadata_props[0].value)
    assert [o["classes"] for o in inside["outputs"]] == list(HEAD_CLASSES.values())


def test_onnx_outputs_other_than_the_metadata_s_refuse_the_export_and_keep_the_last_one(tmp_path):
    # MXNet's converter reads an output named 'NAME_state' as an RNN's state ('NAME1'): the
    # graph it writes has no output 'h_state'
    net = gluon.nn.Dense(3)
    net.initialize()
    net(mx.nd.zeros((1, 6)))
    prefix = tmp_path / "model"
    gluonkit.export_model(net, prefix, (6,), outputs={"h": None})
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    for required in (True, None):           # refused, not skipped with a warning
        with pytest.raises(gluonkit.ExportError, match=r"^model.onnx would have the outputs \[\], "
                                                       r"not the 1 model.json declares "
                                                       r"\(\['h_state'\]\).*nothing was written. "
                                                       r"Export with onnx=False"):
            gluonkit.export_model(net, prefix, (6,), outputs={"h_state": None}, onnx=required)
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before
    with pytest.raises(gluonkit.ExportError, match="would have the outputs"):
        gluonkit.export_model(net, tmp_path / "new" / "model", (6,), outputs={"h_state": None})
    assert not (tmp_path / "new").exists()


def test_an_output_named_as_an_input_has_no_onnx_file(tmp_path):
    net = gluon.nn.Dense(3)
    net.initialize()
    net(mx.nd.zeros((1, 6)))
    with pytest.raises(ValueError, match="the output name 'data' is also the name of an input or "
                                         r"parameter of the graph; name the outputs otherwise"):
        gluonkit.export_model(net, tmp_path / "a" / "model", (6,), outputs={"data": None},
                              onnx=True)
    assert not (tmp_path / "a").exists()
    with pytest.warns(UserWarning, match="model.onnx was not written: the output name 'data'"):
        gluonkit.export_model(net, tmp_path / "b" / "model", (6,), outputs={"data": None})
    assert "model.onnx" not in os.listdir(tmp_path / "b")


def test_without_the_onnx_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r'needs the onnx package.*pip install "onnx>=1.10,<1.16"'):
        gluonkit.export_model(small_net(), tmp_path / "a" / "model", (1, 8, 8), onnx=True)
    assert not (tmp_path / "a").exists()                      # nothing half-written
    with pytest.warns(UserWarning, match=r"model.onnx was not written: .*pip install"):
        gluonkit.export_model(small_net(), tmp_path / "b" / "model", (1, 8, 8))
    assert sorted(os.listdir(tmp_path / "b")) == ["model-0000.params", "model-symbol.json",
                                                  "model.json"]
    assert "onnx" not in json.loads((tmp_path / "b" / "model.json").read_text())["files"]


@gluonkit.autograd.custom_op
def doubled(x):
    return x * 2


@doubled.backward
def _(dy, x):
    return dy * 2


class Doubling(gluon.HybridBlock):
    def hybrid_forward(self, F, x):
        return doubled(x)


def test_an_operator_the_converter_does_not_know(tmp_path):
    with pytest.raises(ValueError, match=r"converter cannot translate the network .*Custom"):
        gluonkit.export_model(Doubling(), tmp_path / "a" / "model", (3,), onnx=True)
    assert not (tmp_path / "a").exists()
    with pytest.warns(UserWarning, match="model.onnx was not written: MXNet's ONNX converter"):
        gluonkit.export_model(Doubling(), tmp_path / "b" / "model", (3,))
    assert gluonkit.predict(str(tmp_path / "b" / "model"), [np.ones(3, np.float32)])


def test_export_onnx_converts_an_earlier_export(tmp_path):
    net = small_net()
    gluonkit.export_model(net, tmp_path / "model", (1, 8, 8), outputs=list("abc"), onnx=False,
                          preprocessing=PREPROCESSING)
    assert not (tmp_path / "model.onnx").exists()
    path = gluonkit.export_onnx(tmp_path / "model")
    assert path == str(tmp_path / "model.onnx")
    saved = json.loads((tmp_path / "model.json").read_text())
    assert saved["sha256"]["onnx"] == gluonkit.metadata.file_sha256(path)
    assert gluonkit.load_model(tmp_path / "model")                # still a valid export
    with pytest.raises(FileNotFoundError, match="missing.json does not exist"):
        gluonkit.export_onnx(tmp_path / "missing")


def test_the_serving_modules_import_no_mxnet():
    code = ("import sys, gluonkit, gluonkit.serve, gluonkit.serve.command; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mxnet', 'gluoncv')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=os.path.dirname(os.path.dirname(gluonkit.__file__)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".bmp", ".tif"])
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("opencv", [True, False])
def test_serve_decodes_as_mxnet_with_opencv_or_pillow(monkeypatch, tmp_path, suffix, channels,
                                                      opencv):
    import gluonkit.serve.images

    if not opencv:
        monkeypatch.setattr(gluonkit.serve.images, "cv2", None)
    path = tmp_path / f"image{suffix}"
    path.write_bytes(encoded(pixels(23, 31), suffix))
    want = mxnet_read(str(path), channels).asnumpy()
    got = serve_read(str(path), channels, 10 ** 6, 100)
    np.testing.assert_array_equal(got, want)


SIZES = [(8, 8), (96, 96), (50, 20), (31, 47), (500, 3)]


# without OpenCV, area only shrinks (interp 3 to enlarge is refused: check_interp)
@pytest.mark.parametrize("opencv, interp, size",
                         [(True, i, s) for i in (0, 1, 2, 3, 4) for s in SIZES]
                         + [(False, i, s) for i in (1, 2) for s in SIZES]
                         + [(False, 3, (8, 8)), (False, 3, (20, 3))])
def test_serve_resize_is_mxnet_s(monkeypatch, size, interp, opencv):
    """With OpenCV, every resize gives MXNet's pixels; without it, bicubic still does (NumPy
    follows MXNet's OpenCV's rounding), bilinear and area are within one level of 255."""
    import gluonkit.serve.images

    if not opencv:
        monkeypatch.setattr(gluonkit.serve.images, "cv2", None)
    image = pixels(29, 37)
    want = mx.image.imresize(nd.array(image, dtype="uint8"), *size, interp=interp).asnumpy()
    got = resize(image, *size, interp)
    assert got.shape == want.shape
    difference = np.abs(got.astype(int) - want)
    if opencv or interp == 2:
        np.testing.assert_array_equal(got, want)
    else:
        assert difference.max() <= 1 and difference.mean() < 0.2


def test_the_lazy_package_still_gives_its_submodules_as_attributes():
    code = ("import gluonkit; print(gluonkit.export.read_metadata.__name__, "
            "gluonkit.split.split_and_load.__name__, gluonkit.Epochs.__name__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=os.path.dirname(os.path.dirname(gluonkit.__file__)))
    assert result.stdout.split() == ["read_metadata", "split_and_load", "Epochs"], result.stderr


# the detect recipe's export preprocessing (gluonkit.recipes.detection_serving): GluonCV's
# interp=9 resize (bicubic to enlarge, area to shrink), Faster R-CNN's resize_short_within and
# the bucket padding of a run at the images' own sizes, each where it enlarges and shrinks
DETECTION_PREPROCESSING = [("yolo3", (64, 64), None), ("yolo3", (16, 20), None),
                           ("faster_rcnn", (24, 40), None), ("faster_rcnn", (60, 70), None),
                           ("yolo3", None, [[32, 32], [48, 64]]), ("ssd", None, [[16, 16], [8, 24]])]


@pytest.mark.parametrize("family, size, buckets", DETECTION_PREPROCESSING)
def test_serve_preprocesses_a_detection_export_as_gluonkit_predict(tmp_path, family, size, buckets):
    from gluonkit.recipes.detection_serving import serving_preprocessing
    from gluonkit.serve.images import prepare

    preprocessing = serving_preprocessing(family, size, buckets)
    path = tmp_path / "image.png"
    path.write_bytes(encoded(pixels(29, 37), ".png"))
    want = gluonkit.inference.preprocess(str(path), preprocessing).asnumpy()
    plan, got = prepare(str(path), preprocessing, 10 ** 6, 100)
    assert got.shape == want.shape and plan.input_size == want.shape[:0:-1]
    np.testing.assert_array_equal(got, want)          # with OpenCV: the same pixels


@pytest.mark.parametrize("interp", [0, 3, 4])
def test_serve_without_opencv_refuses_an_interpolation_it_does_not_reproduce(monkeypatch, interp):
    import gluonkit.serve.images
    from gluonkit.metadata import ExportError

    gluonkit.serve.images.check_interp({"channels": 3, "interp": interp}, "model.onnx")
    monkeypatch.setattr(gluonkit.serve.images, "cv2", None)
    with pytest.raises(ExportError, match=f"model.onnx resizes images with OpenCV interpolation "
                                          f"{interp}, which gluonkit.serve reproduces only with "
                                          "OpenCV"):
        gluonkit.serve.images.check_interp({"channels": 3, "interp": interp}, "model.onnx")


def test_dynamic_size_is_refused_for_a_network_of_one_size(tmp_path):
    with pytest.raises(ValueError, match=r"not on \(1, 13, 13\).*dynamic_size=False"):
        gluonkit.export_model(small_net(), tmp_path / "model", (1, 8, 8), dynamic_size=True)
    assert not list(tmp_path.iterdir())


def test_a_pixel_input_needs_preprocessing_and_the_onnx_file(tmp_path):
    with pytest.raises(ValueError, match="pixels='NHWC' makes model.onnx take image pixels"):
        gluonkit.export_model(small_net(), tmp_path / "model", (1, 8, 8), pixels="NHWC")
    with pytest.raises(ValueError, match="pixels must be one of"):
        gluonkit.export_model(small_net(), tmp_path / "model", (1, 8, 8), pixels="HWC",
                              preprocessing=PREPROCESSING)
    assert not list(tmp_path.iterdir())
    gluonkit.export_model(small_net(), tmp_path / "model", (1, 8, 8), pixels="NHWC",
                          preprocessing=PREPROCESSING)
    model = onnx.load(str(tmp_path / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert _dims(model.graph.input[0]) == ["batch", 8, 8, 1]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
