"""Starting commands under ``horovodrun --gloo`` on loopback, for the Horovod tests.

Without Horovod the tests skip with the reason; ``GLUONKIT_REQUIRE_HOROVOD_TESTS=1`` (set by
``.ci/run``, which builds Horovod) makes them fail instead.
"""
import importlib.util
import os
import shlex
import sys
import time

import pytest

from command_lines import descendants
from watch import Watched

__all__ = ["HOROVODRUN", "horovodrun", "rank_pids", "require_horovod", "start"]

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


def start(ranks, command, timeout, cwd=None, threads=1):
    """``horovodrun --gloo -np RANKS -H localhost:RANKS sh -c 'exec COMMAND'``, followed as a
    ``Watched`` (stdout and stderr merged) and killed after ``timeout`` seconds.

    The command goes through ``sh -c`` so that horovodrun never reads its options as its own,
    and ``exec`` so that the SIGTERM horovodrun passes on reaches it (horovodrun signals the
    processes its shell started, here the command itself). Each rank gets ``threads`` OpenMP
    threads.
    """
    argv = [HOROVODRUN, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", "--network-interface", "lo",
            "sh", "-c", "exec " + " ".join(map(shlex.quote, command))]
    return Watched(argv, timeout, cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": str(threads)})


def horovodrun(ranks, command, timeout, cwd=None, threads=1):
    """Run ``command`` on ``ranks`` ranks to the end; ``(exit code, output)``."""
    return start(ranks, command, timeout, cwd, threads).finish()


def rank_pids(run, ranks, seconds=30):
    """``{rank: pid}`` of the ranks of a ``start``-ed run: the Python processes below horovodrun
    whose environment holds ``HOROVOD_RANK`` (not the shells that start them). Looks again
    for up to ``seconds`` until all ``ranks`` are found."""
    python, deadline = os.path.realpath(sys.executable), time.monotonic() + seconds
    while True:
        found = {}
        for pid in descendants(run.proc.pid):
            try:
                if os.path.realpath(f"/proc/{pid}/exe") != python:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    variables = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            except OSError:   # gone meanwhile
                continue
            if b"HOROVOD_RANK" in variables:
                found[int(variables[b"HOROVOD_RANK"])] = pid
        if len(found) == ranks or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
