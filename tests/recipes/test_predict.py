"""gluonkit.predict and gluonkit-predict on PNG files, against the trained network."""
import json
import os
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np
import pytest

import gluonkit
from gluonkit.data import digits
from gluonkit import Checkpoint
from gluonkit.recipes import classify, predict as predict_cmd
from gluonkit.recipes.models import small_cnn


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    classify.train(classify.parse_args(["--limit", "600", "--epochs", "3", "--batch-size", "32",
                                        "--warmup-epochs", "0.5", "--out", str(out),
                                        "--no-progress"]))
    net = small_cnn(10)            # the exported model is the best checkpoint
    net.initialize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    Checkpoint(out / "checkpoints").load(net, best=True)
    images = out / "images"
    images.mkdir()
    test = digits(train=False)
    pixels = []
    for i in range(6):
        pixel = np.round(test[i][0][0] * 255).astype(np.uint8)
        cv2.imwrite(str(images / f"{i}.png"), pixel)
        pixels.append(pixel)
    return out, net, images, np.stack(pixels)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_predict_from_python_equals_the_trained_network(trained):
    out, net, images, pixels = trained
    results = gluonkit.predict(str(out / "model"), [str(images)], top_k=3)
    assert [r["image"] for r in results] == [str(images / f"{i}.png") for i in range(6)]
    probabilities = softmax(net(mx.nd.array(pixels[:, None] / 255.0)).asnumpy())
    for result, p in zip(results, probabilities):
        best = np.argsort(-p, kind="stable")[:3]
        assert [t["class"] for t in result["top"]] == [str(c) for c in best]
        np.testing.assert_allclose([t["probability"] for t in result["top"]], p[best], rtol=1e-4)
    # arrays work too (HWC), and give the same answers
    arrays = gluonkit.predict(str(out / "model"), list(pixels[:, :, :, None]), top_k=3)
    assert [a["top"] for a in arrays] == [r["top"] for r in results]
    wide = gluonkit.predict(out / "model", list(pixels.astype(np.int64)), top_k=3)   # path-like too
    assert [a["top"] for a in wide] == [r["top"] for r in results]
    assert gluonkit.predict(str(out / "model"), images / "0.png", top_k=3)[0]["top"] == results[0]["top"]


def test_arrays_that_are_not_8_bit_pixels_are_refused(trained):
    out, _, _, pixels = trained
    for bad, dtype in ((pixels / 255.0, "float64"), (pixels.astype(np.int32) * 2, "int32")):
        with pytest.raises(ValueError, match=f"uint8.*dtype {dtype}.*astype"):
            gluonkit.predict(str(out / "model"), list(bad))   # floats were read as 0: all blank
    with pytest.raises(ValueError, match=r"one image per array.*\(6, 8, 8, 1\).*list"):
        gluonkit.predict(str(out / "model"), pixels[..., None])


def test_command_prints_text_and_json(trained, capsys):
    out, _, images, _ = trained
    expected = gluonkit.predict(str(out / "model"), [str(images / "0.png"), str(images / "1.png")],
                                top_k=2)
    predict_cmd.main(["--model", str(out / "model"), str(images / "0.png"), str(images / "1.png"),
                      "--top-k", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"{r['image']}: " + ", ".join(f"{t['class']} ({t['probability']:.3f})"
                                                   for t in r["top"]) for r in expected]
    predict_cmd.main(["--model", str(out / "model"), str(images / "0.png"), "--json"])
    assert json.loads(capsys.readouterr().out)[0]["top"][0] == expected[0]["top"][0]


def test_command_errors_are_one_line(trained, tmp_path):
    out, _, _, _ = trained
    for argv, message in ((["--model", str(out / "model"), str(tmp_path / "nothing.png")],
                           "no such image file or directory"),
                          (["--model", str(tmp_path / "model"), str(out)], "does not exist"),
                          (["--model", str(out / "model"), str(out / "args.json")],
                           "args.json cannot be decoded as an image")):
        done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.predict", *argv],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE"))
        assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.filterwarnings("ignore:Skipping")   # aux is trained on every 3rd batch only
def test_multitask_model_predicts_every_head(tmp_path):
    from gluonkit.recipes import multitask

    multitask.train(multitask.parse_args(["--epochs", "1", "--train-size", "64", "--out",
                                          str(tmp_path), "--no-progress"]))
    image = np.zeros((8, 8), dtype=np.uint8)
    result = gluonkit.predict(str(tmp_path / "model"), [image], top_k=1)[0]
    assert list(result["outputs"]) == ["digit", "parity", "aux"]
    assert result["outputs"]["parity"][0]["class"] in ("even", "odd")
    assert predict_cmd.format_results([result])[0].startswith("0: digit: ")


def test_an_export_copied_under_another_prefix_loads_from_its_own_files(trained, tmp_path):
    """Copied as MXNet checkpoints are (digits-symbol.json, digits-0000.params, digits.json),
    the model loads from the copy's files, not from the names it was exported under."""
    out, _, images, _ = trained
    for name in ("model-symbol.json", "model-0000.params", "model.json"):
        (tmp_path / name.replace("model", "digits")).write_bytes((out / name).read_bytes())
    expected = gluonkit.predict(str(out / "model"), [str(images)], top_k=3)
    assert gluonkit.predict(str(tmp_path / "digits"), [str(images)], top_k=3) == expected
    (tmp_path / "digits-0000.params").unlink()
    with pytest.raises(FileNotFoundError, match="digits-0000.params"):
        gluonkit.load_model(str(tmp_path / "digits"))
