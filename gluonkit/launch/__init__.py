"""Launch a parameter-server job on MXNet's kvstore, on this machine or on several over ssh.

Usage::

    python -m gluonkit.launch -n 2 -s 1 --timeout 600 -- python recipes/classify.py --kvstore dist_sync
    python -m gluonkit.launch -n 4 -s 2 --launcher ssh -H hosts.txt -- python train.py

Which module holds what:

- :mod:`~gluonkit.launch.launcher`: :func:`launch`, which starts every role, watches them and
  ends them all (the job's rules: what fails it, the timeout, the clean-up).
- :mod:`~gluonkit.launch.wrapper`: the small standard-library program each role runs under,
  on whichever host; it gets the role's specification on its stdin.
- :mod:`~gluonkit.launch.restarts`: what follows a failed attempt, and on which workers and
  hosts the next one runs (``--min-workers``).
- :mod:`~gluonkit.launch.hosts`: the host file (checked when read) and the ssh and rsync
  commands that reach a host.
- :mod:`~gluonkit.launch.ports`: the scheduler's port, reserved through lock files in a
  private directory.
- :mod:`~gluonkit.launch.output`: the launcher's messages and its roles' lines, each whole.
- :mod:`~gluonkit.launch.command`: the command line, :func:`main`.
"""
from .command import main, parse_args
from .hosts import Host, read_hostfile
from .launcher import TIMEOUT_EXIT_CODE, launch
from .ports import reserve_port

__all__ = ["launch", "main", "parse_args", "TIMEOUT_EXIT_CODE", "Host", "read_hostfile", "reserve_port"]
