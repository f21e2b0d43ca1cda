"""Where the roles of a launched job run: the host file, and the ssh and rsync commands that reach a host.

A host file has one host per line, ``host``, ``host:port`` or ``user@host:port`` (an IPv6
address in brackets: ``[fe80::1]:2222``); ``#`` starts a comment; blank lines are skipped.
Names are letters, digits, ``.``, ``_`` and ``-``, never starting with ``-``: an entry that
ssh or rsync could read as an option, or a shell as more than a word, is refused when the
file is read. Every ssh and rsync command also ends its options with ``--`` before the host.
"""
import collections
import os
import re
import shlex
import subprocess

__all__ = ["Host", "read_hostfile", "ssh_command", "remote_env", "sync_dir", "answers"]

Host = collections.namedtuple("Host", "user address port")
Host.__doc__ = "One line of a host file: ``user`` (or None), ``address``, ``port`` (int)."
Host.__str__ = lambda h: (f"{h.user}@" if h.user else "") + f"{h.address}:{h.port}"

_NAME = r"[A-Za-z0-9_][A-Za-z0-9._-]*"   # a user or host name: never an option
_LINE = re.compile(rf"(?:(?P<user>{_NAME})@)?(?:\[(?P<v6>[0-9A-Fa-f:.]+(?:%{_NAME})?)\]|(?P<host>{_NAME}))"
                   r"(?::(?P<port>[0-9]+))?")
_MAX_LINE = 1000   # characters: a host file line is short; a longer one is not a host file
_ODD = re.compile(r"[^A-Za-z0-9._\-:@\[\]%]")    # whitespace, shell metacharacters, anything else
_FORMS = ("write host, host:port or user@host:port (names of letters, digits, '.', '_' and '-', not starting "
          "with '-'; port 1-65535)")
# variables a remote role gets from the launcher's environment, besides --env
_FORWARDED_NAMES = ("PATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
_FORWARDED_PREFIXES = ("PYTHON", "OMP_", "KMP_", "MXNET_", "DMLC_", "PS_")
# fail fast on a host that does not answer, and notice a host that goes away mid-job
_SSH_OPTIONS = ("BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=5", "ServerAliveCountMax=3")


def _why_not(text):
    """Why ``text`` is not a host entry (a phrase)."""
    if re.search(r"(^|[@\[])-", text):
        return "a name starts with '-', which ssh would read as an option"
    odd = sorted(set(_ODD.findall(text)))
    if odd:
        return f"it holds {', '.join(map(repr, odd))}: no whitespace or shell metacharacters"
    return "it has none of the forms"


def _lines(path):
    """(number, line) of each line of ``path``; ``ValueError`` for a file that is not short lines of text."""
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(iter(lambda: f.readline(_MAX_LINE + 1), ""), 1):
                if len(line) > _MAX_LINE:
                    raise ValueError(f"{path}, line {number} is longer than {_MAX_LINE} characters; write one "
                                     "host per line.")
                yield number, line
    except UnicodeDecodeError:
        raise ValueError(f"The host file {path!r} is not UTF-8 text; write one host per line.") from None
    except OSError as err:
        raise ValueError(f"Cannot read the host file {path!r}: {err.strerror}.") from None


def read_hostfile(path):
    """The hosts of ``path`` as a list of :class:`Host`; ``ValueError`` names the file, line and entry."""
    hosts = []
    for number, line in _lines(path):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        match = _LINE.fullmatch(text)
        port = int(match.group("port") or 22) if match else 0
        if not match or not 0 < port < 65536:
            why = _why_not(text) if not match else "the port is out of range"
            raise ValueError(f"{path}, line {number}: {text!r} is not a host ({why}); {_FORMS}.")
        hosts.append(Host(match.group("user"), match.group("v6") or match.group("host"), port))
    if not hosts:
        raise ValueError(f"The host file {path!r} names no host; write one host per line.")
    return hosts


def _ssh_options(host, ssh_config):
    """The ssh client and its options for ``host``, ending with ``--``: the host comes next."""
    command = ["ssh", "-T", "-p", str(host.port)]
    for option in _SSH_OPTIONS:
        command += ["-o", option]
    if ssh_config:
        command += ["-F", ssh_config]
    if host.user:
        command += ["-l", host.user]
    return command + ["--"]


def ssh_command(host, remote_argv, ssh_config=None):
    """The ssh client's argv that runs ``remote_argv`` on ``host``, every argument quoted."""
    return _ssh_options(host, ssh_config) + [host.address, "exec " + shlex.join(remote_argv)]


def answers(host, ssh_config=None):
    """Whether ``host`` runs a command over ssh now (``true``, within the connection timeout)."""
    try:
        result = subprocess.run(ssh_command(host, ["true"], ssh_config), stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


def remote_env(environ):
    """The part of ``environ`` a role on another host needs: paths, Python, threads, MXNet."""
    return {k: v for k, v in environ.items() if k in _FORWARDED_NAMES or k.startswith(_FORWARDED_PREFIXES)}


def sync_dir(local_dir, host, remote_dir, ssh_config=None, timeout=None):
    """Copy ``local_dir`` into ``remote_dir`` on ``host`` with rsync over ssh; ``RuntimeError`` if it fails.

    rsync puts the host right after the ``-e`` command, whose options (the user included)
    end with ``--``; rsync's own options end with ``--`` too.
    """
    rsh = shlex.join(_ssh_options(host, ssh_config))
    target = f"[{host.address}]" if ":" in host.address else host.address
    command = ["rsync", "-az", "--protect-args", "-e", rsh, "--", os.path.join(local_dir, ""),
               f"{target}:{remote_dir}"]
    try:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise RuntimeError("--sync-dst-dir needs rsync on this machine and on every host; install it "
                           "(apt-get install rsync).") from None
    if result.returncode != 0:
        raise RuntimeError(f"copying {local_dir!r} to {host}:{remote_dir} failed (rsync exit code "
                           f"{result.returncode}): {result.stderr.strip()}")
