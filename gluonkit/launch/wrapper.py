"""The wrapper that runs one role of a launched job, on whichever host the role runs on.

The launcher runs it as ``python -I FILE`` here and as ``python -I -c SOURCE`` through ssh
on another host, so it needs nothing but the standard library: it never imports gluonkit or
mxnet (with ``DMLC_ROLE=server`` set, ``import mxnet`` would turn it into a parameter server).
The role's specification arrives as the first line on the wrapper's stdin, never on a
command line (where any user of the machine could read its environment with ``ps``): JSON,
``{"env": {...}, "workdir": DIR, "command": [PROGRAM, ARG, ...]}``.

The wrapper starts the command in its own process group and reports on stderr, one line
each, prefixed with :data:`MARK`: ``started PID``, ``exited CODE`` (negative: killed by that
signal), ``cannot-start MESSAGE`` and ``ended LEFT`` (processes of the group still alive
after the clean-up; 0 when none is left). When its stdin closes (the launcher asks it to
stop, or the ssh connection broke) it ends the group: SIGTERM, then SIGKILL. A line
``term SECONDS`` first gives the program alone SIGTERM and that many seconds to end by
itself (a worker finishing its step and writing its checkpoint); stdin closing during those
seconds ends the group at once.

An uncaught exception in a role's Python program makes the interpreter exit at once with
code 1 after printing the traceback, and ``sys.exit`` with a non-zero status (a command's
one-line error) once its clean-up (``finally`` blocks, context managers) has run, through a
``sitecustomize`` placed first on ``PYTHONPATH``: otherwise MXNet's exit barrier would keep a
failed worker waiting for the others, and them for it, forever.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["MARK", "main", "read_spec", "run"]

MARK = "@gluonkit-role "
_TERM_SECONDS = 3.0
_KILL_SECONDS = 5.0

_EXIT_ON_EXCEPTION = '''\
"""Exit at once on an uncaught exception or a failed sys.exit (see gluonkit/launch/wrapper.py),
then chain on."""
import atexit
import os
import sys


def _end_now(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _exit_now(kind, value, traceback, _print=sys.excepthook):
    _print(kind, value, traceback)
    _end_now(128 + 2 if issubclass(kind, KeyboardInterrupt) else 1)


def _exit_after_clean_up(status=None, _exit=sys.exit):
    """sys.exit; a failure ends the process once the exception has unwound (the last exit
    handler registered runs first), before MXNet's barrier."""
    if status is not None and status != 0:
        atexit.register(_end_now, status if isinstance(status, int) else 1)
    _exit(status)


def _run_hidden_sitecustomize():
    """Run the sitecustomize this file hides, if any, and take this file's directory off the path."""
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


sys.excepthook = _exit_now
sys.exit = _exit_after_clean_up
_run_hidden_sitecustomize()
'''


def _report(*words):
    try:
        sys.stderr.write(MARK + " ".join(str(w) for w in words) + "\n")
        sys.stderr.flush()
    except OSError:  # the launcher (or the ssh connection) is gone
        pass


def _become_subreaper():
    """Adopt the program's orphaned children, so that they can be reaped and counted."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _group_alive(pgid):
    """Whether the group has a live member; call only once the program itself was reaped."""
    while True:  # reap adopted orphans first: a zombie still counts as a member of the group
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _end_group(pgid):
    """SIGTERM the group, SIGKILL it if needed; return whether any process was left."""
    for sig, seconds in ((signal.SIGTERM, _TERM_SECONDS), (signal.SIGKILL, _KILL_SECONDS)):
        if not _group_alive(pgid):
            return False
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return False
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return False
            time.sleep(0.05)
    return _group_alive(pgid)


def _stop(proc, grace, now):
    """End the program (SIGTERM, then SIGKILL) and return its exit status.

    With ``grace`` (seconds, 0 for none), the program alone first gets SIGTERM and that many
    seconds to end by itself (its children, such as data loading processes, keep running
    meanwhile), unless the event ``now`` is set meanwhile.
    """
    if grace:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline and not now.wait(0.05):
            pass
        if proc.returncode is not None:
            return proc.returncode
    for sig, seconds in ((signal.SIGTERM, _TERM_SECONDS), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(seconds)
        except subprocess.TimeoutExpired:
            continue


def read_spec():
    """The specification: the first line on stdin, as JSON; None if stdin closed before it."""
    data = bytearray()
    while b"\n" not in data:
        chunk = os.read(0, 65536)  # the raw descriptor: what follows the line is the stop signal's
        if not chunk:
            return None
        data += chunk
    return json.loads(data[:data.index(b"\n")])


class _Stop(threading.Event):
    """Set when the role must end; ``grace``: the seconds the program gets after SIGTERM alone,
    cut short when ``now`` is set (stdin closed after the ``term`` line)."""

    grace = 0.0

    def __init__(self):
        super().__init__()
        self.now = threading.Event()


def _watch_stdin(stop):
    data = b""
    try:  # the raw descriptor: a buffered reader left blocked would abort the interpreter's exit
        while True:
            chunk = os.read(0, 4096)
            if not chunk:
                break
            data = (data + chunk)[-256:]
            words = data.split(b"\n")[0].split()
            if b"\n" in data and len(words) == 2 and words[0] == b"term" and not stop.is_set():
                try:
                    stop.grace = max(0.0, float(words[1]))
                except ValueError:
                    pass
                stop.set()   # the program gets its grace; stdin closing now cuts it short
    except OSError:
        pass
    stop.set()
    stop.now.set()


def _start(spec, hook_dir):
    env = dict(os.environ, **spec["env"])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, env.get("PYTHONPATH")) if p)
    try:
        os.chdir(spec["workdir"])
    except OSError as err:
        return None, f"cannot enter the working directory {spec['workdir']!r}: {err.strerror}"
    program = spec["command"][0]
    try:
        return subprocess.Popen(spec["command"], env=env, stdin=subprocess.DEVNULL, start_new_session=True), None
    except FileNotFoundError:
        return None, (f"program not found: {program!r} (in {spec['workdir']!r}, "
                      f"PATH={env.get('PATH', '')!r})")
    except OSError as err:
        return None, f"cannot run {program!r}: {err.strerror}"


def run(spec):
    """Run the role described by ``spec``; return the wrapper's exit code."""
    stop = _Stop()
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    _become_subreaper()
    hook_dir = tempfile.mkdtemp(prefix="gluonkit-role-")
    try:
        with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
            f.write(_EXIT_ON_EXCEPTION)
        proc, problem = _start(spec, hook_dir)
        if proc is None:
            _report("cannot-start", problem)
            return 127
        _report("started", proc.pid)
        while proc.poll() is None and not stop.wait(0.1):
            pass
        code = _stop(proc, stop.grace, stop.now) if proc.returncode is None else proc.returncode
        _report("exited", code)
        _report("ended", int(_end_group(proc.pid)))  # what the program left behind in its group
        return code if code >= 0 else 128 - code
    finally:
        shutil.rmtree(hook_dir, ignore_errors=True)


def main():
    """Read the specification on stdin and run the role; return the wrapper's exit code."""
    spec = read_spec()
    if spec is None:
        _report("cannot-start", "no specification arrived on stdin")
        return 127
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
