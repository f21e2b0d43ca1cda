"""How DataLoader worker processes take SIGINT and SIGTERM: they leave both to the training
process.

A SIGTERM sent to the whole process group (``kill -- -PGID``, ``docker stop``, a scheduler)
reaches gluon's data workers too. Killed by it, a worker may die holding its pool's queue
lock, and the pool puts new workers in its place; the pool's clean-up then waited for ever,
and the command hung after its checkpoint. gluon already keeps Ctrl-C (SIGINT) from its
workers; here they ignore SIGTERM as well. The training process stops on it (``fit``: after
the current step, with a checkpoint) and ends its workers through the pool, which tells each
to finish; a worker stuck for good still ends with SIGKILL.
"""
import contextlib
import signal
import threading

__all__ = ["as_a_data_worker", "worker_signals"]


def as_a_data_worker(signum, frame=None):
    """A signal handler for a DataLoader worker process: ``signum`` (SIGINT or SIGTERM) is
    ignored from now on, as gluon's workers ignore Ctrl-C."""
    signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def worker_signals():
    """Inside the block SIGTERM is ignored, so the worker processes forked there (gluon's
    pool) ignore it; the caller's handler is back after the block. Outside the main thread,
    where handlers cannot be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
