"""The launcher: start every role of a parameter-server job, watch them, end them all.

The job is the dmlc tracker's: a scheduler on this machine, then servers and workers with
the ``DMLC_*`` variables MXNet's ps-lite reads, which carries all the training traffic.
``local`` runs every role here over loopback; ``ssh`` runs the servers and the workers in
turn on the hosts of a host file. Each role runs under the wrapper of
:mod:`gluonkit.launch.wrapper`, which gets the role's specification on its stdin, reports
its process and exit status back (over the ssh connection itself) and ends everything the
role started when the launcher asks, or when the connection breaks. The launcher ends the
job when every worker finished, when one role fails (naming it, with its last lines on
stderr), when the timeout runs out, on SIGINT/SIGTERM and when a worker stopped on one of
them (exit code 130 or 143, as ``fit`` exits after writing its checkpoint), and says when it
could not confirm that a role's processes are gone. After a failure (a stop is none),
:mod:`gluonkit.launch.restarts` says whether the job starts again, and on how many workers.
"""
import collections
import inspect
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..validate import choice, finite_real, is_int, positive_int
from . import wrapper
from .hosts import read_hostfile, remote_env, ssh_command, sync_dir
from .output import forward, forward_stdout, say
from .ports import PORTS, reserve_port
from .restarts import Restarts

__all__ = ["launch", "TIMEOUT_EXIT_CODE", "STOP_SECONDS"]

TIMEOUT_EXIT_CODE = 124
_GRACE_SECONDS = 10.0     # for servers and the scheduler to finish after the last worker
_END_SECONDS = 15.0       # for every role to report that its processes are gone
STOP_SECONDS = 60.0       # for the workers to finish their step and write their checkpoints on a signal
_ENV_ITEM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(=.*)?$", re.DOTALL)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_signal(code):
    """The signal of a stop's exit code (128 + SIGINT or SIGTERM: a program that handled it and
    ended itself, as ``fit`` does once its checkpoint is written), or None."""
    return next((sig for sig in _STOP_SIGNALS if code == 128 + sig), None)


