"""How many data-loading processes a recipe starts, and how many the machine has room for.

``--num-workers`` defaults to 0: the samples are read and augmented in the training process,
whose generators ``fit`` checkpoints, so a seeded run is reproducible and a resumed run
continues bit for bit. Worker processes draw augmentations from generators no checkpoint
holds. The recipes log the number the machine has room for (:func:`room_for_workers`), the
value to pass for speed when exactness does not matter. The rule, measured on a 2-core
machine (docs/benchmarks.md, "Data-loading workers"):

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

from gluonkit.validate import process_cpus

__all__ = ["MAX_WORKERS", "IN_MEMORY", "usable_cpus", "room_for_workers", "choose_num_workers"]

log = logging.getLogger("gluonkit")

#: The most workers the default starts: beyond this, a worker's memory (each imports MXNet,
#: ~200 MB) buys little on the recipes' pipelines.
MAX_WORKERS = 4
#: The datasets whose samples are in memory (no decoding to hand to a worker).
IN_MEMORY = ("digits", "cifar10", "shapes")


def usable_cpus():
    """The CPUs this process may run on (its affinity where the system reports one), divided
    among the Horovod ranks started on this machine (``HOROVOD_LOCAL_SIZE``); at least 1."""
    cpus = process_cpus()
    local = os.environ.get("HOROVOD_LOCAL_SIZE", "1")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, cpus // ranks)


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
    """``num_workers`` (``--num-workers``), 0 if it is None; logs the number, and the room
    :func:`room_for_workers` finds when it is more."""
    given = num_workers is not None
    num_workers = num_workers if given else 0
    room = room_for_workers(dataset)
    where = ("this process" if num_workers == 0 else
             f"{num_workers} worker process{'es' if num_workers > 1 else ''}")
    if given or room == 0:
        log.info("Loading data in %s (--num-workers %d%s).", where, num_workers,
                 "" if given else ", the default")
    else:
        log.info("Loading data in this process (--num-workers 0, the default: seeded runs and resumes "
                 "are exact). This machine has room for --num-workers %d, which loads in parallel but "
                 "draws the augmentations where no checkpoint holds them.", room)
    return num_workers
