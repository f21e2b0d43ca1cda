"""The ssh launcher across two simulated hosts (network namespaces, each with its own sshd).

Host A runs the launcher, the scheduler, server 0 and worker 1; host B runs worker 0 (the
dmlc tracker's placement: servers, then workers, in turn over the host file).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid

import pytest
from numpy.testing import assert_allclose

from command_lines import WAITING_ROLE, leaks, role_files, wait_for_files
from gluonkit import Checkpoint
from gluonkit.params import select
from gluonkit.recipes.models import build_model
from job_check import JOB, assert_trained_like_one_process
from simulated_hosts import SimulatedHosts, missing
from watch import Watched

REQUIRE = "GLUONKIT_REQUIRE_SSH_TESTS"


def _cannot(reason):
    message = (f"the ssh launcher tests cannot simulate two hosts here: {reason}. Run them as root with "
               f"openssh-server, iproute2 and rsync installed, as .ci/run does (it also sets {REQUIRE}=1).")
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{message} {REQUIRE}=1 forbids skipping them.")
    pytest.skip(message)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Two hosts (network namespaces with their own sshd); skipped with the reason where impossible."""
    reason = missing()
    if reason:
        _cannot(reason)
    try:
        made = SimulatedHosts(tmp_path_factory.mktemp("hosts"))
    except (subprocess.CalledProcessError, RuntimeError, OSError) as err:
        detail = getattr(err, "stderr", None) or err
        _cannot(f"making them failed ({str(detail).strip()})")
    yield made
    made.close()


HOSTFILE = "# two simulated hosts\n\n{a}\nroot@{b}:2222  # the second one\n"


def _launch(hosts, tmp_path, job_argv, timeout, *options, hostfile=None, ssh_config=None, cwd=None, env=None):
    """Start ``gluonkit.launch --launcher ssh`` (2 workers, 1 server) on host A; return a Watched."""
    path = tmp_path / "hosts.txt"
    path.write_text(hostfile or HOSTFILE.format(a=hosts.hosts["A"][1], b=hosts.hosts["B"][1]))
    argv = [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--launcher", "ssh", "-H", str(path),
            "--ssh-config", ssh_config or hosts.ssh_config, "--host-ip", hosts.hosts["A"][1],
            "--timeout", str(timeout), *options, "--", *job_argv]
    return Watched(hosts.on_a(argv), timeout=timeout + 60, cwd=cwd or tmp_path, env=env)


def test_two_hosts_train_like_one_process_with_arguments_and_environment_intact(hosts, tmp_path):
    project, copy, out = tmp_path / "project", tmp_path / "copy", tmp_path / "out"
    project.mkdir()
    out.mkdir()
    shutil.copy(JOB, project / "dist_job.py")
    arguments = ["", "two words", "it's", '$HOME "quoted"', "a;b"]
    note = "it's a note; $HOME"
    run = _launch(hosts, tmp_path, [sys.executable, "dist_job.py", str(out), "train", *arguments], 120,
                  "--sync-dst-dir", str(copy), "--env-worker", "GLUONKIT_JOB_NOTE", cwd=project,
                  env=dict(os.environ, GLUONKIT_JOB_NOTE=note))
    code, output = run.finish()
    assert code == 0, output[-3000:]
    assert_trained_like_one_process(out)
    records = []
    for rank in (0, 1):
        with open(out / f"worker{rank}.json") as f:
            records.append(json.load(f))
    for record in records:
        assert record["argv"] == arguments
        assert record["cwd"] == str(copy)          # ran in the copy --sync-dst-dir made
        assert record["note"] == note              # --env-worker NAME passes this machine's value
    assert sorted(r["task_id"] for r in records) == ["0", "1"]
    places = set(re.findall(r"worker \d started \(pid \d+\) on (\S+)", output))
    assert places == {f"{hosts.hosts['A'][1]}:22", f"root@{hosts.hosts['B'][1]}:2222"}
    assert hosts.wait_for_no_strays() == []


