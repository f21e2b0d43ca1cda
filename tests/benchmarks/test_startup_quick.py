"""benchmarks/startup.py: the --quick run times each start once and derives the ratios to one
``import mxnet`` from the same run."""
import json
import statistics
import subprocess
import sys

from conftest import CLONE_ENV as ENV


def test_quick_run_times_every_start_and_reports_ratios_to_the_floor(tmp_path):
    out = tmp_path / "startup.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.startup", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results["seconds"]) == {"command", "restart", "import mxnet"}
    assert all(len(times) == 1 and times[0] > 0 for times in results["seconds"].values())
    floor = statistics.median(results["seconds"]["import mxnet"])
    for row in results["rows"]:
        ratio = statistics.median(results["seconds"][row["start"]]) / floor
        assert abs(row["x import mxnet"] - ratio) <= 0.005, row
    assert "| command |" in done.stdout and "| restart |" in done.stdout
    assert list(tmp_path.iterdir()) == [out]          # the runs' folders are gone
