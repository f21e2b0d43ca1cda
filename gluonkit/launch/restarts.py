"""What follows a failed attempt of a launched job: another on as many workers, another on the
workers that remain (``min_workers``), or the end.

A worker is *lost* when its process was killed by a signal (SIGKILL, the out-of-memory killer,
a preemption; or it exited with 128 + the signal's number, as a shell reports a program killed
by it), or when its host stopped answering: the ssh connection could not be made, or
broke, before the role reported its exit (ssh's own exit code, 255); every worker on that
host is then lost. A role that exits with a code of its own (a Python error, a refusal) is
not lost: the same program on fewer workers would fail the same way, so it does not shrink
the job, and the restart is the one ``max_restarts`` makes anyway. Nor is a worker that
stopped on SIGINT or SIGTERM by itself (exit code 130 or 143, as ``fit`` exits after its
checkpoint): that is a stop of the job, which the launcher ends without a restart, so it
never comes here.

With ``min_workers``, a restart leaves out the workers lost in the attempt that just failed,
and the hosts that stopped answering (the servers are placed on the others). The workers
left out at an earlier restart come back when their host answers ssh again (this machine
always does): at the restart after the next failure, the job returns to its full count, and
its heading names the hosts that answer again.
When fewer than ``min_workers`` would remain, the job ends instead.
"""
import signal

from .hosts import answers

__all__ = ["Restarts"]

_SSH_FAILED = 255   # ssh's own exit code: no connection, or a connection that broke


def _host_lost(role):
    return bool(role.host) and role.code is None and role.client_code == _SSH_FAILED and not role.problem


def _killed(role):
    """Ended by a signal: killed by it, or exited with 128 + its number (a worker's stop, 130 or 143, is no failure)."""
    return role.code is not None and (role.code < 0 or 128 < role.code < 128 + signal.NSIG)


class Restarts:
    """The attempts of one job: the restarts left, and the workers, servers and hosts of the next.

    Parameters
    ----------
    max_restarts : int
        Restarts allowed after the first attempt.
    num_workers : int
        The job's full count of workers.
    num_servers : int or None
        Servers of every attempt; None for as many as the attempt's workers.
    hosts : list of Host or None
        The host file's hosts (``ssh``), None on this machine.
    min_workers : int or None
        The fewest workers a restart may run on; None: every restart runs the full count.
    ssh_config : str, optional
        The ssh client's configuration, for asking a host left out whether it answers again.

    Example::

        restarts = Restarts(2, num_workers=3, num_servers=None, hosts=None, min_workers=2)
        restarts.workers, restarts.servers    # (3, 3); after a lost worker: (2, 2)
    """

    def __init__(self, max_restarts, num_workers, num_servers, hosts, min_workers=None, ssh_config=None):
        self._max, self._full, self._servers, self._all_hosts = max_restarts, num_workers, num_servers, hosts
        self._min, self._ssh_config = min_workers, ssh_config
        self.attempt, self.workers, self.hosts, self.ended = 0, num_workers, hosts, False
        self._out, self._down, self._why = [], set(), None   # workers (their hosts) and hosts left out

    @property
    def servers(self):
        """int: The servers of this attempt."""
        return self.workers if self._servers is None else self._servers

    def heading(self):
        """What the scheduler's line says of this attempt: nothing for the first; for a restart,
        its number and, with ``min_workers``, the workers it runs on and why."""
        if not self.attempt:
            return ""
        text = f" (restart {self.attempt} of {self._max})"
        if self._min is not None:
            text += f" on {self.workers} of {self._full} worker(s): {self._why}"
        return text

    def after_failure(self, failed, roles):
        """What follows a failure, as the end of its message; sets up the next attempt, or ``ended``.

        Parameters
        ----------
        failed : list
            The roles that failed, first first (the launcher's, with ``kind``, ``host``,
            ``code``, ``client_code`` and ``problem``).
        roles : list
            Every role of the attempt.
        """
        left = self._max - self.attempt
        if not left:
            self.ended = True
            return "ending the job"
        if self._min is None:
            self._next(self.workers, self.hosts, None)
            return f"ending every role, then starting them all again ({left} restart(s) left)"
        down_now = {r.host for r in failed if _host_lost(r)}
        lost = [r for r in roles if r.kind == "worker" and (r.host in down_now or (r in failed and _killed(r)))]
        asked = (set(self._out) | self._down) - down_now - {None}
        back = {host for host in asked if answers(host, self._ssh_config)}
        out = [r.host for r in lost] + [host for host in self._out if host is not None and host not in back]
        down = down_now | (self._down - back)
        workers = self._full - len(out)
        if workers < self._min:
            self.ended = True
            return (f"ending the job: {workers} of {self._full} worker(s) would remain, fewer than "
                    f"--min-workers {self._min}")
        why = [f"{', '.join(sorted(map(str, down_now)))} stopped answering"] if down_now else []
        why.append(f"{', '.join(r.name for r in lost)} lost" if lost else f"{failed[0].name} failed, no worker lost")
        again = sorted(map(str, back & self._down))
        if again:
            why.append(f"{', '.join(again)} {'answers' if len(again) == 1 else 'answer'} again")
        returned = len(self._out) - (len(out) - len(lost))
        if returned:
            why.append(f"{returned} worker(s) left out before are back")
        self._out, self._down = out, down
        hosts = None if self._all_hosts is None else [h for h in self._all_hosts if h not in down]
        self._next(workers, hosts, "; ".join(why))
        return (f"ending every role, then starting them again on {workers} of {self._full} worker(s) "
                f"({left} restart(s) left)")

    def _next(self, workers, hosts, why):
        self.attempt, self.workers, self.hosts, self._why = self.attempt + 1, workers, hosts, why
