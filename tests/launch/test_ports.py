"""The scheduler's port reservation: distinct ports while held, lock files only in a private directory."""
import os
import socket
import stat
import tempfile

import pytest

from gluonkit.launch import reserve_port
from gluonkit.launch.ports import PORTS, lock_directory


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The temporary directory the port locks use: ``tmp_path/tmp`` (no runtime directory)."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def test_reserved_ports_differ_while_held(temp_dir):
    port, lock = reserve_port()
    other, other_lock = reserve_port()
    assert other != port
    lock.close()
    again, again_lock = reserve_port([port])   # free again once closed
    assert again == port
    other_lock.close()
    again_lock.close()


def test_locks_live_in_a_directory_only_the_user_can_enter(temp_dir):
    port, lock = reserve_port()
    directory = temp_dir / f"gluonkit-launch-{os.geteuid()}"
    info = os.lstat(directory)
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert os.listdir(temp_dir) == [directory.name]
    assert os.listdir(directory) == [f"port-{port}.lock"]
    assert stat.S_IMODE(os.stat(directory / f"port-{port}.lock").st_mode) & 0o077 == 0
    lock.close()


def test_links_planted_at_the_old_lock_names_leave_their_targets_untouched(temp_dir, tmp_path):
    for port in PORTS:    # the old scheme's names, in the shared temporary directory
        os.symlink(tmp_path / f"created-{port}", temp_dir / f"gluonkit-launch-port-{port}.lock")
    port, lock = reserve_port()
    lock.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]   # no file made where a link pointed


def test_a_link_inside_the_private_directory_is_refused_and_its_target_untouched(temp_dir, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    before = os.stat(victim)
    directory = lock_directory()
    os.symlink(victim, os.path.join(directory, "port-9500.lock"))
    os.symlink(tmp_path / "created", os.path.join(directory, "port-9501.lock"))
    for port in (9500, 9501):
        with pytest.raises(RuntimeError, match=rf"port-{port}\.lock is a link, not a lock file; remove it"):
            reserve_port([port])
    assert victim.read_text() == "keep" and not (tmp_path / "created").exists()
    assert (os.stat(victim).st_mode, os.stat(victim).st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


@pytest.mark.parametrize("plant, problem", [
    (lambda path, elsewhere: os.symlink(elsewhere, path), "is a link"),
    (lambda path, elsewhere: open(path, "w").close(), "is not a directory"),
    (lambda path, elsewhere: os.mkdir(path, 0o777) or os.chmod(path, 0o777), "is open to others (mode 777)"),
])
def test_a_lock_directory_that_is_not_private_is_refused_naming_it(temp_dir, tmp_path, plant, problem):
    path = temp_dir / f"gluonkit-launch-{os.geteuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    plant(path, elsewhere)
    with pytest.raises(RuntimeError) as info:
        reserve_port()
    assert str(info.value) == (f"The launcher's port locks need a private directory, but {path} {problem}; "
                               "remove it, or set TMPDIR to a directory only you can write.")
    assert os.listdir(elsewhere) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_lock_directory_of_another_user_is_refused(temp_dir):
    path = temp_dir / f"gluonkit-launch-{os.geteuid()}"
    path.mkdir(mode=0o700)
    os.chown(path, 12345, 12345)
    with pytest.raises(RuntimeError, match=f"{path} belongs to user id 12345; remove it"):
        reserve_port()
    assert os.listdir(path) == []


def test_locks_go_to_the_users_runtime_directory_where_there_is_one(temp_dir, tmp_path, monkeypatch):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    port, lock = reserve_port()
    assert os.listdir(runtime / "gluonkit-launch") == [f"port-{port}.lock"] and os.listdir(temp_dir) == []
    lock.close()
    assert os.listdir(runtime / "gluonkit-launch") == []
    assert stat.S_IMODE(os.stat(runtime / "gluonkit-launch").st_mode) == 0o700


def test_no_lock_file_outlives_its_launch_even_when_every_port_is_busy(temp_dir):
    busy = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(2)]
    for sock in busy:
        sock.bind(("", 0))   # ports the system chose, in use until closed
    ports = [sock.getsockname()[1] for sock in busy]
    try:
        with pytest.raises(RuntimeError, match=r"No free port for the scheduler in \d+-\d+: .*--port"):
            reserve_port(ports)
    finally:
        for sock in busy:
            sock.close()
    port, lock = reserve_port(ports[:1])
    lock.close()
    lock.close()   # twice: nothing more happens
    assert os.listdir(lock_directory()) == []
