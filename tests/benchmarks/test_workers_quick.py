"""benchmarks/workers.py --quick: one process and 2 dist_sync workers, compared export by export."""
import json
import subprocess
import sys

import pytest

from conftest import CLONE_ENV as ENV


@pytest.mark.slow
def test_quick_run_compares_every_run_with_the_single_process(tmp_path):
    page = tmp_path / "distributed.md"
    page.write_text("# Distributed\n")
    command = [sys.executable, "-m", "benchmarks.workers", "--quick", "--out", str(tmp_path / "workers.json"),
               "--readme", str(page)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads((tmp_path / "workers.json").read_text())["runs"]
    assert list(runs) == ["one", "dist2"] and runs["dist2"]["workers"] == 2
    assert runs["one"]["largest_difference"] == 0.0
    assert runs["dist2"]["largest_difference"] < 1e-4                  # the same model
    assert runs["dist2"]["test_accuracy"] == runs["one"]["test_accuracy"]
    text = page.read_text()
    assert "<!-- workers:begin -->" in text and "| dist_sync | 2 |" in text
