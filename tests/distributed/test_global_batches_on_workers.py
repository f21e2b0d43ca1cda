"""Global batches over real worker processes: 1, 2 and 3 workers train the same network."""
import subprocess
import sys

import mxnet as mx
import pytest
from numpy.testing import assert_allclose

from job_check import load_job

JOB = load_job(__file__.replace("test_global_batches_on_workers.py", "global_batch_job.py"))


def _launch(out_dir, workers, mode):
    command = [sys.executable, "-m", "gluonkit.launch", "-n", str(workers), "-s", "1", "--timeout", "120", "--",
               sys.executable, JOB.__file__, str(out_dir), mode]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("workers, mode", [(2, "loop"), (3, "fit")])
def test_workers_on_global_batches_train_the_network_of_one_process(tmp_path, workers, mode):
    """BatchNorm included: its gradients because every micro-batch is the same, its running
    statistics (with fit) because MergeRunningStatistics adds up the workers'."""
    _launch(tmp_path, workers, mode)
    reference = JOB.train(None, mode)
    expected = {name: p.data().asnumpy() for name, p in reference.collect_params().items()}
    for rank in range(workers):
        got = mx.nd.load(str(tmp_path / f"final{rank}.params"))
        for name, param in reference._collect_params_with_prefix().items():
            value = param.data().asnumpy()
            if mode == "loop" and "running" in name:
                continue   # a loop of one's own keeps each worker's own running statistics
            assert_allclose(got[name].asnumpy(), value, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank} {name}")
    assert expected