def test_environment_values_reach_the_remote_roles_and_no_command_line_on_either_host(hosts, tmp_path):
    secret, worker_secret = f"gk-secret-{uuid.uuid4().hex}", f"gk-worker-{uuid.uuid4().hex}"
    out = tmp_path / "out"
    out.mkdir()
    run = _launch(hosts, tmp_path, [sys.executable, "-c", WAITING_ROLE, str(out)], 60, "--env", "GK_SECRET",
                  "--env-worker", "GK_WORKER_SECRET",
                  env=dict(os.environ, GK_SECRET=secret, GK_WORKER_SECRET=worker_secret))
    try:
        wait_for_files(out, role_files(2, 1))
        seen = leaks([secret, worker_secret])
    finally:
        (out / "stop").touch()
    code, output = run.finish()
    assert code == 0, output[-3000:]
    assert seen == []
    for name in role_files(2, 1)[1:]:     # the scheduler runs here, in the launcher's own environment
        assert (out / name).read_text() == f"{secret} {worker_secret if 'worker' in name else '-'}"
    assert (out / "scheduler").read_text().startswith(f"{secret} ")
    assert re.search(r"worker \d started \(pid \d+\) on root@", output)   # one ran on the other host
    assert hosts.wait_for_no_strays() == []


def _slow_job(tmp_path, mode="slow"):
    return [sys.executable, JOB, str(tmp_path), mode]


def test_a_worker_killed_on_the_other_host_ends_the_job_everywhere(hosts, tmp_path):
    run = _launch(hosts, tmp_path, _slow_job(tmp_path), 90)
    host_b = f"root@{hosts.hosts['B'][1]}:2222"
    pid = int(run.wait_for(rf"worker 0 started \(pid (\d+)\) on {re.escape(host_b)}").group(1))
    run.wait_for(r"worker \d step 5")
    os.kill(pid, signal.SIGKILL)   # the namespaces share this machine's process ids
    code, output = run.finish()
    assert code == 1, output[-3000:]
    assert f"worker 0 on {host_b} was killed by SIGKILL; ending the job" in output
    assert hosts.wait_for_no_strays() == []


def test_a_role_that_raises_ends_the_job_at_once_naming_it_and_its_error(hosts, tmp_path):
    workdir = os.path.dirname(JOB)    # the program is given relative to --workdir
    run = _launch(hosts, tmp_path, [sys.executable, os.path.basename(JOB), str(tmp_path), "raise"], 120,
                  "--workdir", workdir)
    code, output = run.finish()
    assert code == 1, output[-3000:]   # not 124: noticed at once, not left hanging until the timeout
    assert re.search(r"worker \d on \S+ exited with code 1; ending the job", output)
    report = output[output.index("exited with code 1; ending the job"):]
    assert "ValueError: worker 1 gives up at step 3" in report
    assert hosts.wait_for_no_strays() == []


def test_timeout_ends_every_process_on_every_host(hosts, tmp_path):
    run = _launch(hosts, tmp_path, _slow_job(tmp_path), 8)
    code, output = run.finish()
    assert code == 124, output[-3000:]
    assert re.search(r"timed out after 8 s; still running: .*worker 0", output)
    assert hosts.wait_for_no_strays() == []


def test_sigterm_to_the_launcher_ends_every_process_on_every_host(hosts, tmp_path):
    run = _launch(hosts, tmp_path, _slow_job(tmp_path), 90)
    run.wait_for(r"worker \d step 3")
    run.proc.send_signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert hosts.wait_for_no_strays() == []


def test_a_refused_connection_and_a_refused_key_name_the_host(hosts, tmp_path):
    closed_port = f"{hosts.hosts['A'][1]}:2"
    run = _launch(hosts, tmp_path, _slow_job(tmp_path), 60, hostfile=closed_port + "\n")
    code, output = run.finish()
    assert code == 1, output[-3000:]
    assert f"could not be started on {closed_port} (ssh exited with code 255)" in output
    assert "Connection refused" in output
    stranger = tmp_path / "stranger_key"
    hosts.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30)
    config = tmp_path / "ssh_config"
    with open(hosts.ssh_config) as f:
        config.write_text(re.sub(r"IdentityFile \S+", f"IdentityFile {stranger}", f.read()))
    run = _launch(hosts, tmp_path, _slow_job(tmp_path), 60, ssh_config=str(config))
    code, output = run.finish()
    assert code == 1, output[-3000:]
    assert re.search(r"could not be started on \S+ \(ssh exited with code 255\)", output)
    assert "Permission denied (publickey)" in output
    assert hosts.wait_for_no_strays() == []



