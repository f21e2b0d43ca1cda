"""benchmarks/dist.py --quick: one process and loopback dist_sync jobs, every run reported."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import CLONE_ENV as ENV
COMMAND = [sys.executable, "-m", "benchmarks.dist"]


@pytest.mark.slow
def test_quick_run_reports_every_run_and_its_start_time(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    command = COMMAND + ["--quick", "--out", str(tmp_path / "dist.json"),
               "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "dist.json") as f:
        rows = {r["name"]: r for r in json.load(f)["rows"]}
    assert set(rows) == {"single", "dist1", "dist2"}
    assert [rows[n]["workers"] for n in ("single", "dist1", "dist2")] == [0, 1, 2]
    for row in rows.values():
        for value in (row["samples_per_s"], row["min"], row["max"], row["ratio"], row["start"]["median"]):
            assert math.isfinite(value) and value > 0, row
        assert row["min"] <= row["samples_per_s"] <= row["max"]
    assert rows["single"]["ratio"] == 1.0
    for name in ("dist1", "dist2"):
        assert rows[name]["kvstore"] == "dist_sync"
        assert 0 < rows[name]["ready"]["median"] <= rows[name]["start"]["median"]
    assert rows["dist2"]["omp_num_threads"] == str(max(1, os.cpu_count() // 2))
    text = readme.read_text()
    section = text.split("<!-- dist:begin -->")[1].split("<!-- dist:end -->")[0]
    assert text.startswith("# Benchmarks") and "| 2 workers + 1 server, dist_sync |" in section
