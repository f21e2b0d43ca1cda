"""How many data-loading processes a recipe starts: by default, what the machine has room for.

Workers do not change the run: every training sample is augmented from a seed of its own
(``gluonkit.data.seeded_loader``), so a seeded run gives the same batches, and a resumed run
continues bit for bit, with any ``--num-workers``. The default, :func:`room_for_workers`,
follows a rule measured on a 2-core machine (docs/benchmarks.md, "Data-loading workers"):

- samples already in memory (``digits``, ``cifar10``, ``shapes``): 0. A worker process has to
  pickle every batch back to the training process, which costs more than taking a few
  arrays from memory;
- samples decoded from files (``imagefolder:``, ``rec:``, ``voc:``, ``coco:``): one worker
  per CPU this process may use (``os.sched_getaffinity``: a container's or ``taskset``'s
  limit, not the machine's count; shared by the Horovod ranks of the machine), minus one
  for the training loop itself, at most :data:`MAX_WORKERS`. On 2 CPUs that is 1.
"""
import logging

from gluonkit.commands import usable_cpus

__all__ = ["MAX_WORKERS", "IN_MEMORY", "room_for_workers", "choose_num_workers"]

log = logging.getLogger("gluonkit")

#: The most workers the default starts: beyond this, a worker's memory (each imports MXNet,
#: ~200 MB) buys little on the recipes' pipelines.
MAX_WORKERS = 4
#: The datasets whose samples are in memory (no decoding to hand to a worker).
IN_MEMORY = ("digits", "cifar10", "shapes")


def room_for_workers(dataset):
    """The data-loading processes this machine has room for, for ``dataset`` (a recipe's
    ``--dataset`` value): 0 for :data:`IN_MEMORY` datasets, else
    ``min(usable_cpus() - 1, MAX_WORKERS)``.

    Example::

        >>> room_for_workers("digits")
        0
        >>> room_for_workers("voc:data/VOC") == min(usable_cpus() - 1, MAX_WORKERS)
        True
    """
    if dataset.split(":", 1)[0] in IN_MEMORY:
        return 0
    return max(0, min(usable_cpus() - 1, MAX_WORKERS))


def choose_num_workers(num_workers, dataset):
    """``num_workers`` (``--num-workers``), or :func:`room_for_workers` if it is None; logs
    the number, whether it is the default, and the room when a given number is above it."""
    room = room_for_workers(dataset)
    given = num_workers is not None
    num_workers = num_workers if given else room
    where = ("this process" if num_workers == 0 else
             f"{num_workers} worker process{'es' if num_workers > 1 else ''}")
    note = ("what this machine has room for" if not given else
            f"more than the {room} this machine has room for" if num_workers > room else "")
    log.info("Loading data in %s (--num-workers %d%s).", where, num_workers, f", {note}" if note else "")
    return num_workers
