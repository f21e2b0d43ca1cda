"""benchmarks/data.py --quick runs end to end, and both pipelines deliver the same batches."""
import json
import subprocess
import sys

import numpy as np

from conftest import CLONE_ENV as ENV

from benchmarks.data import _loader, write_voc  # noqa: E402
from gluoncv.data import CustomVOCDetectionBase
from gluonkit.data import load_voc


def test_quick_run_writes_every_row(tmp_path):
    out, readme = tmp_path / "data.json", tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\n<!-- data:begin -->\nSTALE-SECTION\n<!-- data:end -->\n")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.data", "--quick", "--out", str(out),
                           "--readme", str(readme)], cwd=str(tmp_path),
                          env=dict(ENV, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["measure"], r["image"], r["contestant"]) for r in rows} == {
        (m, i, c) for i in ("96x96", "400x300") for m, c in
        [("read", "read_image"), ("read", "MXNet decode, waited"), ("read", "mx.image.imread"),
         ("pipeline", "gluoncv"), ("pipeline", "gluonkit")]}
    assert all(r["median"] > 0 for r in rows)
    assert "STALE-SECTION" not in readme.read_text() and "| pipeline | 96x96 | 0 | gluonkit |" in readme.read_text()


def test_the_two_pipelines_give_the_same_images_and_labels(tmp_path):
    write_voc(str(tmp_path), 6, 50, 40)
    ours = load_voc(str(tmp_path), splits=("train",), classes=("box",))[0][0]
    theirs = CustomVOCDetectionBase(classes=("box",), root=str(tmp_path), splits=(("", "train"),))
    for i in range(len(ours)):
        assert (ours[i][0].asnumpy() == theirs[i][0].asnumpy()).all()
        np.testing.assert_allclose(ours[i][1], theirs[i][1])
    assert len(list(_loader(ours, 32, 0))) == 1
