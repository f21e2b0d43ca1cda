"""A checkpoint of N workers resumed on M: the position of a run on global batches, cut anew.

On :func:`gluonkit.data.global_loader`'s global batches, a checkpoint taken between two
updates holds the same state on every worker (parameters, optimizer states, merged BatchNorm
statistics, the learning-rate position), except where each worker is in its own stream of
micro-batches. That position is also recorded globally: ``(epoch, updates done in it)``. A
job of another number of workers reads rank 0's file on every worker and derives, from the
global position, how many of its own micro-batches (and which samples) the updates done
hold in its new share; the rest of the epoch is then the one interrupted.

What cannot continue on another number of workers is refused by :func:`reshard`, in one
line: a checkpoint taken in the middle of an update (its accumulated gradients are the
saving workers' own), a run on shards of each worker's own (not global batches), and, in
mid-epoch, global batches cut otherwise than the interrupted run's.
"""
import os

from ..data.global_batches import GlobalBatchSampler
from ._archive import CheckpointError

__all__ = ["global_sampler", "global_position", "reshard"]

_PLAN = ("length", "batch_size", "micro_batch", "seed", "shuffle", "last_batch", "sizes", "interval")
_EARLIER_PLAN = {"sizes": None, "interval": 1}   # what a plan recorded before it held the input sizes


def global_sampler(loader):
    """The :class:`~gluonkit.data.GlobalBatchSampler` of ``loader`` (``global_loader``'s, or a
    ``SeededSamples`` over one), or None for a loader of any other order."""
    sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(sampler, "sampler", sampler)
    return inner if isinstance(inner, GlobalBatchSampler) else None


def _plan(sampler):
    plan = {key: getattr(sampler, key) for key in _PLAN}
    if plan["sizes"] is not None:   # as JSON gives them back
        plan["sizes"] = [list(size) for size in plan["sizes"]]
    return plan


def global_position(sampler, updates, pending, workers):
    """What a snapshot records of the run's place in the global order (JSON values).

    Parameters
    ----------
    sampler : GlobalBatchSampler
        This worker's.
    updates : int
        Updates (global batches) applied in the current epoch.
    pending : int
        Micro-batches of this worker accumulated and not yet applied (0 between updates).
    workers : int
        The job's workers.
    """
    return {"workers": int(workers), "updates": int(updates), "pending": int(pending), "plan": _plan(sampler)}


def _refusal(path, saved_by, workers, why):
    return CheckpointError(f"{path} was saved by a job of {saved_by} worker(s) and this one has {workers}: "
                           f"{why}")


def _epoch_end_before(path):
    """``(file, newer)``: the newest checkpoint file of ``path``'s directory, older than
    ``path``, saved at an epoch's end on global batches (any number of workers resumes it),
    and the files after it up to ``path``; ``(None, [])`` if there is none."""
    from .checkpoint import Checkpoint   # it imports this module (through resume)

    directory, name = os.path.split(os.fspath(path))
    paths = Checkpoint(directory).paths
    names = [os.path.basename(p) for p in paths]
    last = names.index(name) if name in names else -1
    for i in range(last - 1, -1, -1):
        try:
            snap = Checkpoint.saved_state(paths[i]).get("fit") or {}
        except CheckpointError:   # damaged: not one to resume from
            continue
        if snap.get("global") and not snap.get("batch"):
            return paths[i], paths[i + 1:last + 1]
    return None, []


def _from_epoch_end(path):
    """How to resume the run of ``path`` (a mid-epoch checkpoint) from its last epoch's end."""
    earlier, newer = _epoch_end_before(path)
    if earlier is None:
        return "start without resuming (no checkpoint of an epoch's end precedes it)"
    return (f"from the end of an epoch: move {' and '.join(newer)} out of {os.path.dirname(earlier)}, and the "
            f"same resume goes on from {earlier}")


def reshard(snap, saved_by, sampler, workers, path):
    """This worker's snapshot of ``snap`` (``fit``'s, from rank 0's file ``path``, saved by a job
    of ``saved_by`` workers) for a job of ``workers`` workers, whose loader's sampler is
    ``sampler`` (``global_sampler``, or None).

    ``CheckpointError`` (one line: why, and what to do) if the position cannot continue on
    another number of workers; checked before anything changes.
    """
    saved = snap.get("global") if isinstance(snap, dict) else None
    again = f"resume with {saved_by} worker(s)"
    if saved is None:
        raise _refusal(path, saved_by, workers,
                       "it was not trained on global batches (gluonkit.data.global_loader; the recipes' "
                       "--per-worker-batch and --image-size 0, and gluonkit-classify's --multiscale, train on "
                       "batches per worker), "
                       f"so its position is in its workers' own shards; {again}, or start without resuming.")
    if sampler is None:
        raise _refusal(path, saved_by, workers,
                       "its position is in global batches, but this run's train_data is not on global "
                       "batches (gluonkit.data.global_loader); train on those of the interrupted run, "
                       f"or {again}.")
    if saved["pending"]:
        raise _refusal(path, saved_by, workers,
                       f"it was saved in the middle of an update ({saved['pending']} micro-batch(es) "
                       "accumulated and not yet applied, which only the workers that ran them hold); "
                       f"{again}, or from a checkpoint between updates (where fit stops and saves on "
                       "global batches).")
    mine, plan = _plan(sampler), {**_EARLIER_PLAN, **saved["plan"]}
    if snap["batch"] and plan != mine:
        differ = [key for key in _PLAN if plan.get(key) != mine[key]]
        was = ", ".join(f"{key}={plan.get(key)!r}" for key in differ)
        now = ", ".join(f"{key}={mine[key]!r}" for key in differ)
        raise _refusal(path, saved_by, workers,
                       f"it was saved in the middle of epoch {snap['epoch'] + 1} on global batches of "
                       f"{was}, and this run's have {now}, so the rest of the epoch would not be the one "
                       f"interrupted; {again}, or {_from_epoch_end(path)}.")
    snap = {**snap, "global": {**saved, "workers": int(workers)},
            "settings": {**snap["settings"], "accumulate": sampler.accumulate}}
    if snap["batch"]:   # this worker's micro-batches of the updates done, in its new share
        ranges = sampler.micro_batch_ranges()
        done = [ranges[i][1] - ranges[i][0] for i in sampler.own_micro_batches()
                if ranges[i][0] // sampler.batch_size < saved["updates"]]
        snap.update(batch=len(done), batch_samples=sum(done), batch_size=max(done, default=0))
    return snap
