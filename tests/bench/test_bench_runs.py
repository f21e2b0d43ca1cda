"""gluonkit-bench's --quick runs of each mode: the rows, the work each contestant did (counted
where it happened), the files; never the timings."""
import csv
import json
import math
import os
import subprocess
import sys

import pytest

from gluonkit.bench.workers import horovod_available, launcher_command, run_launched

from conftest import CLONE_ENV, params_of

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(CLONE_ENV, PYTHONPATH=os.pathsep.join([HERE, CLONE_ENV["PYTHONPATH"]]), OMP_NUM_THREADS="1")
COMMAND = [sys.executable, "-m", "gluonkit.bench", "--quick"]
CNN = ["--net", "gluonkit.recipes.models:small_cnn", "--input-shape", "1,8,8"]
REQUIRE = "GLUONKIT_REQUIRE_HOROVOD_TESTS"


def _bench(tmp_path, argv, timeout=900):
    """Run the command; its results (the --json file) and stdout."""
    out = tmp_path / "results.json"
    result = subprocess.run(COMMAND + argv + ["--json", str(out)], capture_output=True, text=True,
                            timeout=timeout, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr[-10000:]   # a failed job: the end of each rank's lines
    with open(out) as f:
        return json.load(f), result.stdout


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _check_equal_work(results):
    """Every row processed steps x accumulate x batch x devices x workers samples per timed
    epoch (counted by the loader's sampler, or by the floor), and the trainers made ``steps``
    updates per worker (the floor none)."""
    s = results["settings"]
    for row in results["rows"]:
        samples = s["steps"] * s["accumulate"] * s["batch_size"] * row["devices"] * row["workers"]
        assert row["work"]["samples"] == samples == row["samples_per_run"], row["name"]
        updates = 0 if row["contestant"] == "floor" else s["steps"] * row["workers"]
        assert row["work"]["updates"] == updates, row["name"]
        assert row["global_batch"] == s["batch_size"] * s["accumulate"] * row["devices"] * row["workers"]
        assert len(row["runs"]) == s["repeats"] and row["min"] <= row["samples_per_s"] <= row["max"]
        assert all(_positive(row[key]) for key in ("samples_per_s", "setup_s", "build_s"))


@pytest.fixture(scope="module")
def devices_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("devices")
    results, stdout = _bench(tmp, CNN + ["--devices", "1,2", "--csv", str(tmp / "rows.csv"),
                                         "--chart", str(tmp / "chart.png")])
    return tmp, results, stdout


@pytest.mark.slow
def test_devices_run_every_contestant_on_each_count_with_equal_work(devices_run):
    _, results, stdout = devices_run
    rows = {(r["contestant"], r["devices"]): r for r in results["rows"]}
    assert set(rows) == {(c, d) for c in ("floor", "gluon", "gluonkit", "fit", "module") for d in (1, 2)}
    _check_equal_work(results)
    for (contestant, devices), row in rows.items():
        assert row["ratio"] == pytest.approx(1.0) if contestant == "gluon" else _positive(row["ratio"])
        if devices == 2:
            assert row["kvstore"] == "device"
            assert row["efficiency"] == pytest.approx(row["speedup"] / 2)
            ratios = sorted(a / b for a, b in zip(row["runs"], rows[contestant, 1]["runs"]))
            assert row["speedup_min"] == pytest.approx(ratios[0]) and row["speedup_max"] == pytest.approx(ratios[-1])
        else:
            assert "speedup" not in row
    assert rows["floor", 1]["over_floor"] == 0.0
    for label in ("hand-written Gluon loop + gluon.Trainer", "gluonkit.fit", "Module.fit, same DataLoader, no metric"):
        assert label in stdout


@pytest.mark.slow
def test_devices_run_records_the_machine_and_writes_every_file(devices_run):
    tmp, results, stdout = devices_run
    info = results["machine"]
    assert info["cores"] == os.cpu_count() and info["cpu"]
    assert len(info["load_average"]) == 3 and len(info["load_average_end"]) == 3
    assert "MKLDNN" in info["mxnet_features"] and info["mxnet"] == "1.9.1"
    assert results["schema"] == 1 and results["settings"]["devices"] == [1, 2]
    assert f"load average {info['load_average'][0]} before" in stdout
    with open(tmp / "rows.csv") as f:
        lines = list(csv.DictReader(f))
    assert [line["name"] for line in lines] == [r["name"] for r in results["rows"]]
    assert [float(line["samples_per_s"]) for line in lines] == [r["samples_per_s"] for r in results["rows"]]
    with open(tmp / "chart.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_compare_lays_two_runs_side_by_side(devices_run):
    tmp, results, _ = devices_run
    result = subprocess.run([sys.executable, "-m", "gluonkit.bench", "--compare", str(tmp / "results.json"),
                             str(tmp / "results.json")], capture_output=True, text=True, timeout=300, env=ENV)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("forward", "hand", "Gluon", "gluonkit",
                                                                              "Module"))]
    assert len(lines) == len(results["rows"]) and all(line.endswith("1.000") for line in lines)


