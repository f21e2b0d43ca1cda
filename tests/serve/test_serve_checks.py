"""gluonkit-serve and gluonkit.serve refuse what cannot be served right, as gluonkit-predict
and gluonkit.predict do: non-finite outputs, a model.onnx that is not its export's, class
names that do not fit the graph, too many threads, options of the other kind of model."""
import json
import os
import re
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import ROOT
from image_files import pixels
from serve_env import run_serve, serve_python  # noqa: F401  (a fixture)

onnx = pytest.importorskip("onnx")

PREPROCESSING = {"channels": 3, "resize": [8, 8], "mean": [0.5] * 3, "std": [0.25] * 3}


def _export(folder, weight=None, classes=list("abc"), onnx=None):
    """A small classifier exported to ``folder/model`` (its last weights set to ``weight``)."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, activation="relu"), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier(rnd_type="gaussian"))
    net(mx.nd.zeros((1, 3, 8, 8)))
    if weight is not None:
        net[1].weight.set_data(mx.nd.full(net[1].weight.shape, weight))
    folder.mkdir(exist_ok=True)
    gluonkit.export_model(net, folder / "model", (3, 8, 8), outputs=classes,
                          preprocessing=PREPROCESSING, onnx=onnx)
    return folder / "model"


def _assert_refused(result, message):
    """The command ended with status 1 and printed ``message`` alone."""
    assert result.returncode == 1, result.stdout
    assert result.stderr.strip() == message


def _image(folder, width=13, height=9):
    path = folder / f"image-{width}x{height}.png"
    cv2.imwrite(str(path), pixels(height, width))
    return path


def _predict_command(*args):
    return subprocess.run([sys.executable, "-m", "gluonkit.recipes.predict", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def _serve_python(python, code, *args):
    """Run ``code`` in the serving environment; its stdout (it must succeed)."""
    result = subprocess.run([python, "-c", code, *map(str, args)], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_non_finite_outputs_end_both_commands_naming_model_and_image(serve_python, tmp_path):
    prefix, image = _export(tmp_path / "nan", weight=float("nan")), _image(tmp_path)
    served = run_serve(serve_python, f"{prefix}.onnx", image)
    predicted = _predict_command("--model", prefix, image)
    for result, model in ((served, f"{prefix}.onnx"), (predicted, f"{prefix}-0000.params")):
        assert result.returncode == 1 and result.stdout == "", result.stdout
        assert re.search(
            rf"{re.escape(model)} gives non-finite \S.* \(NaN or infinity: \d+ of \d+ values\) for "
            rf"{re.escape(str(image))}: its weights are damaged, or its training diverged or was too "
            r"short; export it again from a good checkpoint, or train longer or at a lower learning rate\.$",
            result.stderr.strip().splitlines()[-1]), result.stderr
        assert "Traceback" not in result.stderr


def test_a_model_onnx_that_is_not_its_export_s_is_refused(serve_python, tmp_path):
    prefix, other = _export(tmp_path / "one"), _export(tmp_path / "two", weight=0.5)
    (tmp_path / "one" / "model.onnx").write_bytes((tmp_path / "two" / "model.onnx").read_bytes())
    result = run_serve(serve_python, f"{prefix}.onnx", _image(tmp_path))
    _assert_refused(result,
        f"gluonkit-serve: {prefix}.onnx is not the file {prefix}.json was exported with (its "
        "SHA-256 differs): it is damaged, cut short, or from another export; copy the files of "
        "one export together, or export the model again with gluonkit "
        "(gluonkit.export_onnx(prefix)).")
    # an export without an ONNX file under the prefix of one with: the old model.onnx is refused
    _export(tmp_path / "one", onnx=False)
    result = run_serve(serve_python, f"{prefix}.onnx", _image(tmp_path))
    _assert_refused(result,
        f"gluonkit-serve: {prefix}.onnx is not from the export {prefix}.json describes: that export "
        "wrote no ONNX file (it was exported with onnx=False, or its ONNX conversion was refused), "
        "so this one is left from an earlier export; delete it, or export the model again with "
        "gluonkit (gluonkit.export_onnx(prefix)).")
    # alone, or beside a JSON file that is not an export's metadata, it is served as it is
    os.rename(f"{other}.onnx", tmp_path / "alone.onnx")
    assert run_serve(serve_python, tmp_path / "alone.onnx", _image(tmp_path)).returncode == 0
    (tmp_path / "alone.json").write_text('["not", "metadata"]')
    assert run_serve(serve_python, tmp_path / "alone.onnx", _image(tmp_path)).returncode == 0


def test_class_names_that_do_not_fit_the_graph_are_refused_on_load(serve_python, tmp_path):
    prefix = _export(tmp_path / "run")
    model = onnx.load(f"{prefix}.onnx")
    description = json.loads(model.metadata_props[0].value)
    description["outputs"][0]["classes"] = list("abcde")
    model.metadata_props[0].value = json.dumps(description)
    onnx.save(model, str(tmp_path / "five.onnx"))
    result = run_serve(serve_python, tmp_path / "five.onnx", _image(tmp_path))
    _assert_refused(result,
        f"gluonkit-serve: {tmp_path / 'five.onnx'} names 5 classes for its output 'class', whose "
        "graph gives 3 scores; export the model again with gluonkit (gluonkit.export_onnx(prefix)).")


def test_threads_beyond_the_cpus_are_refused(serve_python, tmp_path):
    prefix, image = _export(tmp_path / "run"), _image(tmp_path)
    cpus = len(os.sched_getaffinity(0))
    result = run_serve(serve_python, f"{prefix}.onnx", image, "--threads", cpus + 1)
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f"gluonkit-serve: error: argument --threads: the value must be at most {cpus}, the CPUs "
        f"this process may use, got {cpus + 1}.")
    assert run_serve(serve_python, f"{prefix}.onnx", image, "--threads", cpus).returncode == 0
    out = _serve_python(serve_python, """
