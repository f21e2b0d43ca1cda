"""benchmarks/throughput.py: the --quick run reports every contestant, and the figures derive right."""
import importlib
import os
import json
import math
import statistics
import subprocess
import sys

import pytest

from conftest import CLONE_ENV
COMMAND = [sys.executable, "-m", "benchmarks.throughput"]
OTHER_SECTION = "<!-- varshape:begin -->\nsomeone else's figures\n<!-- varshape:end -->"


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


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
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out, env=CLONE_ENV)
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
def test_memory_runs_are_reported(quick):
    _, results, _ = quick
    args = results["args"]
    memory = {r["name"]: r for r in results["rows"] if r["kind"] == "memory"}
    b, k = args["mem_batch"], args["mem_accumulate"]
    assert set(memory) == {f"batch {b}", f"batch {b * k}", f"{k} x {b} accumulated"}
    accumulated = memory[f"{k} x {b} accumulated"]
    assert accumulated["accumulate"] == k and accumulated["batch"] == b * k
    assert all(_positive(r["peak_rss_mb"]) and _positive(r["rss_ratio"]) for r in memory.values())
    assert memory[f"batch {b}"]["rss_ratio"] == 1.0


@pytest.mark.slow
def test_every_goal_gets_a_verdict_from_the_runs_rows(quick, bench):
    """The quick run measures cnn on 1 and 2 devices ('device'): those goals get a verdict that
    agrees with the rows, the others say they were not measured."""
    _, results, text = quick
    checked = {t["target"]: t for t in results["targets"]}
    measured = {name for name, t in checked.items() if t["met"] is not None}
    assert measured == {"cnn, 1 device: gluonkit >= 1.0x module-loader",
                        "cnn, 1 device: fit >= 1.0x module-loader",
                        "cnn, 2 devices, kvstore 'device': gluonkit >= 1.0x module-loader",
                        "cnn, 2 devices, kvstore 'device': fit >= 1.0x module-loader",
                        "cnn, 1 device: fit within 15% of the forward+backward floor",
                        "cnn, 1 device: gluonkit-acc4 (a quarter of the batch) >= 0.6x gluonkit (the full batch)",
                        "cnn: peak RSS of 2 x 4 accumulated within 1.1x batch 4",
                        "cnn, 1 device: fit-static >= 1.0x module-loader",
                        "cnn, 2 devices, kvstore 'device': fit-static >= 1.0x module-loader",
                        "cnn, 1 device: fit-static within 15% of the forward+backward floor",
                        "cnn, 1 device: gluonkit-acc4-static (a quarter of the batch) >= 0.6x "
                        "gluonkit-static (the full batch)"}
    assert {"cnn, 4 devices: fit >= 1.0x module-loader",
            "cifar_resnet20_v1, 2 devices: gluonkit >= 1.0x module-loader",
            "cifar_resnet20_v1, 1 device: fit within 3% of the forward+backward floor"} <= set(checked) - measured
    rows = {(r["contestant"], r["devices"]): r for r in results["rows"] if r["kind"] == "throughput"}
    for devices, where in ((1, "cnn, 1 device"), (2, "cnn, 2 devices, kvstore 'device'")):
        ratios = [a / b for a, b in zip(rows["fit", devices]["runs"], rows["module-loader", devices]["runs"])]
        target = checked[f"{where}: fit >= 1.0x module-loader"]
        assert target["met"] == (statistics.median(ratios) >= 1.0)
        assert target["value"].startswith(f"{statistics.median(ratios):.3f}x")
    over = rows["fit", 1]["over_floor"]
    assert checked["cnn, 1 device: fit within 15% of the forward+backward floor"]["met"] == (over <= 0.15)
    section = text.split("#### Targets")[1]
    assert "cifar_resnet20_v1, 4 devices: fit >= 1.0x module-loader: not measured in this run" in section
    for name in measured:
        assert f"- {name}: {checked[name]['value']}, **{'met' if checked[name]['met'] else 'NOT met'}**" in section


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
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=CLONE_ENV)
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


def _row(contestant, runs, net="cnn", devices=1, kvstore=None):
    return {"kind": "throughput", "net": net, "devices": devices, "kvstore": kvstore,
            "contestant": contestant, "name": contestant, "runs": runs}


def _memory(name, batch, accumulate, peak):
    return {"kind": "memory", "net": "cifar_resnet20_v1", "devices": 1, "kvstore": None,
            "contestant": name, "name": name, "batch": batch, "accumulate": accumulate,
            "peak_rss_mb": peak, "runs": [1.0]}


def _verdicts(bench, rows):
    return {t["target"]: t["met"] for t in bench.targets(rows)}


