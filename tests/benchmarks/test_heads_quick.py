"""benchmarks/heads.py: the --quick run times both ways in paired rounds, measures each way's
peak memory in a process of its own, and checks the goals."""
import importlib
import json
import statistics
import subprocess
import sys

import pytest

from conftest import CLONE_ENV as ENV

COMMAND = [sys.executable, "-m", "benchmarks.heads"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Run --quick once, writing only under a temporary directory: (results, readme text)."""
    out = tmp_path_factory.mktemp("heads")
    readme = out / "README.md"
    readme.write_text("# Benchmarks\n")
    command = COMMAND + ["--quick", "--rounds", "3", "--out", str(out / "heads.json"), "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=out, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "heads.json") as f:
        return json.load(f), readme.read_text()


def test_both_ways_are_timed_in_pairs_and_their_memory_measured(quick):
    results, section = quick
    steps = results["steps"]
    assert set(steps["seconds"]) == {"single", "heads"}
    assert all(len(s) == 3 and min(s) > 0 for s in steps["seconds"].values())
    ratios = [a / b for a, b in zip(steps["seconds"]["heads"], steps["seconds"]["single"])]
    assert steps["ratio"]["median"] == pytest.approx(statistics.median(ratios))
    memory = results["memory"]
    assert memory["ratio"] == pytest.approx(memory["peak_rss_mb"]["heads"] / memory["peak_rss_mb"]["single"])
    assert "<!-- heads:begin -->" in section and "python -m benchmarks.heads" in section
    assert section.count("**met**") + section.count("**NOT met**") == 2


@pytest.mark.parametrize("steps, memory, verdicts", [(1.04, 1.0, [True, True]), (1.2, 1.2, [False, False])])
def test_the_goals(steps, memory, verdicts):
    bench = importlib.import_module("benchmarks.heads")
    found = bench.targets({"ratio": {"median": steps}}, {"ratio": memory})
    assert [t["met"] for t in found] == verdicts


def test_bad_arguments_are_refused():
    result = subprocess.run(COMMAND + ["--rounds", "0"], capture_output=True, text=True, timeout=120, env=ENV, cwd="/")
    assert result.returncode == 2 and "--rounds must be positive, got 0" in result.stderr
