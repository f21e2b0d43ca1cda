"""gluonkit-serve in its own environment (onnxruntime, numpy 2, Pillow, no mxnet) against
gluonkit.predict in MXNet, on networks the recipes trained for a short run."""
import json
import os

import cv2
import mxnet as mx
import numpy as np
import pytest

import gluonkit
from gluonkit.data import digits
from gluonkit.recipes import classify, multitask
from image_files import pixels
from serve_env import run_serve, serve_json, serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow


def _digit_images(folder):
    """Digits of the test set as 8x8 PNGs, one twice as large and three of odd sizes (resized
    by the model's preprocessing), one as a JPEG and one in color (read as gray)."""
    folder.mkdir()
    test = digits(train=False)
    for i in range(8):
        cv2.imwrite(str(folder / f"{i}.png"), np.round(test[i][0][0] * 255).astype(np.uint8))
    large = np.round(test[8][0][0] * 255).astype(np.uint8).repeat(2, 0).repeat(2, 1)
    cv2.imwrite(str(folder / "large.png"), large)
    for width, height in [(13, 9), (500, 60), (37, 101)]:      # odd sizes, resized to 8x8
        cv2.imwrite(str(folder / f"{width}x{height}.png"), cv2.resize(large, (width, height)))
    cv2.imwrite(str(folder / "photo.jpg"), cv2.resize(pixels(8, 8, seed=1), (24, 16)))
    cv2.imwrite(str(folder / "color.png"), pixels(8, 8, seed=2))
    return folder


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    out = tmp_path_factory.mktemp("classify")
    classify.train(classify.parse_args(["--limit", "400", "--epochs", "2", "--batch-size", "32",
                                        "--out", str(out / "run"), "--no-progress"]))
    return out / "run" / "model", _digit_images(out / "images")


def assert_same_top(served, expected, tolerance=1e-4):
    assert [r["image"] for r in served] == [r["image"] for r in expected]
    for got, want in zip(served, expected):
        assert got.keys() == want.keys()
        for name in want["outputs"]:
            assert [t["class"] for t in got["outputs"][name]] == \
                [t["class"] for t in want["outputs"][name]], (got["image"], name)
            np.testing.assert_allclose([t["probability"] for t in got["outputs"][name]],
                                       [t["probability"] for t in want["outputs"][name]],
                                       atol=tolerance, err_msg=f"{got['image']} {name}")


def test_the_serving_environment_has_numpy_2_and_no_mxnet(serve_python):
    result = run_serve(serve_python, "--help")
    assert result.returncode == 0 and "MODEL.onnx" in result.stdout
    import subprocess

    probe = subprocess.run(
        [serve_python, "-c", "import importlib.util, numpy, sys, gluonkit.serve; "
         "print(numpy.__version__, importlib.util.find_spec('mxnet') is None, "
         "any(m.startswith('mxnet') for m in sys.modules))"],
        env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(gluonkit.__file__))),
        capture_output=True, text=True, timeout=120)
    version, no_mxnet, imported = probe.stdout.split()
    assert int(version.split(".")[0]) >= 2 and no_mxnet == "True" and imported == "False"


def test_recipe_classifier_served_equals_gluonkit_predict(serve_python, classifier):
    prefix, images = classifier
    assert (prefix.parent / "model.onnx").is_file()
    expected = gluonkit.predict(str(prefix), [str(images)], top_k=10)
    served = serve_json(serve_python, f"{prefix}.onnx", images, "--top-k", "10")
    assert_same_top(served, expected)
    # the text output is gluonkit-predict's, line for line
    text = run_serve(serve_python, f"{prefix}.onnx", images, "--top-k", "3", "--batch-size", "4")
    from gluonkit.results import format_results

    assert text.stdout.splitlines() == format_results(
        gluonkit.predict(str(prefix), [str(images)], top_k=3))


def test_recipe_multitask_every_head_is_a_named_output(serve_python, tmp_path):
    multitask.train(multitask.parse_args(["--epochs", "2", "--train-size", "320",
                                          "--out", str(tmp_path / "run"), "--no-progress"]))
    images = _digit_images(tmp_path / "images")
    expected = gluonkit.predict(str(tmp_path / "run" / "model"), [str(images)], top_k=2)
    served = serve_json(serve_python, tmp_path / "run" / "model.onnx", images, "--top-k", "2")
    assert list(served[0]["outputs"]) == ["digit", "parity", "aux"]
    assert_same_top(served, expected)


def test_bad_input_is_named_in_one_line(serve_python, classifier, tmp_path):
    prefix, images = classifier
    model = f"{prefix}.onnx"
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "cut.png").write_bytes((images / "0.png").read_bytes()[:60])
    (tmp_path / "notonnx.onnx").write_bytes(b"not a model")
    cases = [((model, tmp_path / "empty.png"), f"{tmp_path / 'empty.png'} is empty"),
             ((model, tmp_path / "cut.png"), f"{tmp_path / 'cut.png'} is cut short"),
             ((model, images / "large.png", "--max-image-pixels", "100"),
              f"{images / 'large.png'} is 16x16 = 256 pixels, above the limit of 100"),
             ((model, tmp_path / "missing.png"), "missing.png: no such image file"),
             ((tmp_path / "notonnx.onnx", images / "0.png"),
              f"{tmp_path / 'notonnx.onnx'} does not load as an ONNX model"),
             ((tmp_path / "none.onnx", images / "0.png"), f"{tmp_path / 'none.onnx'} does not exist"),
             ((model, images / "0.png", "--top-k", "0"), "gluonkit-serve: error: argument --top-k"),
             ((model, images / "0.png", "--top-kk", "3"), "--top-kk 3 (did you mean --top-k?)")]
    for args, message in cases:
        result = run_serve(serve_python, *args)
        assert result.returncode != 0, args
        lines = result.stderr.strip().splitlines()
        assert message in lines[-1] and "Traceback" not in result.stderr, (args, result.stderr)
        assert len(lines) == 1, (args, result.stderr)   # no usage block