def _describe_exit(code):
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Role:
    """One process of the job, seen from the launcher: the wrapper (or the ssh client running it)."""

    def __init__(self, name, kind, host, argv, spec, wake):
        self.name, self.kind, self.host, self._wake = name, kind, host, wake
        self.pid = self.code = self.problem = self.left = self.client_code = None
        self.failed_at = self.exited_at = None
        self.tail = collections.deque(maxlen=8)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        try:  # the specification, environment included, travels on stdin: never on a command line
            self.proc.stdin.write(json.dumps(spec).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the wrapper (or ssh) is gone already: its exit code tells why
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stdout_reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._stdout_reader.start()

    @property
    def where(self):
        return f" on {self.host}" if self.host else ""

    def _read_stdout(self):
        for raw in self.proc.stdout:   # line by line: lines of several roles never mix
            forward_stdout(raw.decode(errors="replace"))

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            output, mark, event = line.partition(wrapper.MARK)
            if not mark:
                forward(line)
                self.tail.append(line.rstrip())
                continue
            if output.strip():  # a last line of the program's without a newline
                forward(output)
                self.tail.append(output.rstrip())
            kind, _, value = event.strip().partition(" ")
            self._on_event(kind, value)
        self.client_code = self.proc.wait()
        self._wake.put(self)

    def _on_event(self, kind, value):
        if kind in ("started", "exited", "ended") and not re.fullmatch(r"-?\d+", value):
            return  # not the wrapper's: only it writes these words after the mark, with a number
        if kind == "started":
            self.pid = int(value)
            say(f"{self.name} started (pid {self.pid}){self.where}")
        elif kind == "exited":
            self.code, self.exited_at = int(value), time.monotonic()
        elif kind == "cannot-start":
            self.problem = value
        elif kind == "ended":
            self.left = int(value)
        self._wake.put(self)

    @property
    def stopped_by(self):
        """The signal this worker stopped on by itself (it exited with 130 or 143), or None."""
        return _stop_signal(self.code) if self.kind == "worker" else None

    def failure(self, workers_done):
        """Why this role failed the job (a sentence), or None; a worker's stop is no failure."""
        if self.problem:
            return f"{self.name}{self.where} could not start: {self.problem}"
        if self.code is not None and self.code != 0 and not self.stopped_by:
            return f"{self.name}{self.where} {_describe_exit(self.code)}"
        if self.code is None and self.client_code is not None and self.pid is None and self.host:
            return f"{self.name} could not be started on {self.host} (ssh exited with code {self.client_code})"
        if self.code is None and self.client_code is not None:
            how = "the ssh connection" if self.host else "its wrapper"
            return f"{self.name}{self.where}: {how} ended with code {self.client_code} before the role finished"
        if (self.code == 0 and self.kind != "worker" and not workers_done
                and time.monotonic() - self.exited_at > _GRACE_SECONDS):
            return f"{self.name}{self.where} exited {_GRACE_SECONDS:g} s before the workers finished"
        return None

    def stop(self, grace=None):
        """Ask the wrapper to end the role (it ends the process group when its stdin closes);
        with ``grace``, the program first gets SIGTERM alone and that many seconds to end,
        which a call without ``grace`` cuts short."""
        try:
            if self.proc.stdin.closed:
                return
            if grace:
                self.proc.stdin.write(f"term {grace:g}\n".encode())
                self.proc.stdin.flush()
            else:
                self.proc.stdin.close()
        except OSError:
            pass

    def wait_ended(self, deadline):
        """Wait until the wrapper is gone; kill it (and the role, if local) if it outlives ``deadline``."""
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for pgid in (self.proc.pid, None if self.host else self.pid):
                if pgid:
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.proc.wait()
        self._reader.join(5.0)
        self._stdout_reader.join(5.0)


def _parse_env(items, what):
    """``NAME=VALUE`` or ``NAME`` (this machine's value) strings as a dict."""
    env = {}
    for item in items:
        if not isinstance(item, str) or not _ENV_ITEM.match(item):
            raise ValueError(f"{what} takes NAME=VALUE or NAME, got {item!r}.")
        name, has_value, value = item.partition("=")
        if not has_value:
            if name not in os.environ:
                raise ValueError(f"{what} {name}: {name} is not set on this machine; give {name}=VALUE.")
            value = os.environ[name]
        env[name] = value
    return env


def _check(command, num_workers, num_servers, launcher, hostfile, timeout, workdir, sync_dst_dir, ssh_config, port,
           max_restarts, min_workers):
    if not command or not isinstance(command, (list, tuple)) or not all(isinstance(a, str) for a in command):
        raise ValueError(f"No command to launch, or not a list of strings: {command!r}; put it after '--', "
                         "e.g. -- python train.py.")
    num_workers = positive_int(num_workers, "num_workers")
    num_servers = None if num_servers is None else positive_int(num_servers, "num_servers")
    if not (is_int(max_restarts) and max_restarts >= 0):
        raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}.")
    if min_workers is not None:
        if not (is_int(min_workers) and 1 <= min_workers <= num_workers):
            raise ValueError(f"min_workers must be an integer from 1 to num_workers ({num_workers}), got "
                             f"{min_workers!r}.")
        if not max_restarts:
            raise ValueError(f"min_workers={min_workers} needs max_restarts of 1 or more: the job continues on "
                             "fewer workers only at a restart.")
    if port is not None and not (is_int(port) and 0 < port < 65536):
        raise ValueError(f"port must be a TCP port number (1-65535), got {port!r}.")
    choice(launcher, ("local", "ssh"), "launcher")
    if launcher == "ssh" and not (hostfile and os.path.isfile(hostfile)):
        raise ValueError(f"launcher={launcher!r} needs --hostfile naming an existing file of hosts, got {hostfile!r}.")
    if timeout is not None and not finite_real(timeout, "timeout", "seconds") > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    if workdir is not None and launcher == "local" and not os.path.isdir(workdir):
        raise ValueError(f"workdir {workdir!r} is not a directory.")
    if sync_dst_dir is not None and (launcher != "ssh" or workdir is not None):
        raise ValueError(f"sync_dst_dir={sync_dst_dir!r} needs launcher='ssh' and no workdir (the roles run in "
                         "the copy).")
    if ssh_config is not None and not os.path.isfile(ssh_config):
        raise ValueError(f"ssh_config {ssh_config!r} is not a file.")
    return num_workers, num_servers


