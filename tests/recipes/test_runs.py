"""Run folders: one process at a time, a run never overwritten by accident, no stale files."""
import os
import signal
import subprocess
import sys
import time

import pytest

from gluonkit.atomic import writer_place
from gluonkit.recipes import multitask
from gluonkit.recipes.runs import (LOCK_FILE, RunFolder, RunFolderError, check_folder, in_use_by,
                                   run_files)


def dead_pid():
    """The id of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def classify(out, *argv, wait=True):
    """``gluonkit-classify --out OUT ARGV`` on a tiny budget as another process: its result,
    or (``wait`` False) the running process."""
    command = [sys.executable, "-m", "gluonkit.recipes.classify", "--out", str(out), "--limit",
               "32", "--batch-size", "8", "--no-progress", *argv]
    if wait:
        return subprocess.run(command, capture_output=True, text=True, timeout=300,
                              cwd=os.path.dirname(out))
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=os.path.dirname(out))


def test_a_second_process_is_refused_while_the_first_lives_and_not_once_it_died(tmp_path):
    out = tmp_path / "run"
    first = classify(out, "--epochs", "100000", wait=False)        # trains until killed
    try:
        give_up = time.monotonic() + 240           # a guard against a hang, not a timing
        while in_use_by(out) != first.pid:
            assert first.poll() is None and time.monotonic() < give_up, "the folder not taken"
            time.sleep(0.2)
        second = classify(out, "--epochs", "1", "--resume")
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert second.stderr.strip().splitlines()[-1] == (
            f"gluonkit-classify: error: --out {out} is in use by process {first.pid} (it holds "
            f"{out / LOCK_FILE}); wait for it to end, or pass another --out.")
        with pytest.raises(RunFolderError, match=f"in use by process {first.pid}"):
            RunFolder(out).take(resume=True)
    finally:
        first.send_signal(signal.SIGKILL)           # no clean-up: the lock file stays
        first.wait(timeout=60)
    assert LOCK_FILE in os.listdir(out) and in_use_by(out) is None
    with RunFolder(out) as folder:                  # a dead process keeps nothing
        folder.take(resume=True)
        assert in_use_by(out) == os.getpid()
        with pytest.raises(RunFolderError, match=f"in use by process {os.getpid()}"):
            RunFolder(out).take(resume=True)        # a second holder in this process too
    assert LOCK_FILE not in os.listdir(out) and in_use_by(out) is None


def test_the_recipe_holds_its_folder_while_it_trains_and_lets_it_go(tmp_path):
    from gluonkit.callbacks import Callback

    class Holder(Callback):
        def __init__(self):
            self.seen = []

        def on_epoch_end(self, state):
            self.seen.append(in_use_by(tmp_path))

    holder = Holder()
    multitask.train(multitask.parse_args(["--epochs", "2", "--train-size", "64", "--no-progress",
                                          "--out", str(tmp_path)]), callbacks=[holder])
    assert holder.seen == [os.getpid(), os.getpid()]
    assert in_use_by(tmp_path) is None and LOCK_FILE not in os.listdir(tmp_path)


def test_taking_a_folder_removes_the_temporary_files_of_dead_writers(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    dead, alive = dead_pid(), os.getpid()
    here = writer_place()
    stale = [tmp_path / f".tmp-model.json@{here}-{dead}-0123abcd",
             tmp_path / "checkpoints" / f".tmp-new@{here}-{dead}-89abcdef"]
    kept = [tmp_path / "checkpoints" / f".tmp-best@{here}-{alive}-01234567",
            tmp_path / f".tmp-model.json@elsewhere-{dead}-01234567", tmp_path / "notes.txt"]
    for path in stale + kept:
        path.write_bytes(bytes(1000))
    with RunFolder(tmp_path) as folder:
        assert sorted(folder.take(resume=True)) == sorted(map(str, stale))
    assert all(path.exists() for path in kept) and not any(path.exists() for path in stale)


def test_a_folder_that_holds_a_run_is_refused_unless_resumed_or_overwritten(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "checkpoints").mkdir()
    assert run_files(tmp_path) == []                # an empty checkpoints/ is no run yet
    (tmp_path / "checkpoints" / "000001-epoch0001.ckpt").write_bytes(b"x")
    (tmp_path / "history.csv").write_text("epoch\n1\n")
    assert run_files(tmp_path) == ["checkpoints/", "history.csv"]
    message = (f"{tmp_path} holds a run (checkpoints/, history.csv); pass --resume to continue "
               "it, or --overwrite to replace it (or another --out).")
    with pytest.raises(RunFolderError) as refused:
        check_folder(tmp_path)
    assert str(refused.value) == message
    with pytest.raises(RunFolderError) as refused:
        RunFolder(tmp_path).take()
    assert str(refused.value) == message and in_use_by(tmp_path) is None
    assert run_files(tmp_path) == ["checkpoints/", "history.csv"]
    check_folder(tmp_path, resume=True)
    with RunFolder(tmp_path) as folder:
        folder.take(overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]      # the run's files only
