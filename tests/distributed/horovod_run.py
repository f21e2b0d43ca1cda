"""Starting commands under ``horovodrun --gloo`` on loopback, for the Horovod tests.

Without Horovod the tests skip with the reason; ``GLUONKIT_REQUIRE_HOROVOD_TESTS=1`` (set by
``.ci/run``, which builds Horovod) makes them fail instead.
"""
import importlib.util
import os
import shlex
import signal
import subprocess
import sys

import pytest

__all__ = ["HOROVODRUN", "horovodrun", "require_horovod", "start"]

REQUIRE = "GLUONKIT_REQUIRE_HOROVOD_TESTS"
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")


def require_horovod():
    """Skip (fail where ``GLUONKIT_REQUIRE_HOROVOD_TESTS=1``) when Horovod for MXNet is missing."""
    reason = None
    if importlib.util.find_spec("horovod") is None:
        reason = "Horovod is not installed"
    elif not os.path.exists(HOROVODRUN):
        reason = f"horovodrun is not beside {sys.executable}"
    if reason is None:
        return
    message = (f"the Horovod tests need Horovod built for MXNet: {reason}. Build it with `make horovod` "
               f"(.ci/run does, and sets {REQUIRE}=1).")
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{message} {REQUIRE}=1 forbids skipping them.")
    pytest.skip(message)


def start(ranks, command, cwd=None, env=None):
    """``horovodrun --gloo -np RANKS -H localhost:RANKS sh -c COMMAND`` in a new session (a Popen).

    The command goes through ``sh -c`` so that horovodrun never reads its options as its own.
    """
    argv = [HOROVODRUN, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", "--network-interface", "lo",
            "sh", "-c", " ".join(map(shlex.quote, command))]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen(argv, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def finish(process, timeout):
    """``(exit code, output)`` of a ``start``-ed job; the whole job is killed after ``timeout`` s."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"horovodrun did not end within {timeout} s:\n{output[-3000:]}")
    return process.returncode, output


def horovodrun(ranks, command, timeout, cwd=None, env=None):
    """Run ``command`` on ``ranks`` ranks to the end; ``(exit code, output)``."""
    return finish(start(ranks, command, cwd, env), timeout)