def _plan(num_workers, num_servers, hosts):
    """(name, kind, task id, host) of every server and worker, as the dmlc ssh launcher places them."""
    roles = []
    for i in range(num_servers + num_workers):
        kind, index = ("server", i) if i < num_servers else ("worker", i - num_servers)
        task_id = index if kind == "worker" else num_workers + index
        roles.append((f"{kind} {index}", kind, task_id, hosts[i % len(hosts)] if hosts else None))
    return roles


def launch(command, num_workers, num_servers=None, launcher="local", hostfile=None, timeout=None, host_ip=None,
           env=(), env_worker=(), env_server=(), workdir=None, sync_dst_dir=None, ssh_config=None,
           stop_seconds=STOP_SECONDS, port=None, max_restarts=0, min_workers=None):
    """Run ``command`` as every role of a parameter-server job and wait for it.

    Parameters
    ----------
    command : list of str
        The program every process runs (workers train; in servers and the scheduler,
        ``import mxnet`` serves and exits). Arguments reach it exactly, on every host.
    num_workers, num_servers : int
        Number of workers and of servers (default: as many servers as workers, on every attempt).
    launcher : {'local', 'ssh'}
        ``ssh`` runs servers and workers in turn on the hosts of ``hostfile``.
    hostfile : str, optional
        ``host``, ``host:port`` or ``user@host:port`` per line; ``#`` comments. Checked when
        read (:func:`~gluonkit.launch.hosts.read_hostfile`): nothing in it reaches ssh as an option.
    timeout : float, optional
        Seconds after which every process is ended and the launch fails.
    host_ip : str, optional
        The scheduler's address: 127.0.0.1 for ``local``, found by the dmlc tracker for ``ssh``.
    env, env_worker, env_server : list of str
        ``NAME=VALUE``, or ``NAME`` for this machine's value, for every role, the workers, the servers.
        The values reach the roles on their wrappers' stdin, never on a command line.
    workdir : str, optional
        Where the roles run (default: the current directory).
    sync_dst_dir : str, optional
        Copy the current directory there on every host (rsync) and run the roles in it.
    ssh_config : str, optional
        An ssh configuration file for the ssh client (``ssh -F``).
    stop_seconds : float, default 60
        When the launch is interrupted (KeyboardInterrupt, or SystemExit from a SIGTERM
        handler), the workers are stopped first: each gets SIGTERM and this long to finish its
        step and write its checkpoint (``fit`` does both); then the servers and the scheduler
        are ended. After a worker's stop the workers still running get the same. A failure or
        a timeout ends every role at once.
    port : int, optional
        The scheduler's port (default: a free one of 9091-9999, the dmlc tracker's range).
    max_restarts : int, default 0
        When a role fails (killed by a signal, a non-zero exit), every role is ended and the job is
        started again, on a new scheduler port, up to this many times; the exit code is the
        last attempt's. Every role finds its attempt in ``GLUONKIT_LAUNCH_ATTEMPT`` (0, then
        1, 2, ...): the recipes then resume from the newest checkpoint every worker saved, as
        ``fit`` does with ``ModelCheckpoint(resume=True)``. A timeout, an interruption and a
        worker's stop (it exited with 130 or 143 after SIGINT or SIGTERM, as ``fit`` does once
        every worker has stopped after the same update and written its checkpoint) end the job:
        the stop is the job's, as if the launcher had got the signal.
    min_workers : int, optional
        With ``max_restarts``: a restart after a worker was lost (killed by a signal, or its
        host stopped answering ssh) runs on the workers that remain, at least this many
        (:mod:`~gluonkit.launch.restarts`); the servers and every ``DMLC_*`` count follow, and
        the workers left out come back at a later restart if their host answers. Fewer ends
        the job. Without it, every restart runs ``num_workers``.

    Returns
    -------
    int
        0 on success, 1 if a role failed, 124 on timeout, 130 or 143 when a worker stopped on
        SIGINT or SIGTERM (the first worker to end, if several did).

    Raises
    ------
    ValueError
        A bad option or host file, before anything starts.
    RuntimeError
        No port, a port lock directory that is not private, or a failed ``sync_dst_dir`` copy.

    Example::

        code = launch(["python", "train.py"], num_workers=2, num_servers=1, timeout=300)
    """
    num_workers, num_servers = _check(command, num_workers, num_servers, launcher, hostfile, timeout, workdir,
                                      sync_dst_dir, ssh_config, port, max_restarts, min_workers)
    extra = {kind: {**_parse_env(env, "--env"), **_parse_env(own, f"--env-{kind}")}
             for kind, own in (("scheduler", ()), ("server", env_server), ("worker", env_worker))}
    hosts = read_hostfile(hostfile) if launcher == "ssh" else None
    if hosts and not shutil.which("ssh"):
        raise ValueError("launcher='ssh' needs the ssh client; install it (apt-get install openssh-client).")
    if host_ip is None:
        host_ip = "127.0.0.1" if launcher == "local" else _tracker_host_ip()
    if sync_dst_dir or workdir is None:
        workdir = sync_dst_dir or os.getcwd()
    elif launcher == "local":
        workdir = os.path.abspath(workdir)
    started = time.monotonic()
    ports = PORTS if port is None else [port]
    port, port_lock = reserve_port(ports)   # first: a refused lock directory leaves the hosts untouched
    try:
        if sync_dst_dir:
            _sync(hosts, sync_dst_dir, ssh_config, timeout)
        restarts = Restarts(max_restarts, num_workers, num_servers, hosts, min_workers, ssh_config)
        while True:
            if restarts.attempt:   # a new port: the last scheduler's may linger
                port_lock.close()
                port, port_lock = reserve_port(ports)
            say(f"scheduler at {host_ip}:{port}{restarts.heading()}")
            plan = [("scheduler", "scheduler", None, None)] + _plan(restarts.workers, restarts.servers, restarts.hosts)
            common = {"DMLC_NUM_WORKER": str(restarts.workers), "DMLC_NUM_SERVER": str(restarts.servers),
                      "DMLC_JOB_CLUSTER": launcher, **({"DMLC_INTERFACE": "lo"} if launcher == "local" else {}),
                      "DMLC_PS_ROOT_URI": host_ip, "DMLC_PS_ROOT_PORT": str(port),
                      "GLUONKIT_LAUNCH_ATTEMPT": str(restarts.attempt)}
            specs = [(name, kind, host, {"env": _role_env(common, kind, task_id, host, host_ip, extra[kind]),
                                         "workdir": workdir, "command": list(command)})
                     for name, kind, task_id, host in plan]
            code = _attempt(specs, ssh_config, started, timeout, stop_seconds, restarts.after_failure)
            if code != 1 or restarts.ended:   # a worker's stop (130, 143) is the job's: no restart
                return code
    finally:
        port_lock.close()