import sys, gluonkit.serve
for threads in (100000, '2'):
    try:
        gluonkit.serve.load(sys.argv[1], threads=threads)
    except (TypeError, ValueError) as err:
        print(type(err).__name__, err)
""", f"{prefix}.onnx")
    assert out.splitlines() == [
        f"ValueError threads must be at most {cpus}, the CPUs this process may use, got 100000.",
        "TypeError threads must be a positive integer, got '2'."]


def test_options_of_the_other_kind_of_model_are_refused_as_gluonkit_predict_does(
        serve_python, tmp_path):
    prefix, image = _export(tmp_path / "run"), _image(tmp_path)
    for option in (["--score-threshold", "0.3"], ["--top-k", "1.5"], ["--top-k", "-1"]):
        served = run_serve(serve_python, prefix.parent / "model.onnx", image, *option)
        predicted = _predict_command("--model", prefix.parent, image, *option)
        assert served.returncode == predicted.returncode != 0, option
        assert served.stderr.splitlines()[-1].replace("gluonkit-serve", "gluonkit-predict") \
            .replace(f"{prefix.parent / 'model.onnx'}", str(prefix.parent)) \
            == predicted.stderr.splitlines()[-1], option


def test_detector_options_and_threshold_line_are_gluonkit_predict_s(serve_python, tmp_path):
    from gluoncv import model_zoo

    net = model_zoo.get_model("yolo3_mobilenet0.25_custom", classes=["circle", "square"],
                              pretrained=False, pretrained_base=False)
    net.initialize()
    prefix = tmp_path / "model"
    gluonkit.export_model(net, prefix, (3, 64, 64), outputs=["circle", "square"],
                          kind="detector", preprocessing=dict(PREPROCESSING, resize=[64, 64]))
    image = _image(tmp_path, 50, 31)
    lines = {}
    for option in ([], ["--score-threshold", "0.2"], ["--top-k", "3"]):
        served = run_serve(serve_python, f"{prefix}.onnx", image, *option)
        predicted = _predict_command("--model", prefix, image, *option)
        assert served.returncode == predicted.returncode, (option, served.stderr)
        assert served.stderr.replace("gluonkit-serve", "gluonkit-predict") \
            .replace(f"{prefix}.onnx", str(prefix)) == predicted.stderr, option
        lines[" ".join(option)] = served.stderr.strip()
    assert lines == {"": "boxes scoring 0.5 or more (the default)",
                     "--score-threshold 0.2": "boxes scoring 0.2 or more (--score-threshold)",
                     "--top-k 3": f"gluonkit-serve: --top-k 3: {prefix}.onnx is a detector, which "
                                  "prints every box above --score-threshold; drop --top-k or pass "
                                  "--score-threshold S."}


def test_the_api_takes_a_generator_and_refuses_a_negative_threshold(serve_python, tmp_path):
    prefix = _export(tmp_path / "run")
    images = [_image(tmp_path, 13, 9), _image(tmp_path, 20, 7)]
    out = _serve_python(serve_python, """
import json, sys, gluonkit.serve
model, images = sys.argv[1], sys.argv[2:]
print(json.dumps(gluonkit.serve.predict(model, (p for p in images), top_k=2)))
try:
    gluonkit.serve.predict(model, images, score_threshold=-1)
except ValueError as err:
    print(err)
""", f"{prefix}.onnx", *images)
    results, refused = out.splitlines()
    expected = gluonkit.predict(str(prefix), (str(p) for p in images), top_k=2)
    assert [r["image"] for r in json.loads(results)] == [str(p) for p in images]
    for got, want in zip(json.loads(results), expected):
        assert [t["class"] for t in got["top"]] == [t["class"] for t in want["top"]]
        np.testing.assert_allclose([t["probability"] for t in got["top"]],
                                   [t["probability"] for t in want["top"]], atol=1e-4)
    assert refused == "score_threshold must be a finite number >= 0.0, got -1."
    with pytest.raises(ValueError, match="score_threshold must be a finite number >= 0.0, got -1"):
        gluonkit.predict(str(prefix), [str(images[0])], score_threshold=-1)


def test_a_run_folder_given_for_the_model_file_is_named(serve_python, tmp_path):
    prefix, image = _export(tmp_path / "run"), _image(tmp_path)
    result = run_serve(serve_python, prefix.parent, image)
    _assert_refused(result,
        f"gluonkit-serve: {prefix.parent} is a directory, not a model file; pass the model "
        f"file inside it, {prefix.parent / 'model.onnx'}.")


def test_export_onnx_takes_the_symbol_file_or_the_run_folder(tmp_path):
    prefix = _export(tmp_path / "run")
    os.remove(f"{prefix}.onnx")
    assert gluonkit.export_onnx(f"{prefix}-symbol.json") == f"{prefix}.onnx"
    os.remove(f"{prefix}.onnx")
    assert gluonkit.export_onnx(prefix.parent) == f"{prefix}.onnx"
    assert os.path.isfile(f"{prefix}.onnx")
