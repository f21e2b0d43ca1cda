"""benchmarks/varshape.py --quick runs end to end and writes what it promises."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import CLONE_ENV as ENV

from gluonkit.bench.harness import markdown_table, replace_section  # noqa: E402


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("varshape")
    readme = out / "README.md"
    readme.write_text("# Benchmarks\n\nintro\n\n<!-- throughput:begin -->\nother\n<!-- throughput:end -->\n")
    env = dict(ENV, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.varshape", "--quick",
                           "--out", str(out / "varshape.json"), "--readme", str(readme)],
                          cwd=str(out), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "varshape.json").read_text()), readme.read_text(), sorted(os.listdir(out))


CONTESTANTS = ["fixed", "fixed-imperative", "padmax", "imperative", "hybrid", "static", "buckets",
               "buckets-static", "shapecache", "shapecache-static", "module"]


def test_every_contestant_trains_the_same_samples(quick_run):
    results, _, _ = quick_run
    assert [(run["setting"], run["net"]) for run in results["runs"]] == [("tiny", "cnn")]
    rows = results["runs"][0]["rows"]
    assert [r["name"] for r in rows] == CONTESTANTS
    samples = results["runs"][0]["options"]["samples"]
    for row in rows:
        assert len(row["runs"]) == results["repeats"] == 2
        assert row["samples_per_run"] == samples, row["name"]
        assert row["min"] <= row["samples_per_s"] <= row["max"]
        assert row["samples_per_s"] == pytest.approx(np.median(row["runs"]))
        assert row["peak_rss_mb"] > 50
    fixed = rows[0]
    assert fixed["name"] == "fixed" and fixed["ratio"] == 1.0 and fixed["work"] == 1.0
    for row in rows:
        assert row["ratio"] == pytest.approx(row["samples_per_s"] / fixed["samples_per_s"])
        paired = sorted(a / b for a, b in zip(row["runs"], fixed["runs"]))
        assert row["vs_fixed"] == pytest.approx([np.median(paired), paired[0], paired[-1]])
    assert results["machine"]["omp_num_threads"] == "1"


def test_input_work_matches_the_batches(quick_run):
    results, _, _ = quick_run
    o = results["runs"][0]["options"]
    rng = np.random.RandomState(o["seed"])
    heights = rng.randint(o["min_size"], o["max_size"] + 1, o["samples"])
    widths = rng.randint(o["min_size"], o["max_size"] + 1, o["samples"])
    assert o["ref_size"] == round(float(np.sqrt((heights * widths).mean())))
    by_name = {r["name"]: r for r in results["runs"][0]["rows"]}
    order = sorted(range(o["samples"]), key=lambda i: (heights[i], widths[i], i))
    seen = 0
    for start in range(0, o["samples"], o["batch_size"]):
        batch = order[start:start + o["batch_size"]]
        mean = [round(float(np.exp(np.log(side[batch]).mean()))) for side in (heights, widths)]
        seen += len(batch) * mean[0] * mean[1]
    assert by_name["hybrid"]["work"] == pytest.approx(seen / (o["samples"] * o["ref_size"] ** 2))


def test_readme_section_is_replaced_and_the_rest_kept(quick_run):
    _, readme, files = quick_run
    assert readme.startswith("# Benchmarks\n\nintro\n\n<!-- throughput:begin -->\nother\n")
    assert readme.count("<!-- varshape:begin -->") == 1 and readme.count("<!-- varshape:end -->") == 1
    assert "## Variable shapes" in readme and "| contestant |" in readme
    assert "- gluonkit's path vs fixed shape" in readme
    assert files == ["README.md", "varshape.json"]


def test_replace_section_rewrites_only_its_part(tmp_path):
    path = str(tmp_path / "notes.md")
    replace_section(path, "a", "first")
    replace_section(path, "b", "second")
    replace_section(path, "a", "third")
    with open(path) as f:
        assert f.read() == ("<!-- a:begin -->\nthird\n<!-- a:end -->\n\n"
                            "<!-- b:begin -->\nsecond\n<!-- b:end -->\n")


def test_markdown_table():
    rows = [{"name": "x", "v": 1.234}, {"name": "y", "v": 2}]
    table = markdown_table(rows, [("name", "name"), ("value", lambda r: f"{r['v']:.1f}")])
    assert table.splitlines() == ["| name | value |", "|---|---|", "| x | 1.2 |", "| y | 2.0 |"]


def test_many_shapes_reports_memory_after_every_epoch(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- varshape:begin -->\nother\n<!-- varshape:end -->\n")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.varshape", "--many-shapes", "--quick",
                           "--max-shapes", "3", "--out", str(tmp_path / "many.json"),
                           "--readme", str(readme)],
                          cwd=str(tmp_path), env=dict(ENV, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "many.json").read_text())["runs"][0]["rows"]
    assert [r["name"] for r in rows] == ["many-static", "many-hybrid", "many-shapecache",
                                         "many-shapecache-all"]
    for row in rows:
        assert len(row["rss_mb"]) == 1 + len(row["runs"]) == 3 and min(row["rss_mb"]) > 50
    assert rows[0]["vs_static"] == [1.0, 1.0, 1.0]
    assert "ShapeCache(max_shapes=3)" in rows[2]["label"] and "max_shapes=9" in rows[3]["label"]
    text = readme.read_text()
    assert text.startswith("<!-- varshape:begin -->\nother\n<!-- varshape:end -->")
    assert "<!-- varshape-many:begin -->" in text and "| contestant |" in text
