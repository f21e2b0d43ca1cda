"""python -m benchmarks.serving --quick runs end to end (MXNet and the serving environment)
and writes what it promises."""
import json
import shutil
import subprocess
import sys

from conftest import CLONE_ENV as ENV
from serve_env import serve_python  # noqa: F401  (a fixture)


def test_quick_run_times_every_contestant(tmp_path, serve_python):
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.serving", "--quick", "--serve-python",
                           serve_python, "--out", str(tmp_path / "serving.json"),
                           "--readme", str(readme)], cwd=str(tmp_path), env=ENV,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "serving.json").read_text())["rows"]
    assert {(r["model"], r["batch"], r["contestant"]) for r in rows} == {
        (model, batch, contestant) for model in ("cnn", "yolo3_mobilenet0.25_custom")
        for batch in (1, 16) for contestant in ("symbolblock", "module", "onnxruntime",
                                                "onnxruntime-uint8")
        + (("onnxruntime-node",) if shutil.which("node") else ())}
    for row in rows:
        assert row["ms_min"] <= row["ms_per_call"] <= row["ms_max"]
        assert abs(row["images_per_s"] * row["ms_per_call"] / 1e3 - row["batch"]) < 1e-6 * row["batch"]
    text = readme.read_text()
    assert "<!-- serving:begin -->" in text and "| cnn | 16 | onnxruntime |" in text
