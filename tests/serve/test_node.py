"""The Node.js example of docs/export.md, run as pasted on onnxruntime-node, turns the inputs
that gluonkit-serve --dump wrote into gluonkit-serve's results: the recipe's classifier to
1e-5, YOLOv3's and SSD's boxes (class equal, score within 1e-5, corners within 1e-3 px).
Skipped, with the reason, where node or npm is missing or onnxruntime-node cannot be
installed (GLUONKIT_REQUIRE_NODE_TESTS=1, as CI sets it, makes that a failure)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks.serving_env import node_modules
from conftest import ROOT
from gluonkit.recipes import classify, detect
from serve_env import serve_json, serve_python  # noqa: F401  (a fixture)
from test_readme import fenced_blocks

pytestmark = pytest.mark.slow
REQUIRE = "GLUONKIT_REQUIRE_NODE_TESTS"


@pytest.fixture(scope="module")
def node_path():
    """NODE_PATH for onnxruntime-node."""
    try:
        if shutil.which("node") is None or shutil.which("npm") is None:
            raise FileNotFoundError("node or npm is not installed")
        return node_modules()
    except (OSError, subprocess.SubprocessError) as err:
        detail = (getattr(err, "stderr", b"") or b"").decode(errors="replace").strip()[-300:]
        message = f"onnxruntime-node is not available ({err}; {detail})"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{message}; {REQUIRE}=1 forbids skipping.")
        pytest.skip(message)


def _example(folder):
    """The javascript block of docs/export.md, as a file."""
    code, = [c for lang, _, c in fenced_blocks((Path(ROOT) / "docs" / "export.md").read_text())
             if lang == "javascript"]
    path = folder / "predict.js"
    path.write_text(code)
    return path


def _run_node(serve_python, node_path, tmp_path, out, images, threshold=None):
    """gluonkit-serve's results on ``images`` (dumped), and the example's on the dump (at the
    score ``threshold`` where given, else the model's)."""
    dump = tmp_path / "dump"
    chosen = [] if threshold is None else ["--score-threshold", str(threshold)]
    served = serve_json(serve_python, out / "model.onnx", images, "--dump", dump, *chosen)
    done = subprocess.run(["node", str(_example(tmp_path)), str(out / "model.onnx"),
                           str(out / "model.json"), str(dump)]
                          + ([] if threshold is None else ["5", str(threshold)]),
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NODE_PATH=node_path))
    assert done.returncode == 0, done.stderr
    return served, json.loads(done.stdout)


def _digits(folder):
    import cv2
    from gluonkit.data import digits

    folder.mkdir()
    test = digits(train=False)
    for i in range(6):
        image = np.round(test[i][0][0] * 255).astype(np.uint8)
        cv2.imwrite(str(folder / f"{i}.png"), cv2.resize(image, (8 + 5 * i, 8 + 3 * i)))
    return folder


def test_node_example_gives_the_classifier_s_probabilities(serve_python, node_path, tmp_path):
    out = tmp_path / "run"
    classify.train(classify.parse_args(["--limit", "400", "--epochs", "2", "--batch-size", "32",
                                        "--out", str(out), "--no-progress"]))
    served, got = _run_node(serve_python, node_path, tmp_path, out, _digits(tmp_path / "images"))
    assert [r["image"] for r in got] == [r["image"] for r in served]
    for mine, theirs in zip(got, served):
        assert [t["class"] for t in mine["top"]] == [t["class"] for t in theirs["top"]]
        np.testing.assert_allclose([t["probability"] for t in mine["top"]],
                                   [t["probability"] for t in theirs["top"]], atol=1e-5)


# (as tests/serve/test_detectors.py: SSD's boxes after four epochs score under its run's
# threshold, so both take 0.01)
@pytest.mark.parametrize("model, options, threshold", [
    ("yolo3_mobilenet0.25_custom", ["--limit", "8", "--epochs", "1", "--batch-size", "4",
                                    "--lr", "0.0001"], None),
    ("ssd_300_mobilenet0.25_custom", ["--limit", "64", "--epochs", "4", "--batch-size", "8"],
     0.01)])
def test_node_example_finds_the_detector_s_boxes(serve_python, node_path, tmp_path, model,
                                                 options, threshold):
    from test_detectors import _images as shapes_images

    out = tmp_path / "run"
    detect.train(detect.parse_args([*options, "--model", model, "--image-size", "96",
                                    "--out", str(out), "--no-progress"]))
    images = shapes_images(tmp_path / "images", [(96, 96), (500, 60), (61, 97), (131, 77),
                                                 (97, 33), (45, 45)])
    served, got = _run_node(serve_python, node_path, tmp_path, out, images, threshold)
    assert sum(len(r["boxes"]) for r in served) >= 2          # the outputs are not trivial
    for mine, theirs in zip(got, served):
        assert mine["image"] == theirs["image"] and len(mine["boxes"]) == len(theirs["boxes"])
        for a, b in zip(mine["boxes"], theirs["boxes"]):
            assert a["class"] == b["class"] and abs(a["score"] - b["score"]) <= 1e-5
            np.testing.assert_allclose(a["box"], b["box"], atol=1e-3)
