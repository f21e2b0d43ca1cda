"""The ssh launcher's host file, its ssh and rsync commands, and what a host file may not hold."""
import json
import os
import shlex
import stat
import sys
import tempfile

import pytest

from gluonkit.launch import Host, hosts, launch

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
               "-o", "ServerAliveCountMax=3"]


def test_hostfile_forms_comments_and_blank_lines(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("# the cluster\n\nnode1\n  node2:2222  # spare port\nalice@10.0.0.3:22\nbob@[fe80::1]:2200\n"
                    "[::1]\nrun_user.x@node-3.example.org:2201\n[fe80::1%eth0]\n")
    assert hosts.read_hostfile(str(path)) == [
        Host(None, "node1", 22), Host(None, "node2", 2222), Host("alice", "10.0.0.3", 22),
        Host("bob", "fe80::1", 2200), Host(None, "::1", 22), Host("run_user.x", "node-3.example.org", 2201),
        Host(None, "fe80::1%eth0", 22)]
    assert str(Host("alice", "10.0.0.3", 22)) == "alice@10.0.0.3:22"


@pytest.mark.parametrize("text, fix", [("node1:ssh\n", "line 1: 'node1:ssh' is not a host"),
                                       ("ok\nnode:70000\n", "line 2: 'node:70000' is not a host"),
                                       ("a b\n", "line 1: 'a b'"),
                                       ("# nobody\n\n", "names no host")])
def test_bad_hostfiles_name_the_line_and_the_forms(tmp_path, text, fix):
    path = tmp_path / "hosts.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match="is not a host|names no host") as info:
        hosts.read_hostfile(str(path))
    assert fix in str(info.value)


@pytest.mark.parametrize("content, message", [
    (b"node1\nn\xe9ud2\n", "is not UTF-8 text; write one host per line"),
    (b"node1\n" + b"x" * 5000 + b"\n", ", line 2 is longer than 1000 characters"),
])
def test_host_files_that_are_not_short_text_lines_are_refused_naming_them(tmp_path, content, message):
    path = tmp_path / "hosts.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        hosts.read_hostfile(str(path))
    assert str(path) in str(info.value) and message in str(info.value)


def test_remote_command_keeps_every_argument_exactly():
    argv = ["python", "train.py", "", "two words", "it's", '$HOME "x"', "a;b"]
    command = hosts.ssh_command(Host("u", "h", 2222), argv)
    assert command[:4] == ["ssh", "-T", "-p", "2222"] and command[-3:-1] == ["--", "h"]
    assert command[command.index("-l") + 1] == "u"
    assert shlex.split(command[-1]) == ["exec"] + argv   # what the remote shell parses


def test_forwarded_environment_is_paths_python_threads_and_mxnet():
    env = {"PATH": "/v/bin", "VIRTUAL_ENV": "/v", "PYTHONPATH": "/src", "OMP_NUM_THREADS": "2",
           "MXNET_ENGINE_TYPE": "NaiveEngine", "DMLC_INTERFACE": "eth1", "SECRET_TOKEN": "x", "HOME": "/root"}
    assert hosts.remote_env(env) == {k: v for k, v in env.items() if k not in ("SECRET_TOKEN", "HOME")}


RECORDER = """\
import json, os, sys
with open(os.path.join({record!r}, os.path.basename(sys.argv[0]) + "-" + str(os.getpid())), "w") as f:
    json.dump(sys.argv[1:], f)
sys.exit(255)
"""


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """Put an ``ssh`` and an ``rsync`` first on PATH that record their arguments and fail; return a reader."""
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir()
    record.mkdir()
    for name in ("ssh", "rsync"):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n" + RECORDER.format(record=str(record)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def read(program):
        argvs = []
        for name in sorted(os.listdir(record)):
            if name.startswith(program + "-"):
                with open(record / name) as f:
                    argvs.append(json.load(f))
        return argvs
    return read


HOSTFILE = "node1\nalice@node-2:2200\n[fe80::1]:2222\n"
EXPECTED = {"node1": ["-p", "22"], "node-2": ["-p", "2200", "-l", "alice"], "fe80::1": ["-p", "2222"]}


def _options(host):
    port_and_user = EXPECTED[host]
    return ["-T", *port_and_user[:2], *SSH_OPTIONS, *port_and_user[2:], "--"]


def test_ssh_gets_only_the_launchers_options_then_dash_dash_then_the_host(tmp_path, recorded):
    path = tmp_path / "hosts.txt"
    path.write_text(HOSTFILE)
    code = launch([sys.executable, "-c", "import time; time.sleep(60)"], 2, 1, launcher="ssh", hostfile=str(path),
                  host_ip="127.0.0.1", timeout=60)
    assert code == 1                      # the recording ssh exits with 255: no role could start
    argvs = recorded("ssh")
    assert sorted(argv[argv.index("--") + 1] for argv in argvs) == sorted(EXPECTED)
    for argv in argvs:
        host = argv[argv.index("--") + 1]
        assert argv[:argv.index("--") + 1] == _options(host)
        assert argv[argv.index("--") + 2].startswith("exec ") and len(argv) == argv.index("--") + 3


def test_rsync_and_its_ssh_end_their_options_before_the_host(tmp_path, recorded, monkeypatch):
    path = tmp_path / "hosts.txt"
    path.write_text(HOSTFILE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="rsync exit code 255"):
        launch(["true"], 2, 1, launcher="ssh", hostfile=str(path), host_ip="127.0.0.1", sync_dst_dir="/srv/copy")
    argvs = recorded("rsync")
    assert len(argvs) == 3 and recorded("ssh") == []
    for argv in argvs:
        rsh = shlex.split(argv[argv.index("-e") + 1])
        target = argv[-1].rpartition(":/srv/copy")[0].strip("[]")
        assert argv[argv.index("-e") + 2:] == ["--", os.path.join(str(tmp_path), ""), argv[-1]]
        assert rsh == ["ssh"] + _options(target)   # rsync runs: this, then the host, then its own server


def test_a_refused_lock_directory_stops_the_launch_before_rsync_copies_anything(tmp_path, recorded, monkeypatch):
    path = tmp_path / "hosts.txt"
    path.write_text(HOSTFILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    os.symlink(tmp_path, tmp_path / f"gluonkit-launch-{os.geteuid()}")
    with pytest.raises(RuntimeError, match="port locks need a private directory, but .* is a link"):
        launch(["true"], 2, 1, launcher="ssh", hostfile=str(path), host_ip="127.0.0.1", sync_dst_dir="/srv/copy")
    assert recorded("rsync") == [] and recorded("ssh") == []


@pytest.mark.parametrize("entry, why", [
    ("-oProxyCommand=touch_pwned", "a name starts with '-'"),
    ("[-oProxyCommand=touch_pwned]", "a name starts with '-'"),
    ("alice@-oProxyCommand=touch_pwned", "a name starts with '-'"),
    ("-lroot", "a name starts with '-'"),
    ("node1 -oProxyCommand=touch_pwned", "it holds ' ', '='"),
    ("node1\t-p2", "it holds '\\t'"),
    ("node;touch_pwned", "it holds ';'"),
    ("$(touch_pwned)", "it holds '$', '(', ')'"),
    ("node`touch_pwned`", "it holds '`'"),
    ("node|x&y>z", "it holds '&', '>', '|'"),
    ("al'ice@node", "it holds \"'\""),
])
def test_host_entries_that_ssh_or_a_shell_would_misread_are_refused_before_any_ssh(tmp_path, recorded, entry,
                                                                                 why):
    path = tmp_path / "hosts.txt"
    path.write_text(f"node1\n{entry}  # the bad one\n")
    with pytest.raises(ValueError) as info:
        launch(["true"], 1, 1, launcher="ssh", hostfile=str(path), host_ip="127.0.0.1")
    assert str(info.value).startswith(f"{path}, line 2: {entry!r} is not a host ({why}")
    assert "write host, host:port or user@host:port" in str(info.value)
    assert recorded("ssh") == []
