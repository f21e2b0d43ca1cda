"""``gluonkit-classify`` on global batches: one process, 2 dist_sync workers and 3 Horovod ranks
end with the same exported model (BatchNorm's running statistics included)."""
import os
import re
import subprocess
import sys

import numpy as np
from mxnet import nd
from numpy.testing import assert_allclose

from horovod_run import horovodrun, require_horovod

CLASSIFY = os.path.join(os.path.dirname(sys.executable), "gluonkit-classify")
# shuffled digits with flips off (the default CNN has BatchNorm); 4 micro-batches of 8 per update.
# The sums of the workers' gradients round otherwise than one process's (1e-7); on some data
# orders a max-pooling tie then turns, and the runs part by 1e-3 in an update (measured on
# --limit 300, from its fifth update): 256 samples keep every window away from such ties.
OPTIONS = ["--epochs", "2", "--limit", "256", "--batch-size", "32", "--micro-batch", "8", "--no-progress"]


def _exported(out):
    return {name: array.asnumpy() for name, array in nd.load(str(out / "model-0000.params")).items()}


def _test_accuracy(output):
    found = re.findall(r"test accuracy: ([0-9.]+) on", output)
    assert len(found) == 1, output[-3000:]
    return found[0]


def _assert_same_model(expected, out):
    got = _exported(out)
    assert sorted(got) == sorted(expected)
    print(out.name, "largest difference:", max(float(np.abs(got[k] - v).max()) for k, v in expected.items()))
    for name, value in expected.items():   # float32 sums in another order, over 2 epochs
        assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{out.name} {name}")


def test_one_process_two_workers_and_three_horovod_ranks_export_the_same_model(tmp_path):
    one = subprocess.run([CLASSIFY, *OPTIONS, "--out", str(tmp_path / "one")], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert one.returncode == 0, one.stderr[-3000:]
    assert ("global batch 32 (samples per update over 1 worker(s)), micro-batches of 8 (8 per device on 1), "
            "4 per global batch; each worker's share of a global batch, in micro-batches: 4 (") in one.stderr
    expected, accuracy = _exported(tmp_path / "one"), _test_accuracy(one.stdout)

    two = subprocess.run([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "240", "--",
                          CLASSIFY, *OPTIONS, "--kvstore", "dist_sync", "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "in micro-batches: 2 (" in two.stderr and "updates per epoch" in two.stderr
    _assert_same_model(expected, tmp_path / "two")
    assert _test_accuracy(two.stdout) == accuracy

    require_horovod()
    code, output = horovodrun(3, [CLASSIFY, *OPTIONS, "--kvstore", "horovod", "--out", str(tmp_path / "three")],
                              timeout=300, cwd=tmp_path)
    assert code == 0, output[-3000:]
    assert "in micro-batches: 2 (" in output and ", 1 (" in output
    _assert_same_model(expected, tmp_path / "three")
    assert _test_accuracy(output) == accuracy
    variances = [value for name, value in expected.items() if "running_var" in name]
    assert not any(np.allclose(value, 1.0) for value in variances)   # the statistics moved from their start
