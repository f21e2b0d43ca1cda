"""Run a launcher command and follow its output while it runs (to act on what it prints)."""
import queue
import re
import subprocess
import threading
import time

__all__ = ["Shared", "Watched", "alive", "no_process_left"]


def alive(pid):
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


class Watched:
    """``subprocess.Popen(argv)`` with stdout and stderr merged and read line by line.

    Ended by its own id if still running when ``finish`` gives up.
    """

    def __init__(self, argv, timeout, **kwargs):
        self.deadline = time.monotonic() + timeout
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
        self.seen, self._lines = [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, pattern):
        """The match of the first line (from here on) matching ``pattern``; AssertionError if none comes."""
        while time.monotonic() < self.deadline:
            try:
                line = self._lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"never saw {pattern!r}; output:\n" + "".join(self.seen[-40:]))

    def finish(self):
        """(exit code, whole output) once the process ended; killed at the deadline."""
        try:
            code = self.proc.wait(max(0.0, self.deadline - time.monotonic()))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        while True:
            line = self._lines.get(timeout=10)
            if line is None:
                break
            self.seen.append(line)
        return code, "".join(self.seen)

    def pids(self):
        """Every pid the launcher reported as started."""
        return [int(p) for p in re.findall(r"started \(pid (\d+)\)", "".join(self.seen))]


class Shared(Watched):
    """A ``Watched`` job that several tests compare with (a module-scoped fixture's): ``finish``
    waits for its end once and gives every caller the same (exit code, whole output)."""

    _result = None

    def finish(self):
        if self._result is None:
            self._result = super().finish()
        return self._result


def no_process_left(pids, seconds=5.0):
    """The pids still alive after up to ``seconds`` (an empty list when all ended)."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]
