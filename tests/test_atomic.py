"""Atomic writes leave no temporary file behind once their writer is gone."""
import os
import signal
import subprocess
import sys

from gluonkit.atomic import atomic_create, remove_stale

# Writes SIZE bytes into a new file of DIRECTORY and stops mid-write, before the rename.
WRITER = """
import sys, time
from gluonkit.atomic import atomic_create

def write(f):
    f.write(bytes(int(sys.argv[2])))
    f.flush()
    print("writing", flush=True)
    time.sleep(600)

atomic_create(sys.argv[1], ["000001-epoch0001.ckpt"], write)
"""


def start_writer(directory, size):
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(size)],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "writing\n"
    return writer


def stop(writer, sig=signal.SIGKILL):
    writer.send_signal(sig)
    writer.wait(timeout=60)
    writer.stdout.close()


def scratch_of(directory, pid):
    return [name for name in os.listdir(directory) if name.startswith(f".tmp-new-{pid}-")]


def test_remove_stale_removes_the_files_of_dead_writers_only(tmp_path):
    dead = start_writer(tmp_path, 1 << 20)
    stop(dead)                                  # killed mid-write: its file stays, full size
    [left] = scratch_of(tmp_path, dead.pid)
    assert (tmp_path / left).stat().st_size == 1 << 20
    alive = start_writer(tmp_path, 10)
    try:
        [running] = scratch_of(tmp_path, alive.pid)
        others = {"model.json": "{}", ".tmp-notes": "", f".tmp-new-{dead.pid}-notascii": ""}
        for name, text in others.items():
            (tmp_path / name).write_text(text)
        (tmp_path / f".tmp-dir-{dead.pid}-0123abcd").mkdir()     # not a file: kept
        assert remove_stale(tmp_path) == [left]
        assert sorted(os.listdir(tmp_path)) == sorted(
            [running, f".tmp-dir-{dead.pid}-0123abcd", *others])
    finally:
        stop(alive)
    assert remove_stale(tmp_path) == [running]
    assert remove_stale(tmp_path / "missing") == []


def test_a_writer_that_finishes_leaves_no_scratch_file(tmp_path):
    assert atomic_create(str(tmp_path), ["a.bin"], lambda f: f.write(b"x")) == "a.bin"
    assert os.listdir(tmp_path) == ["a.bin"] and remove_stale(tmp_path) == []
