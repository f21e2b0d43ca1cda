"""benchmarks/nonfinite.py: the --quick run times both policies and derives the cost right."""
import json
import os
import statistics
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMAND = [sys.executable, "-m", "benchmarks.nonfinite"]
# run from another directory: the clone's root on the path finds the benchmarks package
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
OTHER_SECTION = "<!-- throughput:begin -->\nsomeone else's figures\n<!-- throughput:end -->"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Run --quick once, writing only under a temporary directory: (results, readme text)."""
    out = tmp_path_factory.mktemp("nonfinite")
    readme = out / "README.md"
    readme.write_text(f"# Benchmarks\n\n{OTHER_SECTION}\n")
    command = COMMAND + ["--quick", "--rounds", "3", "--out", str(out / "nonfinite.json"),
               "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=out, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "nonfinite.json") as f:
        return json.load(f), readme.read_text()


def test_both_policies_are_timed_every_round_and_the_cost_is_their_median_ratio(quick):
    results, _ = quick
    (row,) = results["rows"]
    assert row["net"] == "cnn" and row["rounds"] == 3
    ignore, skip = row["seconds"]["ignore"], row["seconds"]["skip"]
    assert len(ignore) == len(skip) == 3 and all(t > 0 for t in ignore + skip)
    extra = [s / i - 1 for i, s in zip(ignore, skip)]
    assert row["extra"] == pytest.approx(statistics.median(extra))
    assert row["extra_min"] == min(extra) and row["extra_max"] == max(extra)
    assert row["extra_min"] <= row["extra_q1"] <= row["extra"] <= row["extra_q3"] <= row["extra_max"]
    assert row["ms_per_step"]["skip"] == pytest.approx(1000 * statistics.median(skip) / row["steps"])
    assert row["met"] == (row["extra"] < 0.03)


def test_readme_section_holds_the_table_and_keeps_the_rest(quick):
    results, text = quick
    assert OTHER_SECTION in text
    section = text.split("<!-- nonfinite:begin -->")[1].split("<!-- nonfinite:end -->")[0]
    assert "python -m benchmarks.nonfinite" in section and "3 rounds" in section
    assert f"| cnn | {results['rows'][0]['batch']} |" in section


def test_bad_arguments_are_refused_with_the_choices():
    result = subprocess.run(COMMAND + ["--nets", "vgg99"], capture_output=True,
                            text=True, timeout=120, env=ENV, cwd="/")
    assert result.returncode == 2 and "unknown network(s) vgg99" in result.stderr
    assert "cifar_resnet20_v1" in result.stderr
