"""Atomic file writes: a temporary file in the same directory, fsynced, then renamed.

A crash (or a full disk) mid-write leaves the previous file intact and no partial one.
"""
import os
import uuid

__all__ = ["TMP_PREFIX", "scratch_file", "atomic_write", "atomic_text", "fsync_directory"]

TMP_PREFIX = ".tmp-"


def scratch_file(directory, name):
    """A new file in ``directory`` for ``name``'s bytes-to-be, opened for binary writing.

    Unlike ``tempfile.mkstemp`` it gets the usual permissions (0666 less the umask).
    """
    path = os.path.join(directory, f"{TMP_PREFIX}{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    return path, open(path, "xb")


def atomic_write(directory, name, write):
    """Call ``write(file)`` on a temporary file in ``directory``, fsync, then rename to ``name``."""
    tmp, f = scratch_file(directory, name)
    try:
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_directory(directory)


def fsync_directory(directory):
    """Make a rename in ``directory`` durable (where the platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_text(path, text):
    """Replace the file ``path`` with ``text`` (UTF-8) atomically, creating its directory."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    atomic_write(directory, os.path.basename(path), lambda f: f.write(text.encode()))
