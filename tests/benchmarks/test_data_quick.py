"""benchmarks/data.py --quick runs end to end, and both pipelines deliver the same batches."""
import json
import subprocess
import sys

import numpy as np

from conftest import CLONE_ENV as ENV

from benchmarks.data import loaders, write_voc  # noqa: E402


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
         ("pipeline", "gluoncv"), ("pipeline", "gluonkit"), ("pipeline CPU", "gluoncv"),
         ("pipeline CPU", "gluonkit")]} | {
        ("load_coco", "200 images", c) for c in ("load_coco", "pycocotools + headers")}
    assert all(r["median"] > 0 for r in rows)
    assert "STALE-SECTION" not in readme.read_text() and "| pipeline | 96x96 | 0 | gluonkit |" in readme.read_text()


def test_the_two_pipelines_do_the_same_work_and_give_the_same_batches(tmp_path):
    write_voc(str(tmp_path), 10, 50, 40)
    for workers in (0, 2):
        made = loaders(str(tmp_path), 32, workers, batch_size=4)
        theirs, ours = (list(made[name]) for name in ("gluoncv", "gluonkit"))
        assert [b[0].shape for b in ours] == [(4, 3, 32, 32), (4, 3, 32, 32), (2, 3, 32, 32)]
        for (image, label), (their_image, their_label) in zip(ours, theirs):
            np.testing.assert_array_equal(image.asnumpy(), their_image.asnumpy())
            np.testing.assert_array_equal(label.asnumpy(), their_label.asnumpy())
