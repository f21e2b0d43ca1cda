"""Two simulated hosts for the ssh launcher: network namespaces joined by a veth pair, each with its own sshd.

Host A (10.77.0.1, sshd on port 22) is also where the launcher runs; host B (10.77.0.2) has
its sshd on port 2222. Host and user keys are made for the occasion; the ssh client gets its
own configuration file (key, known hosts), so nothing outside ``root`` is read or written.
``cut('B')`` makes host B stop answering (its link down: the launcher's ssh connections to it
break, and its sshd ends their sessions, and so their roles, within 8 s); ``restore('B')``
brings it back. Needs root, ``ip`` (iproute2) and ``sshd`` (openssh-server).
"""
import os
import shutil
import signal
import subprocess
import time

__all__ = ["SimulatedHosts", "missing"]

SUBNET = "10.77.0"
_SSHD_CONFIG = """\
ListenAddress {address}
Port {port}
HostKey {root}/host_key
AuthorizedKeysFile {root}/authorized_keys
PidFile {root}/sshd-{name}.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
ClientAliveInterval 2
ClientAliveCountMax 3
"""
_SSH_CONFIG = """\
Host *
    IdentityFile {root}/user_key
    IdentitiesOnly yes
    UserKnownHostsFile {root}/known_hosts
    StrictHostKeyChecking yes
    LogLevel ERROR
"""


_PACKAGES = {"ip": "iproute2", "sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client",
             "rsync": "rsync"}


def _tool(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def missing():
    """Why the simulated hosts cannot be made here (a sentence), or None."""
    if os.geteuid() != 0:
        return "not running as root (network namespaces and sshd need it)"
    absent = sorted({package for tool, package in _PACKAGES.items() if not _tool(tool)})
    if absent:
        return f"{', '.join(absent)} not installed"
    return None


def _run(*argv):
    subprocess.run([_tool(argv[0])] + list(argv[1:]), check=True, capture_output=True, text=True, timeout=30)


class SimulatedHosts:
    """Make the two hosts under ``root`` (a directory); ``close()`` removes them.

    ``hosts`` maps ``'A'``/``'B'`` to (namespace, address, port).
    """

    def __init__(self, root):
        self.root = str(root)
        tag = f"gk{os.getpid() % 100000}"
        self.hosts = {"A": (f"{tag}a", f"{SUBNET}.1", 22), "B": (f"{tag}b", f"{SUBNET}.2", 2222)}
        self._sshd = {}
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self):
        sshd = _tool("sshd")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        for key in ("host_key", "user_key"):
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.root, key))
        shutil.copy(os.path.join(self.root, "user_key.pub"), os.path.join(self.root, "authorized_keys"))
        with open(os.path.join(self.root, "host_key.pub")) as f:
            host_key = " ".join(f.read().split()[:2])
        with open(os.path.join(self.root, "known_hosts"), "w") as f:
            for _, address, port in self.hosts.values():
                f.write(f"{address if port == 22 else f'[{address}]:{port}'} {host_key}\n")
        with open(self.ssh_config, "w") as f:
            f.write(_SSH_CONFIG.format(root=self.root))
        (ns_a, _, _), (ns_b, _, _) = self.hosts["A"], self.hosts["B"]
        for ns in (ns_a, ns_b):
            _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", f"{ns_a}v", "netns", ns_a, "type", "veth", "peer", "name", f"{ns_b}v",
             "netns", ns_b)
        for name, (ns, address, port) in self.hosts.items():
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", f"{ns}v")
            _run("ip", "-n", ns, "link", "set", f"{ns}v", "up")
            config = os.path.join(self.root, f"sshd-{name}.conf")
            with open(config, "w") as f:
                f.write(_SSHD_CONFIG.format(address=address, port=port, root=self.root, name=name))
            self._sshd[name] = subprocess.Popen([_tool("ip"), "netns", "exec", ns, sshd, "-D", "-e", "-f", config],
                                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for name in self.hosts:
            self._wait_for_sshd(name)

    @property
    def ssh_config(self):
        return os.path.join(self.root, "ssh_config")

    def _wait_for_sshd(self, name):
        _, address, port = self.hosts[name]
        deadline = time.monotonic() + 20
        while True:
            result = self.run(["ssh", "-F", self.ssh_config, "-p", str(port), "-o", "BatchMode=yes",
                               f"root@{address}", "true"], capture_output=True, text=True, timeout=20)
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on host {name} does not answer: {result.stderr}")
            time.sleep(0.2)

    def cut(self, name):
        """Host ``name`` stops answering: its end of the link goes down."""
        ns = self.hosts[name][0]
        _run("ip", "-n", ns, "link", "set", f"{ns}v", "down")

    def restore(self, name):
        """Host ``name`` answers again (its link up)."""
        ns, address, _ = self.hosts[name]
        _run("ip", "-n", ns, "link", "set", f"{ns}v", "up")
        self._wait_for_sshd(name)

    def on_a(self, argv):
        """``argv`` made to run on host A (the process keeps its pid: ``ip netns exec`` execs it)."""
        return [_tool("ip"), "netns", "exec", self.hosts["A"][0]] + list(argv)

    def run(self, argv, **kwargs):
        """``subprocess.run`` of ``argv`` on host A."""
        return subprocess.run(self.on_a(argv), **kwargs)

    def strays(self):
        """Processes in either namespace other than the two sshd daemons (pids)."""
        daemons = {p.pid for p in self._sshd.values()}
        pids = set()
        for ns, _, _ in self.hosts.values():
            out = subprocess.run([_tool("ip"), "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout
            pids.update(int(p) for p in out.split())
        return sorted(pids - daemons)

    def wait_for_no_strays(self, seconds=10):
        """``strays()`` once empty, or when ``seconds`` have passed (sshd needs a moment per connection)."""
        deadline = time.monotonic() + seconds
        while self.strays() and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.strays()

    def close(self):
        for proc in self._sshd.values():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for ns, _, _ in self.hosts.values():
            subprocess.run([_tool("ip"), "netns", "del", ns], capture_output=True, timeout=30)
