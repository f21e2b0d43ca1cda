"""Atomic writes leave no temporary file behind once their writer is gone, and never remove a
live writer's, or one written on another machine."""
import os
import signal
import subprocess
import sys

from conftest import OTHER_MACHINE, on_another_machine
from gluonkit.atomic import atomic_create, remove_stale, writer_place

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


def start_writer(directory, size, elsewhere=False):
    command = [sys.executable, "-c", WRITER, str(directory), str(size)]
    writer = subprocess.Popen(on_another_machine(command) if elsewhere else command,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "writing\n"
    return writer


def stop(writer, sig=signal.SIGKILL):
    writer.send_signal(sig)
    writer.wait(timeout=60)
    writer.stdout.close()


def scratch_of(directory, pid):
    prefix = f".tmp-new@{writer_place()}-{pid}-"
    return [name for name in os.listdir(directory) if name.startswith(prefix)]


def test_remove_stale_removes_the_files_of_dead_writers_only(tmp_path):
    dead = start_writer(tmp_path, 1 << 20)
    stop(dead)                                  # killed mid-write: its file stays, full size
    [left] = scratch_of(tmp_path, dead.pid)
    assert (tmp_path / left).stat().st_size == 1 << 20
    alive = start_writer(tmp_path, 10)
    try:
        [running] = scratch_of(tmp_path, alive.pid)
        here = writer_place()
        others = {"model.json": "{}", ".tmp-notes": "", f".tmp-new@{here}-{dead.pid}-notascii": "",
                  f".tmp-new-{dead.pid}-0123abcd": ""}     # no place: not known to be from here
        for name, text in others.items():
            (tmp_path / name).write_text(text)
        (tmp_path / f".tmp-dir@{here}-{dead.pid}-0123abcd").mkdir()     # not a file: kept
        assert remove_stale(tmp_path) == [left]
        assert sorted(os.listdir(tmp_path)) == sorted(
            [running, f".tmp-dir@{here}-{dead.pid}-0123abcd", *others])
    finally:
        stop(alive)
    assert remove_stale(tmp_path) == [running]
    assert remove_stale(tmp_path / "missing") == []


def test_a_writer_that_finishes_leaves_no_scratch_file(tmp_path):
    assert atomic_create(str(tmp_path), ["a.bin"], lambda f: f.write(b"x")) == "a.bin"
    assert os.listdir(tmp_path) == ["a.bin"] and remove_stale(tmp_path) == []


def test_the_scratch_file_of_a_writer_on_another_machine_is_left_to_that_machine(tmp_path):
    """Another host name stands for another machine sharing the folder: its process ids mean
    nothing here, so its writer's file is kept, alive or killed; there, once it is gone, the
    file is removed."""
    writer = start_writer(tmp_path, 1 << 16, elsewhere=True)
    try:
        [left] = os.listdir(tmp_path)
        assert left.startswith(f".tmp-new@{OTHER_MACHINE}") and f"-{writer.pid}-" in left
        assert remove_stale(tmp_path) == []
    finally:
        stop(writer)
    assert remove_stale(tmp_path) == [] and os.listdir(tmp_path) == [left]
    there = subprocess.run(on_another_machine([sys.executable, "-c", (
        "import sys; from gluonkit.atomic import remove_stale; print(remove_stale(sys.argv[1]))"),
        str(tmp_path)]), capture_output=True, text=True, timeout=120)
    assert there.stdout == f"{[left]}\n", there.stderr
    assert os.listdir(tmp_path) == []
