"""Real processes: one killed (SIGKILL) while it writes leaves a loadable checkpoint; two write at once."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import gluonkit

JOB = os.path.join(os.path.dirname(__file__), "checkpoint_writer_job.py")


def _make_net(units=512):
    sys.path.insert(0, os.path.dirname(JOB))
    try:
        from checkpoint_writer_job import make_net
    finally:
        sys.path.pop(0)
    return make_net(units)


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


def test_two_processes_saving_into_one_directory(tmp_path):
    """Neither crashes (pruning a file the other pruned) nor replaces the other's file."""
    procs = [subprocess.Popen([sys.executable, JOB, str(tmp_path), "40", str(tag)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tag in (1, 2)]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            outputs.append([line.split(" ", 1)[1] for line in out.splitlines()])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    paths = outputs[0] + outputs[1]
    assert len(paths) == 80 and len(set(paths)) == 80     # no name was given twice
    net = _make_net(16)
    net.initialize()
    remaining = gluonkit.Checkpoint(str(tmp_path)).paths
    assert remaining and set(remaining) <= set(paths)
    for path in remaining:
        state = gluonkit.Checkpoint(str(tmp_path)).load(net, path=path)
        for param in net.collect_params().values():   # each file holds what its writer saved
            np.testing.assert_array_equal(param.data().asnumpy(), state["marker"])
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