def _role_env(common, kind, task_id, host, host_ip, extra):
    """The ``DMLC_*`` variables (and the ``--env`` ones) of one role."""
    return dict(common, DMLC_ROLE=kind, DMLC_NODE_HOST=host.address if host else host_ip,
                **({"DMLC_TASK_ID": str(task_id)} if task_id is not None else {}), **extra)


def _attempt(specs, ssh_config, started, timeout, stop_seconds, after_failure):
    """Start every role of ``specs`` (name, kind, host, specification), supervise them, end them all;
    return the exit code. ``after_failure(failed, roles)`` says what follows a failure. After a
    worker's stop the other workers get ``stop_seconds`` to stop too, as on an interruption."""
    wake, roles, grace = queue.Queue(), [], None
    try:
        source = inspect.getsource(wrapper)
        for name, kind, host, spec in specs:
            if host:  # -I: the wrapper imports nothing from the directory it runs in (or lies in)
                spec["env"] = {**remote_env(os.environ), **spec["env"]}
                argv = ssh_command(host, [sys.executable, "-I", "-c", source], ssh_config)
            else:
                argv = [sys.executable, "-I", wrapper.__file__]
            roles.append(_Role(name, kind, host, argv, spec, wake))
        code = _supervise(roles, wake, started, timeout, after_failure)
        if _stop_signal(code):
            grace = stop_seconds
        return code
    except (KeyboardInterrupt, SystemExit):
        grace = stop_seconds
        raise
    finally:
        _end(roles, grace)


