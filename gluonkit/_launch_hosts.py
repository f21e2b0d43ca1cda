"""Where the roles of a launched job run: the host file, ssh commands, the scheduler's port.

A host file has one host per line, ``host``, ``host:port`` or ``user@host:port`` (an IPv6
address in brackets: ``[fe80::1]:2222``); ``#`` starts a comment; blank lines are skipped.
"""
import collections
import errno
import fcntl
import os
import random
import re
import shlex
import socket
import subprocess
import tempfile

__all__ = ["Host", "read_hostfile", "ssh_command", "remote_env", "sync_dir", "reserve_port"]

Host = collections.namedtuple("Host", "user address port")
Host.__doc__ = "One line of a host file: ``user`` (or None), ``address``, ``port`` (int)."
Host.__str__ = lambda h: (f"{h.user}@" if h.user else "") + f"{h.address}:{h.port}"

_LINE = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\s\[\]]+))(?::(?P<port>\d+))?$")
# variables a remote role gets from the launcher's environment, besides --env
_FORWARDED_NAMES = ("PATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
_FORWARDED_PREFIXES = ("PYTHON", "OMP_", "KMP_", "MXNET_", "DMLC_", "PS_")
# fail fast on a host that does not answer, and notice a host that goes away mid-job
_SSH_OPTIONS = ("BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=5", "ServerAliveCountMax=3")
_PORTS = list(range(9091, 10000))  # the dmlc tracker's range


def read_hostfile(path):
    """The hosts of ``path`` as a list of :class:`Host`; ``ValueError`` names a bad line."""
    hosts = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            match = _LINE.match(text)
            port = int(match.group("port") or 22) if match else 0
            if not match or not 0 < port < 65536:
                raise ValueError(f"{path}, line {number}: {text!r} is not a host; write host, host:port "
                                 "or user@host:port (port 1-65535).")
            hosts.append(Host(match.group("user"), match.group("v6") or match.group("host"), port))
    if not hosts:
        raise ValueError(f"The host file {path!r} names no host; write one host per line.")
    return hosts


def _ssh_base(host, ssh_config):
    command = ["ssh", "-T", "-p", str(host.port)]
    for option in _SSH_OPTIONS:
        command += ["-o", option]
    if ssh_config:
        command += ["-F", ssh_config]
    if host.user:
        command += ["-l", host.user]
    return command


def ssh_command(host, remote_argv, ssh_config=None):
    """The ssh client's argv that runs ``remote_argv`` on ``host``, every argument quoted."""
    return _ssh_base(host, ssh_config) + [host.address, "exec " + shlex.join(remote_argv)]


def remote_env(environ):
    """The part of ``environ`` a role on another host needs: paths, Python, threads, MXNet."""
    return {k: v for k, v in environ.items() if k in _FORWARDED_NAMES or k.startswith(_FORWARDED_PREFIXES)}


def sync_dir(local_dir, host, remote_dir, ssh_config=None, timeout=None):
    """Copy ``local_dir`` into ``remote_dir`` on ``host`` with rsync over ssh; ``RuntimeError`` if it fails."""
    rsh = shlex.join(_ssh_base(host, ssh_config))
    target = (f"{host.user}@" if host.user else "") + (f"[{host.address}]" if ":" in host.address else host.address)
    command = ["rsync", "-az", "--protect-args", "-e", rsh, os.path.join(local_dir, ""), f"{target}:{remote_dir}"]
    try:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise RuntimeError("--sync-dst-dir needs rsync on this machine and on every host; install it "
                           "(apt-get install rsync).") from None
    if result.returncode != 0:
        raise RuntimeError(f"copying {local_dir!r} to {host}:{remote_dir} failed (rsync exit code "
                           f"{result.returncode}): {result.stderr.strip()}")


def reserve_port():
    """A free TCP port for the scheduler, and the open lock file that reserves it.

    The dmlc tracker probes a port and closes it before the scheduler binds, so two jobs
    started together can take the same one. Here each port is also locked (``flock`` on a
    file named after it in the temporary directory) for as long as the returned file is
    open, so launches on one machine never pick the same port. Close the file when the job
    is over. The search starts at a random port of the range, which makes a clash with a
    launcher that does not lock (the dmlc tracker starts at 9091) unlikely too.
    """
    start = random.randrange(len(_PORTS))
    for port in _PORTS[start:] + _PORTS[:start]:
        path = os.path.join(tempfile.gettempdir(), f"gluonkit-launch-port-{port}.lock")
        try:  # read-only, so that other users can lock the file too
            lock = os.fdopen(os.open(path, os.O_RDONLY | os.O_CREAT, 0o644))
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            lock.close()
            if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                continue
            raise
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("", port))
            except OSError:
                lock.close()
                continue
        return port, lock
    raise RuntimeError(f"No free port for the scheduler in {_PORTS[0]}-{_PORTS[-1]}.")