def test_speed_goals_are_paired_by_repeat_and_checked_per_device_count_and_kvstore(bench):
    module = [100.0, 50.0, 200.0]
    # medians 90 vs 100, but paired per repeat 0.9, 1.2, 1.05: the goal is met
    fit, slow = [90.0, 60.0, 210.0], [99.0, 49.0, 198.0]
    rows = [_row("module-loader", module), _row("fit", fit), _row("gluonkit", slow)]
    for kvstore, runs in (("device", fit), ("local", slow)):
        rows += [_row("module-loader", module, devices=4, kvstore=kvstore),
                 _row("fit", runs, devices=4, kvstore=kvstore)]
    verdicts = _verdicts(bench, rows)
    assert verdicts["cnn, 1 device: fit >= 1.0x module-loader"] is True
    assert verdicts["cnn, 1 device: gluonkit >= 1.0x module-loader"] is False
    assert verdicts["cnn, 4 devices, kvstore 'device': fit >= 1.0x module-loader"] is True
    assert verdicts["cnn, 4 devices, kvstore 'local': fit >= 1.0x module-loader"] is False
    assert verdicts["cnn, 4 devices, kvstore 'local': gluonkit >= 1.0x module-loader"] is None
    assert verdicts["cnn, 2 devices: fit >= 1.0x module-loader"] is None          # no row at all
    assert verdicts["cifar_resnet20_v1, 1 device: fit >= 1.0x module-loader"] is None
    (value,) = [t["value"] for t in bench.targets(rows)
                if t["target"] == "cnn, 1 device: fit >= 1.0x module-loader"]
    assert value == "1.050x (min 0.900, max 1.200 over 3 repeats)"


@pytest.mark.parametrize("floor_cnn, floor_cifar, met", [(114.0, 102.9, True), (116.0, 103.1, False)])
def test_floor_goal_is_fits_time_over_the_floors_per_network(bench, floor_cnn, floor_cifar, met):
    rows = [_row("floor", [floor_cnn] * 3), _row("fit", [100.0] * 3),
            _row("floor", [floor_cifar] * 3, net="cifar_resnet20_v1"),
            _row("fit", [100.0] * 3, net="cifar_resnet20_v1")]
    verdicts = _verdicts(bench, rows)
    assert verdicts["cnn, 1 device: fit within 15% of the forward+backward floor"] is met
    assert verdicts["cifar_resnet20_v1, 1 device: fit within 3% of the forward+backward floor"] is met


@pytest.mark.parametrize("accumulated, met", [([61.0, 30.0, 70.0], True), ([59.0, 31.0, 58.0], False)])
def test_accumulation_goal_compares_with_the_full_batch_on_the_cnn(bench, accumulated, met):
    rows = [_row("gluonkit", [100.0, 50.0, 100.0]), _row("gluonkit-acc4", accumulated),
            _row("gluonkit", [1.0] * 3, net="cifar_resnet20_v1"),
            _row("gluonkit-acc4", [1.0] * 3, net="cifar_resnet20_v1")]
    target = "cnn, 1 device: gluonkit-acc4 (a quarter of the batch) >= 0.6x gluonkit (the full batch)"
    assert _verdicts(bench, rows)[target] is met


@pytest.mark.parametrize("peak, met", [(109.0, True), (111.0, False)])
def test_memory_goal_compares_with_the_small_batch(bench, peak, met):
    rows = [_memory("batch 32", 32, 1, 100.0), _memory("batch 256", 256, 1, 250.0),
            _memory("8 x 32 accumulated", 32 * 8, 8, peak)]
    (target,) = [t for t in bench.targets(rows) if "peak RSS" in t["target"]]
    assert target["target"] == "cifar_resnet20_v1: peak RSS of 8 x 32 accumulated within 1.1x batch 32"
    assert target["met"] is met and target["value"] == f"{peak / 100:.3f}x ({peak:.0f} MB vs 100 MB)"
    assert [t["met"] for t in bench.targets([]) if "peak RSS" in t["target"]] == [None]


def test_the_default_run_measures_every_goal(bench):
    """The full run's plan has the rows every goal needs, each with at least 5 repeats."""
    groups = bench.plan(bench.parse_args([]))
    cells = {}
    for group in groups:
        assert group["repeats"] >= 5
        for config in group["configs"].values():
            cells.setdefault((group["kind"], config["net"], config["devices"], config["kvstore"]),
                             set()).add(config["contestant"])
    needed = {"floor", "gluon", "gluonkit", "fit", "module", "module-loader"}
    for net in ("cnn", "cifar_resnet20_v1"):
        assert needed | {"gluonkit-acc4"} <= cells["throughput", net, 1, "device"]
        for devices in (2, 4):
            for kvstore in ("device", "local"):
                assert needed <= cells["throughput", net, devices, kvstore]
    memory = cells["memory", "cifar_resnet20_v1", 1, "device"]
    assert memory == {"batch 32", "batch 256", "8 x 32 accumulated"}


def test_bad_options_are_refused(bench):
    for argv in (["--devices", "2,4"], ["--nets", "vgg"], ["--contestants", "gluonkit,fit"],
                 ["--mem-accumulate", "1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
    args = bench.parse_args(["--quick"])
    assert args.out is None and args.chart is None and args.readme is None


def test_a_partial_run_writes_only_where_it_is_told(bench):
    """The documented partial run leaves the committed results and README section alone; only
    --update-committed writes them."""
    partial = bench.parse_args(["--nets", "cnn", "--devices", "1"])
    assert partial.out is None and partial.readme is None and partial.chart is None
    told = bench.parse_args(["--nets", "cnn", "--devices", "1", "--out", "cnn.json"])
    assert told.out == "cnn.json" and told.readme is None
    committed = bench.parse_args(["--update-committed"])
    assert committed.out.endswith(os.path.join("benchmarks", "results", "throughput.json"))
    assert committed.readme.endswith(os.path.join("benchmarks", "README.md"))
    assert committed.chart.endswith(os.path.join("benchmarks", "results", "throughput.png"))
