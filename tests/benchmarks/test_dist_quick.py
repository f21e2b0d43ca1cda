"""benchmarks/dist.py --quick: jobs of 1 and 2 workers on dist_sync and Horovod, started the same way, every job reported."""
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
def test_quick_run_reports_one_and_two_workers_per_kvstore_with_equal_work_per_worker(tmp_path):
    horovod = _horovod()
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    command = COMMAND + ["--quick", "--nets", "cnn", "--out", str(tmp_path / "dist.json"), "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "dist.json") as f:
        results = json.load(f)
    rows = {(r["run"], r["workers"]): r for r in results["rows"]}
    kvstores = ["dist_sync"] + (["horovod"] if horovod else [])
    assert len(rows) == 2 * len(kvstores)
    for row in results["rows"]:
        assert row["net"] == "cnn" and math.isfinite(row["samples_per_s"]) and row["samples_per_s"] > 0
        assert row["threads_per_process"] == max(1, os.cpu_count() // 2)   # the same in every job
        batch, steps = results["args"]["sizes"]["cnn"]
        assert row["work"] == {"samples": batch * steps * row["workers"], "updates": steps * row["workers"]}
        assert row["ranks"] == list(range(row["workers"]))
        if row["workers"] == 2:
            assert row["efficiency"] == pytest.approx(row["speedup"] / 2)
    section = readme.read_text().split("<!-- dist:begin -->")[1].split("<!-- dist:end -->")[0]
    assert "| cnn | dist_sync workers + 1 server (gluonkit.launch) | 2 |" in section
    if horovod:
        assert "| cnn | Horovod ranks (Gloo) | 2 |" in section


def test_quick_and_update_committed_are_refused_together():
    import benchmarks.dist as dist

    with pytest.raises(SystemExit, match="--update-committed with --quick"):
        dist.parse_args(["--quick", "--update-committed"])
    args = dist.parse_args(["--nets", "cnn"])   # a partial run writes nothing committed
    assert args.out is None and args.readme is None
