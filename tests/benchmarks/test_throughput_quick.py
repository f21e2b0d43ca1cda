"""benchmarks/throughput.py: the --quick run reports every contestant, and the figures derive right."""
import importlib
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMAND = [sys.executable, "-m", "benchmarks.throughput"]
OTHER_SECTION = "<!-- varshape:begin -->\nsomeone else's figures\n<!-- varshape:end -->"


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _env():
    """The environment of a benchmark run from another directory: the clone on the path."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))


@pytest.fixture(scope="module")
def bench():
    """The benchmark module (importing it changes no environment variable)."""
    return importlib.import_module("benchmarks.throughput")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Run --quick once, writing only under a temporary directory: (dir, results, readme text)."""
    out = tmp_path_factory.mktemp("throughput")
    readme = out / "README.md"
    readme.write_text(f"# Benchmarks\n\n{OTHER_SECTION}\n")
    command = COMMAND + ["--quick", "--out", str(out / "throughput.json"),
               "--chart", str(out / "charts" / "throughput.png"), "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "throughput.json") as f:
        return out, json.load(f), readme.read_text()


@pytest.mark.slow
def test_every_contestant_is_reported_with_positive_finite_figures(quick, bench):
    _, results, _ = quick
    rows = [r for r in results["rows"] if r["kind"] == "throughput" and r["devices"] == 1]
    assert [r["contestant"] for r in rows] == list(bench.CONTESTANTS)
    for row in rows:
        for key in ("samples_per_s", "min", "max", "ms_per_step", "ratio", "peak_rss_mb", "setup_s"):
            assert _positive(row[key]), (row["name"], key, row[key])
        assert row["min"] <= row["samples_per_s"] <= row["max"]
        assert len(row["runs"]) == results["args"]["repeats"]
        assert math.isfinite(row["over_floor"])
    by_name = {r["contestant"]: r for r in rows}
    assert by_name["gluon"]["ratio"] == 1.0 and by_name["floor"]["over_floor"] == 0.0
    acc4 = by_name["gluonkit-acc4"]
    assert acc4["accumulate"] == 4 and acc4["batch"] == by_name["gluon"]["batch"]


@pytest.mark.slow
def test_several_devices_report_speedup_and_ratio_per_kvstore(quick):
    _, results, _ = quick
    args = results["args"]
    multi = [r for r in results["rows"] if r["kind"] == "throughput" and r["devices"] > 1]
    expected = {(c, d, k) for c in args["multi_contestants"] for d in args["devices"] if d > 1
                for k in args["kvstores"]}
    assert {(r["contestant"], r["devices"], r["kvstore"]) for r in multi} == expected
    for row in multi:
        assert all(_positive(row[key]) for key in ("samples_per_s", "speedup", "efficiency", "ratio"))
        assert row["efficiency"] == pytest.approx(row["speedup"] / row["devices"])


@pytest.mark.slow
def test_memory_runs_and_targets_are_reported(quick):
    _, results, _ = quick
    args = results["args"]
    memory = {r["name"]: r for r in results["rows"] if r["kind"] == "memory"}
    b, k = args["mem_batch"], args["mem_accumulate"]
    assert set(memory) == {f"batch {b}", f"batch {b * k}", f"{k} x {b} accumulated"}
    accumulated = memory[f"{k} x {b} accumulated"]
    assert accumulated["accumulate"] == k and accumulated["batch"] == b * k
    assert all(_positive(r["peak_rss_mb"]) and _positive(r["rss_ratio"]) for r in memory.values())
    assert memory[f"batch {b}"]["rss_ratio"] == 1.0
    checked = " ".join(t["target"] for t in results["targets"])
    for part in ("gluonkit >=", "fit >=", "ahead of", "peak RSS", "samples/s >="):
        assert part in checked
    assert all(isinstance(t["met"], bool) for t in results["targets"])


@pytest.mark.slow
def test_readme_section_is_written_between_markers_and_keeps_the_rest(quick):
    out, _, text = quick
    assert OTHER_SECTION in text and text.startswith("# Benchmarks")
    assert text.count("<!-- throughput:begin -->") == 1 and text.count("<!-- throughput:end -->") == 1
    section = text.split("<!-- throughput:begin -->")[1].split("<!-- throughput:end -->")[0]
    assert "| contestant |" in section and "#### Targets" in section
    assert "](charts/throughput.png)" in section
    with open(out / "charts" / "throughput.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_from_json_rewrites_the_section_without_measuring(quick, tmp_path):
    out, _, text = quick
    readme = tmp_path / "README.md"
    readme.write_text(f"{OTHER_SECTION}\n")
    command = COMMAND + ["--from-json", str(out / "throughput.json"),
               "--chart", str(tmp_path / "throughput.png"), "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "samples/s" not in result.stderr   # no contestant ran
    rewritten = readme.read_text()
    section = text.split("<!-- throughput:begin -->")[1].split("<!-- throughput:end -->")[0]
    assert section.replace("charts/throughput.png", "throughput.png") in rewritten
    assert OTHER_SECTION in rewritten and (tmp_path / "throughput.png").exists()


def test_ratios_are_paired_by_repeat_and_overhead_is_over_the_floor(bench):
    def row(contestant, runs, devices=1, kvstore=None):
        return {"kind": "throughput", "net": "cnn", "devices": devices, "kvstore": kvstore,
                "contestant": contestant, "name": contestant, "runs": runs,
                "samples_per_s": sorted(runs)[1]}

    rows = bench.derive([row("floor", [200.0, 100.0, 300.0]), row("gluon", [100.0, 50.0, 150.0]),
                         row("gluonkit", [98.0, 49.0, 150.0]),
                         row("gluon", [100.0, 100.0, 100.0], 2, "device")])
    floor, gluon, gluonkit, two = rows
    assert gluonkit["ratio"] == pytest.approx(0.98) and gluonkit["ratio_max"] == pytest.approx(1.0)
    assert gluon["over_floor"] == pytest.approx(1.0)            # twice the floor's time per sample
    assert floor["ratio"] == pytest.approx(2.0)
    assert two["speedup"] == pytest.approx(1.0) and two["efficiency"] == pytest.approx(0.5)


def test_bad_options_are_refused(bench):
    for argv in (["--devices", "2,4"], ["--nets", "vgg"], ["--contestants", "gluonkit,fit"],
                 ["--mem-accumulate", "1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
    args = bench.parse_args(["--quick"])
    assert args.out is None and args.chart is None and args.readme is None