def test_an_onnx_file_without_gluonkit_metadata_is_refused(serve_python, classifier, tmp_path):
    onnx = pytest.importorskip("onnx")
    prefix, images = classifier
    model = onnx.load(f"{prefix}.onnx")
    del model.metadata_props[:]
    onnx.save(model, str(tmp_path / "bare.onnx"))
    result = run_serve(serve_python, tmp_path / "bare.onnx", images / "0.png")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"gluonkit-serve: {tmp_path / 'bare.onnx'} carries no gluonkit metadata (class names, "
        "preprocessing): it was not written by gluonkit.export_model; export the model again "
        "with gluonkit (gluonkit.export_onnx(prefix)).")


def test_one_refused_image_is_reported_and_the_others_served(serve_python, classifier, tmp_path):
    prefix, images = classifier
    (tmp_path / "cut.png").write_bytes((images / "0.png").read_bytes()[:60])
    alone = run_serve(serve_python, f"{prefix}.onnx", images / "0.png", images / "1.png")
    mixed = run_serve(serve_python, f"{prefix}.onnx", images / "0.png", tmp_path / "cut.png",
                      images / "1.png")
    assert alone.returncode == 0 and mixed.returncode == 1
    assert mixed.stdout == alone.stdout                        # the good images, as alone
    assert mixed.stderr.strip() == f"gluonkit-serve: {tmp_path / 'cut.png'} is cut short: its " \
                                   "PNG data ends before the image does; copy the file again."


#: Run in the serving environment: gluonkit.serve's model of ``model.onnx`` on the three
#: inputs saved in ``case.npz``, outputs to ``got.npz``.
RUN_SEVERAL = """
import sys
import numpy as np
import gluonkit.serve
folder = sys.argv[1]
case = np.load(folder + "/case.npz")
model = gluonkit.serve.load(folder + "/model.onnx")
np.savez(folder + "/got.npz", *model.run(case["anchor"], case["positive"], case["negative"]))
"""


def test_a_network_of_several_inputs_runs_by_name_and_the_command_says_how(serve_python,
                                                                          tmp_path):
    import subprocess

    import mxnet as mx
    from triplet_net import Triplet

    mx.random.seed(3)
    net = Triplet()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    rng = np.random.RandomState(0)
    case = {name: rng.uniform(-1, 1, (5, 6)).astype(np.float32)
            for name in ("anchor", "positive", "negative")}
    expected = [o.asnumpy() for o in net(*(mx.nd.array(case[k]) for k in case))]
    gluonkit.export_model(net, str(tmp_path / "model"), input_shape={k: (6,) for k in case},
                          outputs={"distance": None, "embedding": None}, onnx=True)
    np.savez(tmp_path / "case.npz", **case)
    done = subprocess.run([serve_python, "-c", RUN_SEVERAL, str(tmp_path)], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.path.dirname(
                              os.path.dirname(gluonkit.__file__))))
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "got.npz")
    for i, want in enumerate(expected):
        np.testing.assert_allclose(got[f"arr_{i}"], want, rtol=1e-4, atol=1e-5)
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    result = run_serve(serve_python, tmp_path / "model.onnx", tmp_path / "photo.png")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"gluonkit-serve: {tmp_path / 'model.onnx'} takes 3 inputs (anchor, positive, negative), "
        "not image files; run it from Python with a batch per input: gluonkit.serve.load("
        f"{str(tmp_path / 'model.onnx')!r}).run(anchor, positive, negative).")


def test_dump_writes_the_tensors_and_outputs_another_implementation_checks_itself_by(
        serve_python, classifier, tmp_path):
    """Each dumped input is gluonkit.predict's tensor of the image, to the bit; each dumped
    output is what the MXNet network gives on it (to float32 noise), and the softmax of it
    the probabilities printed."""
    prefix, images = classifier
    dump = tmp_path / "conformance"
    served = serve_json(serve_python, str(prefix) + ".onnx", images, "--dump", dump)
    index = json.loads((dump / "index.json").read_text())
    assert [e["image"] for e in index] == [r["image"] for r in served]
    model = gluonkit.load_model(str(prefix))
    for entry, result in zip(index, served):
        tensor = np.load(dump / entry["input"], allow_pickle=False)
        expected = gluonkit.inference.preprocess(entry["image"], model.metadata["preprocessing"])
        np.testing.assert_array_equal(tensor, expected.asnumpy()[None])
        logits = np.load(dump / entry["outputs"]["class"], allow_pickle=False)
        np.testing.assert_allclose(logits, model.net(mx.nd.array(tensor)).asnumpy(), atol=1e-5)
        probabilities = np.exp(logits[0] - logits[0].max())
        probabilities /= probabilities.sum()
        assert result["top"][0]["probability"] == pytest.approx(probabilities.max(), abs=1e-6)
        assert entry["result"] == result and (entry["width"], entry["height"]) == \
            cv2.imread(entry["image"], cv2.IMREAD_UNCHANGED).shape[1::-1]
    again = run_serve(serve_python, str(prefix) + ".onnx", images, "--dump", dump)
    assert again.returncode == 1 and "holds conformance data already" in again.stderr
