"""The scheduler's port: free, and reserved on this machine for as long as the job runs.

The dmlc tracker probes a port and closes it before the scheduler binds it, so two jobs
started together can take the same one. Here each port is also locked (``flock``) through a
file named after it, for as long as the job holds the file open. The lock files live in a
directory private to the user (mode 0700): ``$XDG_RUNTIME_DIR/gluonkit-launch`` where that
names a directory of the user's, else ``gluonkit-launch-UID`` in the temporary directory
(``TMPDIR``). Nobody else can place files or links there; a directory of that name that is
not the user's own, private one is refused, naming it. Each file is opened without
following a link, and removed by its holder before the lock drops (a launcher that then
opens the old name locks a new file), so no lock file outlives its job.
"""
import errno
import fcntl
import os
import random
import socket
import stat
import tempfile

__all__ = ["PORTS", "PortLock", "lock_directory", "reserve_port"]

PORTS = range(9091, 10000)  # the dmlc tracker's range


def lock_directory():
    """The directory of the port locks: created private (0700) if absent, checked if present.

    Raises ``RuntimeError`` naming it if it is a link, not a directory, not the user's, or
    open to others.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime) and os.stat(runtime).st_uid == os.geteuid():
        path = os.path.join(runtime, "gluonkit-launch")
    else:
        path = os.path.join(tempfile.gettempdir(), f"gluonkit-launch-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        raise RuntimeError(f"The launcher cannot make its port lock directory {path} ({err.strerror}); "
                           "set TMPDIR to a directory only you can write.") from None
    info = os.lstat(path)
    problem = ("is a link" if stat.S_ISLNK(info.st_mode) else
               "is not a directory" if not stat.S_ISDIR(info.st_mode) else
               f"belongs to user id {info.st_uid}" if info.st_uid != os.geteuid() else
               f"is open to others (mode {stat.S_IMODE(info.st_mode):o})" if info.st_mode & 0o077 else None)
    if problem:
        raise RuntimeError(f"The launcher's port locks need a private directory, but {path} {problem}; "
                           "remove it, or set TMPDIR to a directory only you can write.")
    return path


class PortLock:
    """The lock of a reserved port, held until ``close()``, which removes its file."""

    def __init__(self, path, fd):
        self.path, self._fd = path, fd

    def close(self):
        """Let the port go: remove the lock file (while still holding it), then unlock."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if _same_file(self.path, fd):
                os.remove(self.path)
        finally:
            os.close(fd)


def _same_file(path, fd):
    try:
        current, opened = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino)


def _open_lock(directory, port):
    """The lock of ``port`` in ``directory``, its file opened without following a link; None if busy."""
    path = os.path.join(directory, f"port-{port}.lock")
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise RuntimeError(f"{path} is a link, not a lock file; remove it.") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            os.close(fd)
            raise RuntimeError(f"{path} is not a regular file of yours; remove it.")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                return None
            raise
        if _same_file(path, fd):
            return PortLock(path, fd)
        os.close(fd)   # its holder removed it as it let go: lock the file now at the path


def reserve_port(ports=PORTS):
    """A free TCP port of ``ports`` for the scheduler, and the ``PortLock`` that reserves it.

    Close the lock when the job is over. The search starts at a random port of the range,
    which makes a clash with a launcher that does not lock (the dmlc tracker starts at 9091),
    or with another user's launches, unlikely too. ``RuntimeError`` if every port is taken.
    """
    directory = lock_directory()
    ports = list(ports)
    start = random.randrange(len(ports))
    for port in ports[start:] + ports[:start]:
        lock = _open_lock(directory, port)
        if lock is None:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("", port))
            except OSError:
                lock.close()
                continue
        return port, lock
    where = f"port {ports[0]}" if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"
    raise RuntimeError(f"No free port for the scheduler in {where}: each is in use or reserved by another "
                       "launch. End other jobs, or choose a free port with --port.")