def _tracker_host_ip():
    from dmlc_tracker import tracker  # ships with the mxnet wheel
    return tracker.get_host_ip("auto")


def _sync(hosts, remote_dir, ssh_config, timeout):
    distinct = list(dict.fromkeys(hosts))
    say(f"copying {os.getcwd()} to {remote_dir} on {len(distinct)} host(s)")
    with ThreadPoolExecutor(len(distinct)) as pool:
        for future in [pool.submit(sync_dir, os.getcwd(), h, remote_dir, ssh_config, timeout)
                       for h in distinct]:
            future.result()


def _supervise(roles, wake, started, timeout, after_failure):
    workers = [r for r in roles if r.kind == "worker"]
    finished_at = None
    while True:
        now = time.monotonic()
        workers_done = all(r.code == 0 for r in workers)
        for role in roles:
            if role.failed_at is None and role.failure(workers_done):
                role.failed_at = now
        failed = sorted((r for r in roles if r.failed_at is not None), key=lambda r: r.failed_at)
        if failed:
            role = failed[0]
            tail = "".join(f"\n    {line}" for line in role.tail)
            then = after_failure(failed, roles)
            say(f"{role.failure(workers_done)}; {then}."
                + (" Its last lines on stderr:" + tail if tail else ""))   # one message: its lines stay together
            return 1
        stopped = sorted((r for r in workers if r.stopped_by), key=lambda r: r.exited_at)
        if stopped:
            role = stopped[0]
            name = role.stopped_by.name
            say(f"the job stopped on a {name}: {role.name}{role.where} ended first (exit code {role.code}, as fit "
                "exits after writing its checkpoint); ending it without a restart (a recipe's run continues "
                "from its checkpoints with --resume).")
            return role.code
        if workers_done:
            finished_at = finished_at or now
            if all(r.client_code is not None for r in roles) or now - finished_at > _GRACE_SECONDS:
                return 0   # servers still running after the grace period are ended with the rest
        if timeout is not None and now - started > timeout:
            running = [r.name for r in roles if r.code is None]
            say(f"timed out after {timeout:g} s; still running: {', '.join(running) or 'nothing yet'}. "
                 "Ending every process.")
            return TIMEOUT_EXIT_CODE
        try:
            wake.get(timeout=0.2)
        except queue.Empty:
            pass


def _end(roles, grace=None):
    """End every role on every host and say which could not be confirmed gone.

    With ``grace`` (an interruption, or a worker's stop), the workers still running are
    stopped first and get that many seconds after SIGTERM to write their checkpoints, while
    the servers and the scheduler they need keep running; an interruption meanwhile ends
    everything at once.
    """
    workers = [r for r in roles if r.kind == "worker" and r.client_code is None]
    if grace and workers:
        say(f"stopping the workers first: each finishes its step and writes its checkpoint (up to {grace:g} s), "
            "then the servers and the scheduler. A signal to the launcher now ends every process at once.")
        try:
            for role in workers:
                role.stop(grace)
            deadline = time.monotonic() + grace + _END_SECONDS
            for role in workers:
                role.wait_ended(deadline)
        except (KeyboardInterrupt, SystemExit):
            say("interrupted: ending every process now.")
    for role in roles:
        role.stop()
    deadline = time.monotonic() + _END_SECONDS
    for role in roles:
        role.wait_ended(deadline)
    unsure = [f"{r.name}{r.where} (pid {r.pid})" for r in roles if r.pid is not None and r.left != 0]
    if unsure:
        say(f"could not confirm that every process ended: {', '.join(unsure)}; check those hosts.")
    elif grace:
        say("every process ended.")
