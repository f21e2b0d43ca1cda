"""How many data-loading processes a recipe starts when ``--num-workers`` is not given.

The rule, measured on a 2-core machine (docs/benchmarks.md, "Data-loading workers"):

- samples already in memory (``digits``, ``cifar10``, ``shapes``): 0. A worker process has to
  pickle every batch back to the training process, which costs more than taking a few
  arrays from memory;
- samples decoded from files (``imagefolder:``, ``rec:``, ``voc:``, ``coco:``): one worker
  per CPU this process may use (``os.sched_getaffinity``: a container's or ``taskset``'s
  limit, not the machine's count; shared by the Horovod ranks of the machine), minus one
  for the training loop itself, at most :data:`MAX_WORKERS`. On 2 CPUs that is 1.
"""
import logging
import os

__all__ = ["MAX_WORKERS", "IN_MEMORY", "usable_cpus", "default_num_workers", "choose_num_workers"]

log = logging.getLogger("gluonkit")

#: The most workers the default starts: beyond this, a worker's memory (each imports MXNet,
#: ~200 MB) buys little on the recipes' pipelines.
MAX_WORKERS = 4
#: The datasets whose samples are in memory (no decoding to hand to a worker).
IN_MEMORY = ("digits", "cifar10", "shapes")


def usable_cpus():
    """The CPUs this process may run on (its affinity where the system reports one), divided
    among the Horovod ranks started on this machine (``HOROVOD_LOCAL_SIZE``); at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                   # no affinity on this platform (macOS, Windows)
        cpus = os.cpu_count() or 1
    local = os.environ.get("HOROVOD_LOCAL_SIZE", "1")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, cpus // ranks)


def default_num_workers(dataset):
    """The data-loading processes for ``dataset`` (a recipe's ``--dataset`` value): 0 for
    :data:`IN_MEMORY` datasets, else ``min(usable_cpus() - 1, MAX_WORKERS)``.

    Example::

        >>> default_num_workers("digits")
        0
        >>> default_num_workers("voc:data/VOC") == min(usable_cpus() - 1, MAX_WORKERS)
        True
    """
    if dataset.split(":", 1)[0] in IN_MEMORY:
        return 0
    return min(usable_cpus() - 1, MAX_WORKERS)


def choose_num_workers(num_workers, dataset):
    """``num_workers`` (``--num-workers``), or :func:`default_num_workers` of ``dataset`` if it
    is None; logs the number chosen and why."""
    if num_workers is not None:
        reason = "as given"
    else:
        num_workers = default_num_workers(dataset)
        reason = ("the default for data in memory" if dataset.split(":", 1)[0] in IN_MEMORY else
                  f"the default for data read from files on {usable_cpus()} usable CPUs")
    log.info("Loading data in %s (--num-workers %d, %s).",
             "this process" if num_workers == 0 else
             f"{num_workers} worker process{'es' if num_workers > 1 else ''}", num_workers, reason)
    return num_workers
