"""Atomic file writes: a temporary file in the same directory, fsynced, then renamed.

A crash (or a full disk) mid-write leaves the previous file intact and no partial one; a full
disk raises ``OSError`` (errno ENOSPC) naming the file that could not be written. The
temporary file a killed writer leaves behind (``.tmp-NAME@WHERE-PID-XXXXXXXX``: WHERE names
the writer's machine) is removed by :func:`remove_stale` on that machine once that process is
gone.
"""
import errno
import functools
import os
import re
import socket
import stat
import uuid

__all__ = ["TMP_PREFIX", "writer_place", "scratch_name", "scratch_file", "atomic_write",
           "atomic_replace", "atomic_create", "atomic_text", "fsync_directory", "remove_stale"]

TMP_PREFIX = ".tmp-"
_SCRATCH = re.compile(re.escape(TMP_PREFIX) + r".+@([A-Za-z0-9._~-]+)-(\d{1,10})-[0-9a-f]{8}")


@functools.lru_cache(maxsize=None)
def _pid_namespace():
    """The id of this process's PID namespace ('' where the platform has none)."""
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
    except OSError:
        return ""


def writer_place():
    """Where this process's process ids mean something, as scratch file names record it: the
    machine's name (``socket.gethostname()``, characters other than letters, digits, '.', '_'
    and '-' as '_'), then '~' and the PID namespace's id where there is one (a container that
    shares the machine's name has its own)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "_"
    namespace = _pid_namespace()
    return f"{host}~{namespace}" if namespace else host


def scratch_name(name):
    """A new scratch file name for ``name``'s bytes-to-be: ``.tmp-NAME@WHERE-PID-XXXXXXXX``,
    with this process's :func:`writer_place` and id, so that :func:`remove_stale` can tell
    whether its writer is gone."""
    return f"{TMP_PREFIX}{name}@{writer_place()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def scratch_file(directory, name):
    """A new file in ``directory`` for ``name``'s bytes-to-be, opened for binary writing.

    Unlike ``tempfile.mkstemp`` it gets the usual permissions (0666 less the umask).
    """
    path = os.path.join(directory, scratch_name(name))
    return path, open(path, "xb")


def _alive(pid):
    """Whether a process ``pid`` exists on this machine (one of another user's counts)."""
    if pid <= 0:
        return True             # not a writer's id: keep its file
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def remove_stale(directory):
    """Remove the scratch files in ``directory`` whose writers are gone.

    A writer killed mid-write (SIGKILL, a power cut) leaves its scratch file, of full size,
    forever. A plain file named as :func:`scratch_name` names them is removed when it was
    written here (its WHERE is this process's :func:`writer_place`) by a process (its PID)
    that no longer runs. The file of a live writer, or one written on another machine (or in
    another PID namespace), whose process this one cannot see, is kept: so it is safe in a
    folder that several machines share. A file this process may not remove is kept too.

    Returns
    -------
    list of str
        The names removed, sorted.
    """
    removed = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    here = writer_place()
    for name in sorted(names):
        match = _SCRATCH.fullmatch(name)
        if not match or match.group(1) != here or _alive(int(match.group(2))):
            continue
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            os.remove(path)
        except OSError:     # removed by another cleaner already, or not ours to remove
            continue
        removed.append(name)
    return removed


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)   # a full disk, quota or file size limit


def _full(err, path):
    """A full disk's ``err`` that names no file, as the same error naming ``path``; else None."""
    if err.errno in _FULL and err.filename is None:
        return type(err)(err.errno, f"{os.strerror(err.errno)}; free some space there or write "
                         "elsewhere", path)
    return None


def _written(directory, name, write, shown=None):
    """A scratch file in ``directory`` holding what ``write(file)`` wrote, fsynced.

    A full disk raises ``OSError`` (errno ENOSPC) naming ``shown`` (default: the file ``name``
    in ``directory``).
    """
    shown = os.path.join(directory, name) if shown is None else shown
    try:
        tmp, f = scratch_file(directory, name)
    except OSError as err:
        named = _full(err, shown)
        if named is None:
            raise
        raise named from None
    try:
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as err:
        os.remove(tmp)
        named = _full(err, shown) if isinstance(err, OSError) else None
        if named is None:
            raise
        raise named from None
    return tmp


def atomic_write(directory, name, write):
    """Call ``write(file)`` on a temporary file in ``directory``, fsync, then rename to ``name``."""
    atomic_replace(directory, {name: write})


def atomic_replace(directory, writers):
    """Like ``atomic_write`` for several files, ``writers`` {name: write}: every file is written
    and fsynced before any is renamed, so a failed write replaces none of them."""
    staged = {}
    try:
        for name, write in writers.items():
            staged[name] = _written(directory, name, write)
        for name, tmp in staged.items():
            os.replace(tmp, os.path.join(directory, name))
    finally:
        for tmp in staged.values():
            if os.path.exists(tmp):
                os.remove(tmp)
    fsync_directory(directory)


def atomic_create(directory, names, write):
    """Like ``atomic_write``, but under the first of ``names`` that no file has; return it.

    The file never replaces another one, even one that another process creates meanwhile:
    it appears by a hard link, which fails if the name exists, and the next name is tried.
    Where the filesystem has no hard links the name is first reserved by exclusive creation
    (a crash in between leaves an empty file under it).

    Parameters
    ----------
    names : iterable of str
        Candidate names, tried in order (a generator may look at the directory again).
    """
    tmp = _written(directory, "new", write, shown=directory)
    try:
        for name in names:
            path = os.path.join(directory, name)
            try:
                os.link(tmp, path)
            except FileExistsError:
                continue
            except OSError:   # no hard links here: reserve the name, then move the file onto it
                try:
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    continue
                os.replace(tmp, path)
            break
        else:
            raise FileExistsError(f"every name offered for the new file exists in {directory!r}.")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    fsync_directory(directory)
    return name


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