CLASSIFY_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "classify_stop_job.py")


def _classify_jobs(hosts, tmp_path, faults, *options):
    """2 workers of ``gluonkit-classify`` on the two hosts (``faults``: classify_stop_job.py's) and 2
    on this machine never interrupted, both started; (run, never)."""
    classify = ["--epochs", "2", "--limit", "200", "--batch-size", "16", "--micro-batch", "4", "--no-progress",
                "--kvstore", "dist_sync"]
    never = Watched([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "200", "--",
                     sys.executable, CLASSIFY_JOB, *classify, "--out", str(tmp_path / "never")],
                    timeout=300, cwd=tmp_path)
    run = _launch(hosts, tmp_path, [sys.executable, CLASSIFY_JOB, *faults, *classify, "--out", str(tmp_path / "run")],
                  240, *options)
    return run, never


def _latest(folder):
    net = build_model("cnn", 10)
    state = Checkpoint(folder).load(net)
    return state["epoch"], {name: p.data().asnumpy() for name, p in select(net).items()}


def _assert_like_never(tmp_path, never):
    code, output = never.finish()
    assert code == 0, output[-3000:]
    epoch, expected = _latest(tmp_path / "never" / "checkpoints")
    got_epoch, got = _latest(tmp_path / "run" / "checkpoints")
    assert epoch == got_epoch == 2
    for name, value in expected.items():   # the 2 workers resumed their own checkpoint of epoch 1: to rounding
        tolerance = dict(rtol=1e-4, atol=1e-5) if "running" in name else dict(rtol=1e-5, atol=1e-6)
        assert_allclose(got[name], value, err_msg=name, **tolerance)


def test_a_host_that_stops_answering_is_left_out_then_back_at_the_next_restart_and_ends_like_one_never_interrupted(
        hosts, tmp_path):
    # attempt 1 (on host A alone) raises in epoch 2: the restart after it runs on both hosts again
    run, never = _classify_jobs(hosts, tmp_path, ["raise:0:1:1"], "--max-restarts", "2", "--min-workers", "1")
    run.wait_for(r"Saved checkpoint")    # the first epoch's; host B (worker 0) stops answering in the second
    hosts.cut("B")
    try:
        run.wait_for(r"then starting them again on 1 of 2 worker\(s\)")
    finally:   # the restart is planned without B; B answers again long before that attempt's worker raises
        hosts.restore("B")
    code, output = run.finish()
    assert code == 0, output[-3000:]
    host_a, host_b = f"{hosts.hosts['A'][1]}:22", f"root@{hosts.hosts['B'][1]}:2222"
    assert (f"worker 0 on {host_b}: the ssh connection ended with code 255 before the role finished; ending every "
            "role, then starting them again on 1 of 2 worker(s) (2 restart(s) left).") in output
    assert f"(restart 1 of 2) on 1 of 2 worker(s): {host_b} stopped answering; worker 0 lost" in output
    _, first, second = output.split("(restart")
    assert re.search(rf"worker 0 started \(pid \d+\) on {re.escape(host_a)}", first)
    assert "It was saved by 2 worker(s); this job's 1 worker(s) continue after 0 update(s) of epoch 2" in first
    assert (f"worker 0 on {host_a} exited with code 1; ending every role, then starting them again on 2 of 2 "
            "worker(s) (1 restart(s) left).") in first
    assert "RuntimeError: rank 0 gives up after micro-batch 1 of epoch 2" in first
    assert (f" 2 of 2) on 2 of 2 worker(s): worker 0 failed, no worker lost; {host_b} answers again; 1 worker(s) "
            "left out before are back") in second
    assert re.search(rf"worker 0 started \(pid \d+\) on {re.escape(host_b)}", second)
    assert "Resumed from" in second      # the 2 workers' own checkpoint of epoch 1
    _assert_like_never(tmp_path, never)
    assert hosts.wait_for_no_strays() == []
