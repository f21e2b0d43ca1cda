"""``fit`` with counts by head: each window counted before it runs, the losses tallied per head.

With ``fit(..., head_counts=fn)``, ``fn(batch) -> {head: count}`` counts a batch from its
labels (no forward). ``fit`` takes each accumulation window's batches from the loader first,
hands their summed counts to ``trainer.begin_window``, then runs them: the ``batch_fn``
returns the per-sample losses by head (a dict per device) and the batch's counts by head, the
losses are weighed by ``trainer.weigh_losses`` and ``trainer.step`` gets the counts. The
history reports each head's mean loss (``loss_<head>``: its losses summed over the epoch,
divided by its count) and ``loss``, their sum (the loss L of the epoch's samples).
"""
import itertools
import numbers

import mxnet as mx

from ..validate import check_count

__all__ = ["HeadTally", "counted_windows", "unpack_heads"]

_FOLD_EVERY = 64   # loss sums per head kept on the device before they are added up


def _summed(counts):
    """The counts by head of several batches, added head by head."""
    total = {}
    for by_head in counts:
        for head, count in by_head.items():
            total[head] = total.get(head, 0) + count
    return total


def counted_windows(batches, trainer, head_counts):
    """The batches, each accumulation window's taken from ``batches`` and counted
    (``trainer.begin_window``) before its first one is yielded.

    A window resumed in its middle (the trainer holds its counts) runs on as it was counted.
    """
    batches = iter(batches)
    while True:
        if trainer.window_counts is not None:   # a window begun before a stop: its counts are known
            batch = next(batches, None)
            if batch is None:
                return
            yield batch
            continue
        window = list(itertools.islice(batches, trainer.accumulate))
        if not window:
            return
        trainer.begin_window(_summed(_check_counts(head_counts(batch), "head_counts") for batch in window))
        yield from window


def _check_counts(counts, what):
    if not isinstance(counts, dict) or not counts:
        raise TypeError(f"{what} must return the counts by head as a dict of head name -> count, got {counts!r}.")
    return counts


def unpack_heads(result, index):
    """``(losses, counts, outputs, labels)`` from what a ``batch_fn`` returned with counts by
    head: ``losses`` a list over the devices of dicts of per-sample losses by head."""
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 4):
        raise TypeError(f"batch_fn must return (losses, counts) or (losses, counts, outputs, labels), got "
                        f"{type(result).__name__} for batch {index}.")
    losses = result[0]
    if not (isinstance(losses, (list, tuple)) and losses and all(isinstance(d, dict) and d for d in losses)):
        raise TypeError(f"with head_counts, batch_fn must return the losses as a list over the devices of dicts "
                        f"of per-sample losses by head ([{{'mlm': ..., 'nsp': ...}}, ...]), got {losses!r} for "
                        f"batch {index}.")
    counts = _check_counts(result[1], f"batch_fn (batch {index})")
    outputs, labels = (result[2], result[3]) if len(result) == 4 else (None, None)
    return list(losses), counts, outputs, labels


class HeadTally:
    """The epoch's losses and counts by head, the losses summed on the devices and read when
    the values are asked for."""

    def __init__(self):
        self._sums = {}     # head -> float64 (1,) NDArray, the folded sums
        self._parts = {}    # head -> float32 (1,) sums not folded yet
        self._counts = {}   # head -> number, or float64 NDArray of NDArray counts

    def add(self, losses, counts):
        """Add a batch: ``losses`` a list of dicts by head (one per device), ``counts`` by head."""
        for by_head in losses:
            for head, value in by_head.items():
                parts = self._parts.setdefault(head, [])
                parts.append(value.astype("float32", copy=False).sum())
                if len(parts) >= _FOLD_EVERY:
                    self._fold(head)
        for head, count in counts.items():
            count = check_count(count, f"the count of head {head!r}")
            previous = self._counts.get(head, 0)
            if isinstance(count, mx.nd.NDArray) or isinstance(previous, mx.nd.NDArray):
                count = _on_cpu(count) + _on_cpu(previous)
            else:
                count = previous + count
            self._counts[head] = count

    def _fold(self, head):
        parts, self._parts[head] = self._parts.get(head, []), []
        if not parts:
            return
        ctx = parts[0].context
        total = mx.nd.concat(*(p.as_in_context(ctx) for p in parts), dim=0).astype("float64").sum()
        previous = self._sums.get(head)
        self._sums[head] = total if previous is None else previous.as_in_context(ctx) + total

    @property
    def counted(self):
        """bool: Whether a batch was added."""
        return bool(self._counts)

    def state_dict(self):
        """The sums so far, as numbers: ``{'sums': {head: float}, 'counts': {head: number}}`` (a wait)."""
        sums, counts = {}, {}
        for head in set(self._parts) | set(self._sums):
            self._fold(head)
            sums[head] = float(self._sums[head].asscalar())
        for head, count in self._counts.items():
            counts[head] = float(count.asscalar()) if isinstance(count, mx.nd.NDArray) else count
        return {"sums": sums, "counts": counts}

    def load_state_dict(self, state):
        """Start from ``state_dict()``'s sums (None, a checkpoint saved without counts by head: zero)."""
        self._parts, self._counts = {}, {}
        self._sums = {}
        if state is None:
            return
        if not (isinstance(state, dict) and isinstance(state.get("sums"), dict) and isinstance(state.get("counts"), dict)
                and all(isinstance(v, numbers.Real) for table in state.values() for v in table.values())):
            raise ValueError("the checkpoint's 'head_losses' must hold 'sums' and 'counts' by head; resume from a "
                             "checkpoint fit wrote.")
        self._sums = {head: mx.nd.array([value], dtype="float64") for head, value in state["sums"].items()}
        self._counts = dict(state["counts"])

    def values(self):
        """``{'loss': sum of the heads' means, 'loss_<head>': each head's mean}`` (a wait)."""
        logs, total = {}, 0.0
        for head in sorted(set(self._parts) | set(self._sums)):
            self._fold(head)
            count = self._counts.get(head, 0)
            count = float(count.asscalar()) if isinstance(count, mx.nd.NDArray) else count
            mean = float(self._sums[head].asscalar()) / count if count else 0.0
            logs[f"loss_{head}"] = mean
            total += mean
        return {"loss": total, **logs}


def _on_cpu(count):
    if isinstance(count, numbers.Number):
        return mx.nd.array([count], dtype="float64")
    return count.reshape((1,)).astype("float64").as_in_context(mx.cpu())
