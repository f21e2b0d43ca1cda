"""The two processes ``gluonkit.launch`` starts: MXNet's dmlc tracker, and a role wrapper.

Run by path (``python _dmlc_processes.py tracker SPEC`` or ``... role STATUS_DIR CMD...``),
never imported through the package: with ``DMLC_ROLE=server`` in the environment,
``import mxnet`` would turn the process into a parameter server, so this file uses only the
standard library and the ``dmlc_tracker`` package that ships with the mxnet wheel.
"""
import collections
import json
import os
import subprocess
import sys
import threading


def run_tracker(spec):
    """Submit the job with MXNet's dmlc tracker, as ``mxnet/tools/launch.py`` does."""
    from dmlc_tracker import local, mpi, opts, ssh, tracker

    if not hasattr(threading.Thread, "isAlive"):  # the tracker still calls it; Python 3.9 removed it
        threading.Thread.isAlive = threading.Thread.is_alive
    if spec["host_ip"]:  # local.submit does not pass --host-ip on, and 'auto' picks eth0
        tracker.get_host_ip = lambda host_ip=None: spec["host_ip"]
    args = opts.get_opts(spec["dmlc_args"])
    {"local": local, "ssh": ssh, "mpi": mpi}[args.cluster].submit(args)


def role_name(env):
    """'scheduler', 'server 0', 'worker 1', ... from the variables the tracker sets."""
    role = env.get("DMLC_ROLE", "worker")
    if role == "scheduler" or "DMLC_TASK_ID" not in env:
        return role
    index = int(env["DMLC_TASK_ID"])
    if role == "server":
        index -= int(env.get("DMLC_NUM_WORKER", 0))
    return f"{role} {index}"


def _write_status(status_dir, name, status):
    path = os.path.join(status_dir, name.replace(" ", "-") + ".json")
    with open(path + ".tmp", "w") as f:
        json.dump(dict(status, name=name), f)
    os.replace(path + ".tmp", path)


def run_role(status_dir, command):
    """Run one role's command, pass its stderr through, and record its pid and exit status."""
    name = role_name(os.environ)
    os.makedirs(status_dir, exist_ok=True)
    proc = subprocess.Popen(command, stderr=subprocess.PIPE)
    _write_status(status_dir, name, {"pid": proc.pid, "wrapper_pid": os.getpid(), "returncode": None})
    tail = collections.deque(maxlen=15)
    for line in proc.stderr:
        sys.stderr.buffer.write(line)
        sys.stderr.flush()
        tail.append(line.decode(errors="replace").rstrip())
    code = proc.wait()
    _write_status(status_dir, name, {"pid": proc.pid, "wrapper_pid": os.getpid(), "returncode": code,
                                     "stderr": list(tail)})
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    if sys.argv[1] == "tracker":
        run_tracker(json.loads(sys.argv[2]))
    else:
        sys.exit(run_role(sys.argv[2], sys.argv[3:]))