@pytest.mark.slow
def test_accumulation_on_a_two_input_network(tmp_path):
    """--accumulate 2 on a network of two inputs: the Module (one input, no accumulation) is
    skipped and said so; every other contestant does the same work."""
    results, _ = _bench(tmp_path, ["--net", "bench_nets:two_branch_cnn", "--input-shape", "3,8,8",
                                   "--input-shape", "3,4,4", "--accumulate", "2", "--classes", "3"])
    assert [r["contestant"] for r in results["rows"]] == ["floor", "gluon", "gluonkit", "fit"]
    assert "module" in results["skipped"] and results["settings"]["accumulate"] == 2
    _check_equal_work(results)


def _require_horovod():
    if not horovod_available():
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"Horovod is not installed, and {REQUIRE}=1: build it with `make horovod`.")
        pytest.skip("Horovod is not installed (make horovod)")


def _workers_run(tmp_path, kvstore):
    results, _ = _bench(tmp_path, CNN + ["--workers", "1,2", "--kvstore", kvstore, "--contestants", "gluonkit",
                                         "--repeats", "1"])
    rows = {r["workers"]: r for r in results["rows"]}
    assert set(rows) == {1, 2} and rows[2]["ranks"] == [0, 1] and rows[1]["ranks"] == [0]
    assert rows[1]["threads_per_process"] == rows[2]["threads_per_process"] == max(1, os.cpu_count() // 2)
    assert rows[2]["kvstore"] == kvstore and rows[2]["efficiency"] == pytest.approx(rows[2]["speedup"] / 2)
    _check_equal_work(results)


@pytest.mark.slow
def test_two_dist_sync_workers_against_one(tmp_path):
    _workers_run(tmp_path, "dist_sync")


@pytest.mark.slow
def test_two_horovod_ranks_against_one(tmp_path):
    _require_horovod()
    _workers_run(tmp_path, "horovod")


BROKEN_RANK = """
import sys
import horovod.mxnet as hvd
import mxnet as mx
hvd.init()
if hvd.rank() == 1:
    raise ValueError("rank 1 broke here")
try:
    hvd.broadcast(mx.nd.ones(3), root_rank=0).wait_to_read()   # fails: rank 1 is gone
finally:
    print("rank 0 talks on\\n" * 400, file=sys.stderr, flush=True)
"""


def test_a_failed_horovod_job_reports_the_end_of_each_ranks_output(tmp_path):
    """Rank 1 fails first and rank 0, which horovodrun names, fails after many lines: the
    error still holds rank 1's exception."""
    _require_horovod()
    script = tmp_path / "broken.py"
    script.write_text(BROKEN_RANK)
    command = launcher_command("horovod", 2, 60) + [sys.executable, str(script)]
    with pytest.raises(RuntimeError) as failed:
        run_launched(command, ENV, 120)
    message = str(failed.value)
    assert "failed (exit code 1)" in message
    assert "[1]<stderr>:ValueError: rank 1 broke here" in message and "[0]<stderr>:rank 0 talks on" in message


def test_the_contestants_train_the_same_weights_with_accumulation():
    """One epoch of the hand-written loop (gradients added over the micro-batches), of the
    gluonkit.Trainer loop and of fit: the same data, the same updates, the same weights."""
    from gluonkit.bench.contestants import build

    config = {"net": {"source": "callable", "name": "gluonkit.recipes.models:small_cnn", "args": {}},
              "input_shapes": [[1, 8, 8]], "label_shape": [], "classes": 4, "loss": "softmax", "dtype": "float32",
              "device": "cpu", "devices": 2, "kvstore": "device", "batch": 3, "accumulate": 2, "steps": 2,
              "hybridize": "dynamic", "seed": 3}
    weights = {}
    for tool in ("gluon", "gluonkit", "fit"):
        contestant = build(dict(config, tool=tool))
        assert contestant.run() == {"samples": 2 * 2 * 3 * 2, "updates": 2}
        weights[tool] = params_of(contestant.net)
    for tool in ("gluonkit", "fit"):
        for name, value in weights["gluon"].items():
            assert weights[tool][name] == pytest.approx(value, rel=1e-4, abs=1e-6), (tool, name)
