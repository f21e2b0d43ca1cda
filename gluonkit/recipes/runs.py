"""Run folders: a recipe's ``--out DIR``, one run each, taken by one process at a time.

A run folder holds one run: its resolved options (``args.json``), ``checkpoints/``,
``history.csv``, ``curves.png`` and the exported model. A command takes its folder with
:class:`RunFolder` before it writes there:

- a lock (``fcntl.flock`` on ``DIR/.lock``, which the kernel drops when the process ends,
  however it ends) refuses a second process while the first lives;
- a folder that already holds a run is refused unless the command continues it (``--resume``,
  ``--export``) or replaces it (``--overwrite``: the earlier run's files are removed first);
- temporary files that writers killed mid-write left behind are removed.

Example::

    with RunFolder("runs/cnn") as folder:
        folder.take(resume=True)        # RunFolderError if another process holds it
        ...                             # train, write checkpoints, export
"""
import fcntl
import json
import logging
import os
import shutil

from gluonkit.atomic import atomic_text, remove_stale

__all__ = ["ARGS_FILE", "LOCK_FILE", "RUN_FILES", "INVOCATION", "RunFolderError", "RunFolder",
           "run_files", "in_use_by", "check_folder", "save_args"]

log = logging.getLogger("gluonkit")

#: The resolved options of the run, as JSON.
ARGS_FILE = "args.json"
#: The lock a live process holds (removed when it lets the folder go).
LOCK_FILE = ".lock"
#: What a recipe writes into its folder: any of them (a non-empty checkpoints/) but args.json
#: alone is a run.
RUN_FILES = (ARGS_FILE, "checkpoints", "history.csv", "curves.png", "model-symbol.json",
             "model-0000.params", "model.json", "predictions.png")
#: Options that say what a command does with a folder, not what the run is: never recorded.
INVOCATION = ("config", "out", "resume", "export", "overwrite")
_CHECKPOINTS = "checkpoints"


class RunFolderError(RuntimeError):
    """A run folder a command cannot take: a live process holds it, or it holds a run that
    the command would overwrite."""


def run_files(directory):
    """The run's files in ``directory`` (names of :data:`RUN_FILES` that are there; a
    directory name ends with '/'), or ``[]`` for a folder that holds no run: ``args.json``
    alone is a run that ended before its first checkpoint, which a new run may replace."""
    found = []
    for name in RUN_FILES:
        path = os.path.join(directory, name)
        if name == _CHECKPOINTS:
            if os.path.isdir(path) and os.listdir(path):
                found.append(name + "/")
        elif os.path.isfile(path):
            found.append(name)
    return [] if found == [ARGS_FILE] else found   # a run that ended before its first checkpoint


def _holder(fd):
    """The process id written in a lock file (0 if unreadable)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def _in_use(directory, pid):
    lock = os.path.join(directory, LOCK_FILE)
    who = f"process {pid}" if pid else "another process"
    return RunFolderError(f"{directory} is in use by {who} (it holds {lock}); wait for it to "
                          "end, or pass another --out.")


def _holds_run(directory, found):
    return RunFolderError(f"{directory} holds a run ({', '.join(found)}); pass --resume to "
                          "continue it, or --overwrite to replace it (or another --out).")


def in_use_by(directory):
    """The id of the live process that holds ``directory`` (0 if it wrote none), or None."""
    try:
        fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:     # no lock file (or not a file): nobody holds the folder
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)    # closing drops the probe's own lock
    return None


def check_folder(directory, *, resume=False, overwrite=False):
    """Raise :class:`RunFolderError` if a command could not take ``directory`` now: a live
    process holds it, or it holds a run and the command neither resumes nor overwrites it.

    A check before any work starts, to fail early; :meth:`RunFolder.take` checks again.
    """
    if not directory or not os.path.isdir(directory):
        return
    pid = in_use_by(directory)
    if pid is not None:
        raise _in_use(directory, pid)
    found = run_files(directory)
    if found and not (resume or overwrite):
        raise _holds_run(directory, found)


def _lock(directory):
    """A descriptor of ``directory``'s lock file holding the exclusive lock, this process's
    id written in it; :class:`RunFolderError` if another process holds it."""
    path = os.path.join(directory, LOCK_FILE)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise _in_use(directory, pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:    # the holder removes the file as it lets go: lock the file now at the path
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        opened = os.fstat(fd)
        if current and (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino):
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _remove_run(directory):
    """Remove the run files of :data:`RUN_FILES` from ``directory`` (nothing else)."""
    for name in RUN_FILES:
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            if name == _CHECKPOINTS:
                shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


class RunFolder:
    """A run folder, held by this process from :meth:`take` until :meth:`release` (or the
    end of its ``with`` block), so that no other process writes into it meanwhile.

    Parameters
    ----------
    directory : str
        The folder (created by :meth:`take` if missing); '' or None for none: then
        :meth:`take` does nothing.
    """

    def __init__(self, directory):
        self.directory = os.fspath(directory) if directory else None
        self._fd = None

    def __repr__(self):
        return f"RunFolder({self.directory!r}, taken={self.taken})"

    @property
    def taken(self):
        """Whether this process holds the folder now."""
        return self._fd is not None

    def take(self, *, resume=False, overwrite=False):
        """Lock the folder for this process, then make it ready for the run.

        A folder that holds a run (:func:`run_files`) is refused unless ``resume`` (continue
        it, or export it) or ``overwrite`` (its run files are removed now). Temporary files of
        writers that are no longer alive are removed from it and from its checkpoints/.

        Returns
        -------
        list of str
            The stale temporary files removed (paths).

        Raises
        ------
        RunFolderError
            Another live process holds the folder, or it holds a run and neither ``resume``
            nor ``overwrite`` is set; nothing in it is changed.
        """
        if not self.directory or self.taken:
            return []
        os.makedirs(self.directory, exist_ok=True)
        self._fd = _lock(self.directory)
        try:
            found = run_files(self.directory)
            if found and not (resume or overwrite):
                raise _holds_run(self.directory, found)
            if found and overwrite:
                _remove_run(self.directory)
                log.info("Removed the earlier run in %s (--overwrite).", self.directory)
            removed = [os.path.join(where, name)
                       for where in (self.directory, os.path.join(self.directory, _CHECKPOINTS))
                       for name in remove_stale(where)]
        except BaseException:
            self.release()
            raise
        for path in removed:
            log.info("Removed %s, left by a writer that is no longer running.", path)
        return removed

    def release(self):
        """Let the folder go (its lock file removed); nothing if it is not taken."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        path = os.path.join(self.directory, LOCK_FILE)
        try:
            opened, current = os.fstat(fd), os.stat(path, follow_symlinks=False)
            if (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino):
                os.remove(path)     # before the lock drops: a waiter then locks a new file
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def save_args(args, directory, name=ARGS_FILE):
    """Write the resolved arguments ``vars(args)`` (less :data:`INVOCATION`) as JSON into
    ``directory``, atomically; returns the path."""
    values = {key: value for key, value in vars(args).items() if key not in INVOCATION}
    path = os.path.join(directory, name)
    atomic_text(path, json.dumps(values, indent=1, default=str) + "\n")
    return path
