"""Launch a distributed job with MXNet's own dmlc tracker, with a timeout and a failure report.

Usage::

    python -m gluonkit.launch -n 2 -s 1 --timeout 600 -- python recipes/classify.py --kvstore dist_sync

``--launcher local`` (the default) runs the scheduler, the servers and the workers on this
machine over loopback; ``ssh`` and ``mpi`` run them on the hosts of ``--hostfile`` as MXNet's
``tools/launch.py`` does. The launcher ends every process it started when the job finishes,
when one role fails (a dead server otherwise leaves the workers blocked forever) and when
``--timeout`` runs out, and says which role failed and why.
"""
import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["launch", "main"]

_PROCESSES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dmlc_processes.py")
_POLL_SECONDS = 0.1
_GRACE_SECONDS = 10.0
TIMEOUT_EXIT_CODE = 124


def _say(message):
    print(f"gluonkit.launch: {message}", file=sys.stderr, flush=True)


def _describe_exit(code):
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _read_statuses(status_dir):
    statuses = {}
    for path in glob.glob(os.path.join(status_dir, "*.json")):
        with open(path) as f:
            status = json.load(f)
        statuses[status["name"]] = status
    return statuses


def _end_process_group(proc):
    """Terminate the tracker and everything it started (they share its process group)."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # the tracker is gone; its children may linger a moment longer in the group
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(_POLL_SECONDS)


def _check_args(command, num_workers, num_servers, launcher, hostfile, timeout):
    if not command:
        raise ValueError("No command to launch; put it after '--', e.g. -- python train.py.")
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}.")
    if not isinstance(num_servers, int) or num_servers < 1:
        raise ValueError(f"num_servers must be a positive integer, got {num_servers!r}.")
    if launcher not in ("local", "ssh", "mpi"):
        raise ValueError(f"launcher must be 'local', 'ssh' or 'mpi', got {launcher!r}.")
    if launcher != "local" and not (hostfile and os.path.isfile(hostfile)):
        raise ValueError(f"launcher={launcher!r} needs --hostfile naming an existing file of hosts, "
                         f"got {hostfile!r}.")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")


def launch(command, num_workers, num_servers=None, launcher="local", hostfile=None, timeout=None,
           host_ip=None):
    """Run ``command`` as every role of a parameter-server job and wait for it.

    Parameters
    ----------
    command : list of str
        The program each process runs (workers train; in servers and the scheduler,
        ``import mxnet`` serves and exits).
    num_workers : int
        Number of worker processes.
    num_servers : int, optional
        Number of server processes (default: ``num_workers``, as in MXNet's launcher).
    launcher : {'local', 'ssh', 'mpi'}
        Where the processes run; ``ssh`` and ``mpi`` need ``hostfile``.
    hostfile : str, optional
        One host per line, for ``ssh`` and ``mpi``.
    timeout : float, optional
        Seconds after which every process is ended and the launch fails.
    host_ip : str, optional
        Address of the scheduler; default 127.0.0.1 for ``local``, found by the tracker otherwise.

    Returns
    -------
    int
        0 on success, 1 if a role failed, 124 on timeout.

    Example::

        code = launch(["python", "train.py"], num_workers=2, num_servers=1, timeout=300)
    """
    num_servers = num_workers if num_servers is None else num_servers
    _check_args(command, num_workers, num_servers, launcher, hostfile, timeout)
    env = dict(os.environ)
    if launcher == "local":
        host_ip = host_ip or "127.0.0.1"
        env.update(DMLC_NODE_HOST=host_ip, DMLC_INTERFACE="lo")
    status_dir = tempfile.mkdtemp(prefix="gluonkit-launch-")
    role_command = [sys.executable, _PROCESSES, "role", status_dir, *command]
    dmlc_args = ["--num-workers", str(num_workers), "--num-servers", str(num_servers), "--cluster", launcher]
    if hostfile:
        dmlc_args += ["--host-file", hostfile]
    if host_ip:
        dmlc_args += ["--host-ip", host_ip]
    dmlc_args += [shlex.quote(part) for part in role_command]
    spec = json.dumps({"dmlc_args": dmlc_args, "host_ip": host_ip})
    tracker = subprocess.Popen([sys.executable, _PROCESSES, "tracker", spec], env=env, start_new_session=True)
    try:
        return _supervise(tracker, status_dir, num_workers, timeout)
    finally:
        _end_process_group(tracker)
        shutil.rmtree(status_dir, ignore_errors=True)


def _supervise(tracker, status_dir, num_workers, timeout):
    started = time.monotonic()
    announced, workers_done_at, tracker_done_at = set(), None, None
    while True:
        statuses = _read_statuses(status_dir)
        for name in sorted(set(statuses) - announced):
            _say(f"{name} started (pid {statuses[name]['pid']})")
            announced.add(name)
        for name, status in sorted(statuses.items()):
            code = status["returncode"]
            if code is not None and code != 0:
                tail = "\n    ".join(status["stderr"][-8:]) or "(no output on stderr)"
                _say(f"{name} {_describe_exit(code)}; ending the job. Its last lines on stderr:\n    {tail}")
                return 1
        workers_done = sum(1 for n, s in statuses.items() if n.startswith("worker") and s["returncode"] == 0)
        tracker_code = tracker.poll()
        if tracker_code is not None:
            tracker_done_at = tracker_done_at or time.monotonic()
            if workers_done == num_workers:
                return 0
            if time.monotonic() - tracker_done_at > _GRACE_SECONDS:
                _say(f"the dmlc tracker {_describe_exit(tracker_code)} when {workers_done} of {num_workers} "
                     "workers had finished; see the errors above.")
                return 1
        elif workers_done == num_workers:
            workers_done_at = workers_done_at or time.monotonic()
            if time.monotonic() - workers_done_at > _GRACE_SECONDS:
                return 0  # every worker finished; the servers are ended with the process group
        if timeout is not None and time.monotonic() - started > timeout:
            running = [n for n, s in sorted(statuses.items()) if s["returncode"] is None]
            _say(f"timed out after {timeout:g} s; still running: {', '.join(running) or 'nothing yet'}. "
                 "Ending every process.")
            return TIMEOUT_EXIT_CODE
        time.sleep(_POLL_SECONDS)


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m gluonkit.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--num-workers", type=int, required=True, help="number of workers")
    parser.add_argument("-s", "--num-servers", type=int, help="number of servers (default: as many as workers)")
    parser.add_argument("--launcher", default="local", choices=["local", "ssh", "mpi"])
    parser.add_argument("-H", "--hostfile", help="hosts, one per line (ssh and mpi)")
    parser.add_argument("--timeout", type=float, help="seconds before every process is ended")
    parser.add_argument("--host-ip", help="scheduler address (default 127.0.0.1 for local)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def main(argv=None):
    """Command-line entry point; returns the exit code."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # clean up on the way out
    try:
        return launch(args.command, args.num_workers, args.num_servers, args.launcher, args.hostfile,
                      args.timeout, args.host_ip)
    except ValueError as err:
        _say(str(err))
        return 2


if __name__ == "__main__":
    sys.exit(main())
