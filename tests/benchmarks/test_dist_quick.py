"""benchmarks/dist.py --quick: one process, a loopback dist_sync job and 2 Horovod ranks, every run reported."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import CLONE_ENV as ENV
COMMAND = [sys.executable, "-m", "benchmarks.dist"]
REQUIRE = "GLUONKIT_REQUIRE_HOROVOD_TESTS"


def _horovod():
    """Whether Horovod is here; where it must be (CI), its absence fails the test."""
    here = (importlib.util.find_spec("horovod") is not None
            and os.path.exists(os.path.join(os.path.dirname(sys.executable), "horovodrun")))
    if not here and os.environ.get(REQUIRE) == "1":
        pytest.fail(f"Horovod is not installed, and {REQUIRE}=1: build it with `make horovod`.")
    return here


@pytest.mark.slow
def test_quick_run_reports_every_run_its_communication_and_its_start_time(tmp_path):
    horovod = _horovod()
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    command = COMMAND + ["--quick", "--nets", "cnn", "--out", str(tmp_path / "dist.json"), "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "dist.json") as f:
        rows = {r["name"]: r for r in json.load(f)["rows"]}
    jobs = ["dist2"] + (["horovod2"] if horovod else [])
    assert set(rows) == {"single", *jobs}
    assert {r["net"] for r in rows.values()} == {"cnn"}
    assert rows["single"]["workers"] == 0 and rows["single"]["ratio"] == 1.0
    for row in rows.values():
        for value in (row["samples_per_s"], row["min"], row["max"], row["ratio"], row["start"]["median"],
                      row["update_ms"]):
            assert math.isfinite(value) and value > 0, row
        assert row["min"] <= row["samples_per_s"] <= row["max"]
        assert row["global_batch"] == rows["single"]["global_batch"]   # the same global batch everywhere
    for name in jobs:
        assert rows[name]["workers"] == 2 and rows[name]["batch_per_worker"] == rows[name]["global_batch"] // 2
        assert math.isfinite(rows[name]["communication_ms"]) and math.isfinite(rows[name]["communication_share"])
        assert rows[name]["omp_num_threads"] == str(max(1, os.cpu_count() // 2))
    assert rows["dist2"]["kvstore"] == "dist_sync"
    text = readme.read_text()
    section = text.split("<!-- dist:begin -->")[1].split("<!-- dist:end -->")[0]
    assert text.startswith("# Benchmarks") and "| cnn | 2 workers + 1 server, dist_sync |" in section
    if horovod:
        assert rows["horovod2"]["kvstore"] == "horovod" and "| cnn | 2 Horovod ranks (Gloo) |" in section
