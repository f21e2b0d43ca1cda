"""Time from launch to the first finished step: 2 workers + 1 server on two simulated hosts vs 1 process.

Run as root (it makes the hosts of ``simulated_hosts.py``)::

    python tests/distributed/startup_time.py --repeats 3

The two take turns; each line reports the median and the range over the repeats of the
slowest worker's time (for the job) or the process's time, from just before the command
starts until its first ``trainer.step`` returned. Absolute times depend on the machine's load.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from job_check import JOB
from simulated_hosts import SimulatedHosts


def _time_one(hosts, root, job_argv_prefix):
    out = tempfile.mkdtemp(dir=root)
    t0 = time.time()
    argv = job_argv_prefix + [sys.executable, JOB, out, "first-step", repr(t0)]
    hosts.run(argv, check=True, capture_output=True, timeout=300)
    times = []
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            times.append(json.load(f)["seconds"])
    return max(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="gluonkit-startup-")
    hosts = SimulatedHosts(root)
    try:
        hostfile = os.path.join(root, "hosts.txt")
        with open(hostfile, "w") as f:
            f.write(f"{hosts.hosts['A'][1]}\nroot@{hosts.hosts['B'][1]}:2222\n")
        launcher = [sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--launcher", "ssh",
                    "-H", hostfile, "--ssh-config", hosts.ssh_config, "--host-ip", hosts.hosts["A"][1],
                    "--timeout", "240", "--"]
        runs = {"1 process": [], "2 workers + 1 server on 2 hosts": []}
        for _ in range(args.repeats):
            runs["1 process"].append(_time_one(hosts, root, []))
            runs["2 workers + 1 server on 2 hosts"].append(_time_one(hosts, root, launcher))
        for name, seconds in runs.items():
            print(f"{name}: launch to first step {statistics.median(seconds):.1f} s "
                  f"(min {min(seconds):.1f}, max {max(seconds):.1f}, {len(seconds)} runs)")
    finally:
        hosts.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
