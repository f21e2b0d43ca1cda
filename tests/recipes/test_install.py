"""The wheel, installed into a fresh virtual environment, runs the commands from anywhere.

Builds the wheel from a copy of the source tree (``pip wheel --no-deps``), installs it with
``--no-deps --no-index`` into a new venv that reaches this interpreter's installed
dependencies (mxnet, gluoncv, ...) through a ``.pth`` file written at test time, then, from an
empty directory: ``gluonkit-classify`` trains and exports, the exported model loads in a
process that never imports gluonkit and predicts like the trained network, and
``gluonkit-predict`` classifies PNG files.
"""
import glob
import json
import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluonkit import Checkpoint
from gluonkit.data import digits
from gluonkit.recipes.models import small_cnn

from conftest import ROOT

LOADER = os.path.join(ROOT, "tests", "exported_loader.py")
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "runs",
                                     "__pycache__", ".pytest_cache", ".hypothesis")

pytestmark = pytest.mark.slow


def run(argv, cwd, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=900, **kwargs)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin directory, wheel path): the wheel built and installed, not editable."""
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "-w", str(tmp / "dist"), str(source)], tmp)
    wheel, = glob.glob(str(tmp / "dist" / "gluonkit-*.whl"))
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  tmp).stdout.strip()
    # the dependencies already installed for this interpreter (not its gluonkit: a plain
    # path line does not run the editable install's import hook)
    with open(os.path.join(purelib, "dependencies.pth"), "w") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", wheel], tmp)
    return env_dir / "bin", wheel


def test_wheel_carries_the_license_the_data_and_the_recipes(installed):
    _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "gluonkit/data/digits.csv.gz" in names
    assert "gluonkit/recipes/classify.py" in names and "gluonkit/recipes/predict.py" in names
    assert "gluonkit/recipes/detect.py" in names
    assert any(n.endswith(".dist-info/LICENSE") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for command in ("gluonkit-classify", "gluonkit-multitask", "gluonkit-detect", "gluonkit-predict",
                    "gluonkit-launch", "gluonkit-serve", "gluonkit-bench"):
        assert command in entry_points


def test_commands_from_an_empty_directory(installed, tmp_path):
    bin_dir, _ = installed
    work = tmp_path / "empty"
    work.mkdir()
    located = run([str(bin_dir / "python"), "-c", "import gluonkit; print(gluonkit.__file__)"], work)
    assert located.stdout.strip().startswith(str(bin_dir.parent))       # the wheel's copy
    done = run([str(bin_dir / "gluonkit-classify"), "--epochs", "1", "--limit", "200", "--out", "D",
                "--no-progress"], work)
    assert "test accuracy: " in done.stdout
    out = work / "D"
    assert {"model-symbol.json", "model-0000.params", "model.json", "args.json"} <= set(os.listdir(out))

    # the trained network (the best checkpoint, which the export holds) against the export
    net = small_cnn(10)
    net.initialize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    Checkpoint(str(out / "checkpoints")).load(net, best=True)
    test = digits(train=False)
    x = np.stack([test[i][0] for i in range(32)])
    np.save(tmp_path / "x.npy", x)
    loaded = json.loads(run([str(bin_dir / "python"), LOADER, str(out / "model"),
                             str(tmp_path / "x.npy")], work).stdout.strip().splitlines()[-1])
    assert loaded["gluonkit"] is False
    expected = net(mx.nd.array(x)).asnumpy()
    for route in ("block", "module"):
        np.testing.assert_allclose(np.array(loaded[route][0]), expected, rtol=1e-5, atol=1e-5)
        assert (np.array(loaded[route][0]).argmax(1) == expected.argmax(1)).all()

    pixels = [np.round(x[i, 0] * 255).astype(np.uint8) for i in range(4)]
    for i, pixel in enumerate(pixels):
        cv2.imwrite(str(work / f"{i}.png"), pixel)
    done = run([str(bin_dir / "gluonkit-predict"), "--model", "D/model", "0.png", "1.png", "2.png",
                "3.png", "--top-k", "3", "--json"], work)
    results = json.loads(done.stdout)
    logits = net(mx.nd.array(np.stack(pixels)[:, None] / 255.0)).asnumpy()
    assert [r["image"] for r in results] == [f"{i}.png" for i in range(4)]
    assert [r["top"][0]["class"] for r in results] == [str(c) for c in logits.argmax(1)]
    text = run([str(bin_dir / "gluonkit-predict"), "--model", "D/model", "0.png"], work).stdout
    assert text.startswith(f"0.png: {results[0]['top'][0]['class']} (")
