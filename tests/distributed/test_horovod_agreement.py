"""benchmarks/agreement.py --quick: 2 Horovod ranks against one process, SGD and Adam, to float32 rounding."""
import json
import subprocess
import sys

import pytest

from conftest import CLONE_ENV as ENV
from horovod_run import require_horovod


@pytest.mark.slow
def test_quick_run_reports_each_optimizers_difference_from_one_process(tmp_path):
    require_horovod()
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    command = [sys.executable, "-m", "benchmarks.agreement", "--quick", "--out", str(tmp_path / "agreement.json"),
               "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {r["optimizer"]: r for r in json.loads((tmp_path / "agreement.json").read_text())["rows"]}
    assert set(rows) == {"sgd", "adam"}
    for row in rows.values():
        assert 0 <= row["max_difference"] < 1e-5 * row["max_weight"], row   # float32 rounding, no more
        assert row["parameter"] in ("0.weight", "0.bias", "1.weight", "1.bias")
    assert "## Horovod against one process (`agreement.py`)" in readme.read_text()
