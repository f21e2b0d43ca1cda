"""A real process killed with SIGKILL while it writes checkpoints leaves a loadable one."""
import os
import signal
import subprocess
import sys
import time

import mxnet as mx
import numpy as np
import pytest

import gluonkit

JOB = os.path.join(os.path.dirname(__file__), "checkpoint_writer_job.py")


def _make_net():
    sys.path.insert(0, os.path.dirname(JOB))
    try:
        from checkpoint_writer_job import make_net
    finally:
        sys.path.pop(0)
    return make_net()


@pytest.mark.parametrize("delay", [0.0, 0.013, 0.031])
def test_sigkill_during_writes_leaves_the_last_good_checkpoint(tmp_path, delay):
    proc = subprocess.Popen([sys.executable, JOB, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "saved 3":
                break
        time.sleep(delay)   # land somewhere inside a later save
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    net = _make_net()
    net.initialize()
    state = gluonkit.Checkpoint(str(tmp_path)).load(net)
    assert state["epoch"] >= 3 and state["marker"] == state["epoch"]
    for param in net.collect_params().values():
        np.testing.assert_array_equal(param.data().asnumpy(), state["epoch"])
