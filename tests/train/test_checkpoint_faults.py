"""Real processes: one killed (SIGKILL) while it writes leaves a loadable checkpoint; two write at
once; the scratch file of one killed mid-save is removed by the next save on its machine."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import gluonkit
from conftest import OTHER_MACHINE, on_another_machine

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


# Saves a checkpoint into the directory sys.argv[1].
SAVE_THERE = """
import sys
import mxnet as mx
import gluonkit
net = mx.gluon.nn.Dense(2, in_units=3)
net.initialize()
gluonkit.Checkpoint(sys.argv[1]).save(net, None, epoch=9)
"""


def stopped_mid_save(directory, elsewhere=False):
    """A writer saving checkpoints into ``directory`` (on another machine if ``elsewhere``),
    stopped by SIGSTOP while one of its saves is being written; returns the process and the
    name of its scratch file."""
    log = open(os.path.join(directory, os.pardir, "writer.log"), "w")
    command = [sys.executable, JOB, str(directory)]
    proc = subprocess.Popen(on_another_machine(command) if elsewhere else command, stdout=log)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if any(name.startswith(".tmp-") for name in os.listdir(directory)):
            proc.send_signal(signal.SIGSTOP)
            scratch = [name for name in os.listdir(directory) if name.startswith(".tmp-")]
            if scratch:
                log.close()
                return proc, scratch[0]
            proc.send_signal(signal.SIGCONT)      # it finished that save meanwhile: try again
    proc.kill()
    pytest.fail("the writer was never caught in the middle of a save")


def kill(proc):
    proc.kill()
    proc.wait(timeout=30)


def scratch_files(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith(".tmp-"))


def test_a_save_removes_the_scratch_file_of_a_writer_killed_mid_save_and_keeps_a_live_ones(
        tmp_path, caplog):
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    writer, scratch = stopped_mid_save(directory)
    net = _make_net(16)
    net.initialize()
    ours = gluonkit.Checkpoint(directory, keep=100)
    try:
        ours.save(net, None, epoch=1)            # its writer lives (stopped): kept
        assert scratch_files(directory) == [scratch]
    finally:
        kill(writer)                             # killed mid-save: its file stays
    assert scratch_files(directory) == [scratch]
    with caplog.at_level("INFO", logger="gluonkit"):
        path = ours.save(net, None, epoch=2)
    assert scratch_files(directory) == []
    assert f"Removed {directory / scratch}, left by a writer that is no longer running." in caplog.text
    assert ours.load(net, path=path)["epoch"] == 2


def test_the_scratch_file_of_a_writer_on_another_machine_is_kept(tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir()
    writer, scratch = stopped_mid_save(directory, elsewhere=True)
    assert scratch.split("@")[1].startswith(OTHER_MACHINE)
    kill(writer)                                 # gone, but its id is another machine's
    net = _make_net(16)
    net.initialize()
    gluonkit.Checkpoint(directory).save(net, None, epoch=1)
    assert scratch_files(directory) == [scratch]
    there = subprocess.run(on_another_machine([sys.executable, "-c", SAVE_THERE, str(directory)]),
                           capture_output=True, text=True, timeout=120)
    assert there.returncode == 0, there.stderr
    assert scratch_files(directory) == []       # a save on its machine removes it
