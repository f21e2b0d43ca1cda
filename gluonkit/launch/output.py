"""The launcher's output: its own messages and the lines its roles write, each whole.

Several threads write to the launcher's stdout and stderr at once (two readers per role, and
the supervisor). Each message or forwarded line is one ``write`` under one lock, so lines
never share a line or break in the middle, whichever thread writes them: a role's stdout
lines go to the launcher's stdout, its stderr lines and the launcher's messages to stderr.
"""
import sys
import threading

__all__ = ["PREFIX", "say", "forward", "forward_stdout"]

PREFIX = "gluonkit.launch: "
# reentrant: the launcher's signal handler says which signal came from the main thread, which
# may hold the lock at that moment (a plain Lock deadlocked a second SIGTERM sent while the
# launcher wrote its "stopping the workers first" message)
_LOCK = threading.RLock()


def _write(text, stream=None):
    with _LOCK:
        stream = stream or sys.stderr
        stream.write(text)
        stream.flush()


def say(message):
    """Write ``message`` (which may span lines) to stderr as the launcher's, in one write."""
    _write(f"{PREFIX}{message}\n")


def forward(line):
    """Write a line a role wrote to stderr, ending it with a newline if it had none."""
    _write(line if line.endswith("\n") else line + "\n")


def forward_stdout(line):
    """Write a line a role wrote to stdout to the launcher's stdout, whole."""
    _write(line if line.endswith("\n") else line + "\n", sys.stdout)
