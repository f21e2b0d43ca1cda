"""DataLoader worker processes and the signals sent to a whole process group.

A SIGTERM sent to the process group (``kill -- -PGID``, ``docker stop``, a scheduler) used to
reach gluon's data workers as well as the training process. Killed by it, a worker can die
holding its pool's queue lock, the pool puts a new worker in its place, and the pool's
clean-up then waited for that lock for ever: the command hung after its checkpoint. The
workers gluonkit's DataLoader starts are put in a process group of their own, so such a
signal reaches the training process alone, which stops (``fit``: after the current step,
with a checkpoint) and ends its workers through the pool, as gluon does (SIGTERM to each).
"""
import contextlib
import os
import signal

__all__ = ["as_a_data_worker", "own_process_group"]

_starting_workers = False     # True while a DataLoader forks its pool (and in those children)


def _leave_the_group():
    """In a process forked while a DataLoader starts its workers: a process group of its own."""
    if _starting_workers:
        os.setpgid(0, 0)


os.register_at_fork(after_in_child=_leave_the_group)


def as_a_data_worker(signum, frame=None):
    """Take ``signum`` as one of gluon's DataLoader workers takes it: SIGINT ignored (the
    training process stops the job), SIGTERM ending the process (how the pool ends it). For
    handlers a worker inherits from the training process."""
    if signum == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def own_process_group():
    """The processes forked inside the block (a DataLoader's pool of workers) each start a
    process group of their own: a signal to the caller's group does not reach them."""
    global _starting_workers
    _starting_workers = True
    try:
        yield
    finally:
        _starting_workers = False
