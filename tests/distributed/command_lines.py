"""What the processes of this machine show on their command lines, and a job that waits to be looked at."""
import os
import time

__all__ = ["WAITING_ROLE", "descendants", "role_files", "leaks", "wait_for_files"]

# Every role writes $GK_SECRET and $GK_WORKER_SECRET to OUT/<role><task id>, then waits for OUT/stop.
WAITING_ROLE = """\
import os, sys, time
out = sys.argv[1]
name = os.environ["DMLC_ROLE"] + os.environ.get("DMLC_TASK_ID", "")
with open(os.path.join(out, name + ".part"), "w") as f:
    f.write(os.environ.get("GK_SECRET", "-") + " " + os.environ.get("GK_WORKER_SECRET", "-"))
os.rename(os.path.join(out, name + ".part"), os.path.join(out, name))
while not os.path.exists(os.path.join(out, "stop")):
    time.sleep(0.05)
"""


def role_files(num_workers, num_servers):
    """The names WAITING_ROLE's roles write (servers' task ids follow the workers')."""
    return (["scheduler"] + [f"worker{i}" for i in range(num_workers)]
            + [f"server{num_workers + i}" for i in range(num_servers)])


def _command_lines():
    """pid -> (parent pid, command line as text) of every process in /proc."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):    # gone meanwhile
            continue
        found[int(pid)] = (parent, cmdline)
    return found


def _descendants(found, root):
    below = set()
    while True:
        more = {pid for pid, (parent, _) in found.items() if (parent == root or parent in below) and pid not in below}
        if not more:
            return below
        below |= more


def descendants(pid):
    """The ids of the processes below ``pid`` (its children, theirs, ...)."""
    return _descendants(_command_lines(), pid)


def leaks(secrets):
    """Command lines that hold one of ``secrets`` (any process), or a role's environment (this process's
    descendants: ``DMLC_PS_ROOT_URI``, which only a role's specification holds)."""
    found = _command_lines()
    own = _descendants(found, os.getpid())
    return [cmdline for pid, (_, cmdline) in found.items()
            if any(s in cmdline for s in secrets) or (pid in own and "DMLC_PS_ROOT_URI" in cmdline)]


def wait_for_files(directory, names, seconds=60):
    """Wait until ``directory`` holds every one of ``names``; AssertionError after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not all(os.path.exists(os.path.join(directory, n)) for n in names):
        assert time.monotonic() < deadline, f"the roles never wrote {names}: {sorted(os.listdir(directory))}"
        time.sleep(0.05)
