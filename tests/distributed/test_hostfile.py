"""The ssh launcher's host file, quoting and scheduler ports, without starting any process."""
import shlex

import pytest

from gluonkit import _launch_hosts
from gluonkit._launch_hosts import Host


def test_hostfile_forms_comments_and_blank_lines(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("# the cluster\n\nnode1\n  node2:2222  # spare port\nalice@10.0.0.3:22\nbob@[fe80::1]:2200\n"
                    "[::1]\n")
    assert _launch_hosts.read_hostfile(str(path)) == [
        Host(None, "node1", 22), Host(None, "node2", 2222), Host("alice", "10.0.0.3", 22),
        Host("bob", "fe80::1", 2200), Host(None, "::1", 22)]
    assert str(Host("alice", "10.0.0.3", 22)) == "alice@10.0.0.3:22"


@pytest.mark.parametrize("text, fix", [("node1:ssh\n", "line 1: 'node1:ssh' is not a host"),
                                       ("ok\nnode:70000\n", "line 2: 'node:70000' is not a host"),
                                       ("a b\n", "line 1: 'a b'"),
                                       ("# nobody\n\n", "names no host")])
def test_bad_hostfiles_name_the_line_and_the_forms(tmp_path, text, fix):
    path = tmp_path / "hosts.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match="is not a host|names no host") as info:
        _launch_hosts.read_hostfile(str(path))
    assert fix in str(info.value)


def test_remote_command_keeps_every_argument_exactly():
    argv = ["python", "train.py", "", "two words", "it's", '$HOME "x"', "a;b"]
    command = _launch_hosts.ssh_command(Host("u", "h", 2222), argv)
    assert command[:4] == ["ssh", "-T", "-p", "2222"] and command[-2] == "h"
    assert command[command.index("-l") + 1] == "u"
    assert shlex.split(command[-1]) == ["exec"] + argv   # what the remote shell parses


def test_forwarded_environment_is_paths_python_threads_and_mxnet():
    env = {"PATH": "/v/bin", "VIRTUAL_ENV": "/v", "PYTHONPATH": "/src", "OMP_NUM_THREADS": "2",
           "MXNET_ENGINE_TYPE": "NaiveEngine", "DMLC_INTERFACE": "eth1", "SECRET_TOKEN": "x", "HOME": "/root"}
    assert _launch_hosts.remote_env(env) == {k: v for k, v in env.items() if k not in ("SECRET_TOKEN", "HOME")}


def test_reserved_ports_differ_while_held():
    port, lock = _launch_hosts.reserve_port()
    other, other_lock = _launch_hosts.reserve_port()
    assert other != port
    lock.close()
    other_lock.close()
