"""python -m benchmarks.detect --quick runs end to end and writes what it promises."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import CLONE_ENV as ENV, ROOT

CONTESTANTS = ["gluoncv-1", "gluonkit-1", "gluoncv-2", "gluonkit-2", "gluoncv-2-acc", "gluonkit-2-acc",
               "gluoncv-rcnn", "gluonkit-rcnn", "gluoncv-rcnn-batch"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("detect")
    readme = out / "README.md"
    readme.write_text("# Benchmarks\n\nintro\n\n<!-- varshape:begin -->\nother\n<!-- varshape:end -->\n")
    env = dict(ENV, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.detect", "--quick",
                           "--out", str(out / "detect.json"), "--readme", str(readme)],
                          cwd=str(out), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "detect.json").read_text()), readme.read_text(), sorted(os.listdir(out))


def test_every_contestant_trains_every_image(quick_run):
    results, _, _ = quick_run
    rows = results["rows"]
    assert [r["name"] for r in rows] == CONTESTANTS
    samples = results["options"]["samples"]
    for row in rows:
        assert len(row["runs"]) == results["repeats"] == 2
        assert row["samples_per_run"] == samples, row["name"]
        assert row["min"] <= row["samples_per_s"] <= row["max"]
        assert row["samples_per_s"] == pytest.approx(np.median(row["runs"]))
        assert row["ratio"] == pytest.approx(row["samples_per_s"] / rows[0]["samples_per_s"])
    assert results["machine"]["omp_num_threads"] == "1"


def test_readme_section_is_replaced_and_the_rest_kept(quick_run):
    _, readme, files = quick_run
    assert readme.startswith("# Benchmarks\n\nintro\n\n<!-- varshape:begin -->\nother\n")
    assert readme.count("<!-- detect:begin -->") == 1 and readme.count("<!-- detect:end -->") == 1
    assert "## Detection training step" in readme and "| contestant |" in readme
    assert "- gluonkit.fit + batch_fn vs GluonCV's loop, 1 device: **" in readme
    assert "Trainer(accumulate=2)" in readme
    assert "- Faster R-CNN: gluonkit.fit + FasterRCNNBatch vs GluonCV's ForwardBackwardTask loop: **" in readme
    assert "- Faster R-CNN: gluonkit at 1 image per device, accumulated, vs GluonCV's whole padded" in readme
    assert files == ["README.md", "detect.json"]


def test_bad_options_are_refused():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.detect", "--quick", "--batch-size", "3"],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--batch-size must be even" in proc.stderr
