"""The launcher's output: its own messages and the lines its roles write, each whole.

Several threads write to the launcher's stderr at once (one reader per role, and the
supervisor). Each message or forwarded line is one ``write`` under one lock, so lines never
share a line or break in the middle, whichever thread writes them.
"""
import sys
import threading

__all__ = ["PREFIX", "say", "forward"]

PREFIX = "gluonkit.launch: "
_LOCK = threading.Lock()


def _write(text):
    with _LOCK:
        sys.stderr.write(text)
        sys.stderr.flush()


def say(message):
    """Write ``message`` (which may span lines) to stderr as the launcher's, in one write."""
    _write(f"{PREFIX}{message}\n")


def forward(line):
    """Write a line a role wrote to stderr, ending it with a newline if it had none."""
    _write(line if line.endswith("\n") else line + "\n")
