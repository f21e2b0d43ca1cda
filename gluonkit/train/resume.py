"""Everything an exact resume needs, in one place.

This module alone gets and sets the random generators' states and the samplers' states, takes
``fit``'s snapshots and restores them, and skips and replays the batches of an interrupted
epoch. Every object asked for its state answers through ``state_dict()`` and takes it back
through ``load_state_dict()``: the trainer, the callbacks, and the samplers that carry state
across epochs (gluonkit's ``BucketSampler`` and ``MultiScaleSampler``, and gluon's
``BatchSampler(last_batch='rollover')`` through ``RolloverState``). A snapshot holds JSON
values and NumPy arrays only, so a ``Checkpoint`` stores it without pickling.
"""
import hashlib
import logging
import random

import mxnet as mx
import numpy as np
from mxnet import gluon

from ..validate import is_int, non_negative_int
from ._archive import CheckpointError
from .reshard import global_position, global_sampler

__all__ = ["seed_all", "get_rng_state", "set_rng_state", "check_rng_state", "reseed_mxnet", "batch_length", "check_sampler_kind", "sampler_of",
           "BatchSizeError", "RolloverState", "Epochs", "Resumer", "convert_legacy_snapshot"]

log = logging.getLogger("gluonkit")


class BatchSizeError(CheckpointError):
    """A resume refused because this run's batches hold another number of samples than those
    of the interrupted run: the rest of its epoch (or the samples it carries into the next)
    would not be the ones interrupted.

    Attributes
    ----------
    saved : int or None
        The interrupted run's batch size (its largest batch of the epoch), None where the
        checkpoint does not record it (gluonkit's earlier checkpoints).
    given : int
        This run's batch size.
    """

    def __init__(self, message, saved, given):
        super().__init__(message)
        self.saved, self.given = saved, given


def _batches_of(size):
    """'batches of SIZE samples, the interrupted run's batch size', or the batch size unnamed."""
    return (f"batches of {size} samples, the interrupted run's batch size" if size
            else "the batch size of the interrupted run")


def seed_all(seed):
    """Seed Python's, NumPy's and MXNet's generators with ``seed`` (an integer from 0 to
    2**32 - 1), as a run starts: ``gluonkit.seed_all(0)`` is the one call that makes a run
    reproducible, also where transforms draw from Python's ``random`` (GluonCV's do).

    Example::

        >>> seed_all(0); a = (random.random(), np.random.rand(), mx.nd.random.uniform().asscalar())
        >>> seed_all(0); a == (random.random(), np.random.rand(), mx.nd.random.uniform().asscalar())
        True
    """
    if not (is_int(seed) and 0 <= seed < 2 ** 32):
        error = ValueError if is_int(seed) else TypeError
        raise error(f"seed must be an integer from 0 to 2**32 - 1 (what NumPy takes), got {seed!r}.")
    seed = int(seed)                      # a NumPy integer too (Python's random takes only int)
    random.seed(seed)
    np.random.seed(seed)
    mx.random.seed(seed)


def get_rng_state():
    """The Python and NumPy generator states (JSON values and an array), as ``set_rng_state``
    takes them.

    MXNet's generator state cannot be read; see ``reseed_mxnet``.

    Example::

        >>> state = get_rng_state()
        >>> a = np.random.rand(); set_rng_state(state); a == np.random.rand()
        True
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(internal), gauss],
            "numpy": [name, keys, int(pos), int(has_gauss), float(cached)]}


def _rng_tuples(state):
    """The Python and NumPy states of ``get_rng_state`` as ``random.setstate`` and
    ``np.random.set_state`` take them; ValueError if they would not take them."""
    try:
        version, internal, gauss = state["python"]
        python = (version, tuple(internal), gauss)
        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy = (name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached)
        random.Random().setstate(python)          # checked on generators of their own
        np.random.RandomState().set_state(numpy)
    except Exception as err:   # TypeError, ValueError, KeyError from the generators or the unpacking
        raise ValueError(f"not a generator state of get_rng_state() ({type(err).__name__}: {err})") from None
    return python, numpy


def check_rng_state(state):
    """Raise ``ValueError`` if ``set_rng_state(state)`` would fail; changes nothing."""
    _rng_tuples(state)


def set_rng_state(state):
    """Restore generator states from ``get_rng_state`` (and seed MXNet if it holds a seed).

    Everything is checked first: on ``ValueError`` no generator changed.

    Example::

        >>> set_rng_state({**get_rng_state(), "mxnet_seed": 7})
    """
    python, numpy = _rng_tuples(state)
    random.setstate(python)
    np.random.set_state(numpy)
    if state.get("mxnet_seed") is not None:
        mx.random.seed(state["mxnet_seed"])


def reseed_mxnet(salt=0):
    """Seed MXNet's generators from NumPy's state and ``salt``; return the seed.

    The seed is a hash of NumPy's state, which is read but not advanced, and of ``salt``.
    MXNet cannot report its own generator state, so exact resumption reseeds it at points
    that a resumed run passes through too: ``fit`` and ``Epochs`` do it at the start of every
    epoch but the first (which draws from the stream the user seeded, as a hand-written loop
    does) and when they take a mid-epoch snapshot, with the position as the salt. Python's
    ``random`` is left out: nothing seeds it unless asked (``np.random.seed`` and
    ``mx.random.seed`` are how MXNet users seed a run), and gluon's samplers draw from NumPy.

    Example::

        >>> np.random.seed(0); a = reseed_mxnet(salt=3)
        >>> np.random.seed(0); a == reseed_mxnet(salt=3)
        True
    """
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    digest = hashlib.blake2b(digest_size=4)
    digest.update(keys.tobytes())
    digest.update(repr((pos, has_gauss, gauss, salt)).encode())
    seed = int.from_bytes(digest.digest(), "little") & 0x7FFFFFFF
    mx.random.seed(seed)
    return seed


def batch_length(batch):
    """Samples in a batch: the length of its first array (a batch of fields), or of the batch
    itself (a list of samples)."""
    first = batch[0] if isinstance(batch, (tuple, list)) and len(batch) else batch
    if hasattr(first, "shape") and len(first.shape):
        return first.shape[0]
    return len(batch) if hasattr(batch, "__len__") else 1


class RolloverState:
    """``state_dict`` / ``load_state_dict`` for a ``gluon.data.BatchSampler(last_batch='rollover')``:
    the samples it carries into its next epoch."""

    def __init__(self, sampler):
        self.sampler = sampler

    def state_dict(self):
        """dict: ``{'rollover': [the carried samples' indices], 'batch_size': int}``."""
        return {"rollover": list(self.sampler._prev),   # MXNet 1.9.1 keeps the carry in _prev only
                "batch_size": self.sampler._batch_size}

    def load_state_dict(self, state):
        """Carry the saved samples into the next epoch."""
        if not (isinstance(state, dict) and isinstance(state.get("rollover"), list)):
            raise ValueError(f"state must be {{'rollover': [indices]}} from state_dict(), got {state!r}.")
        carried, size = state["rollover"], self.sampler._batch_size   # MXNet keeps the batch size private
        samples = len(self.sampler._sampler)                           # and its sampler
        if not all(is_int(i) and 0 <= i < samples for i in carried):
            raise ValueError(f"the checkpoint carries samples {carried!r} into the next epoch, not indices "
                             f"of this loader's {samples} samples; resume with the data of the interrupted run.")
        if len(carried) >= size:
            saved = state.get("batch_size")
            saved = saved if is_int(saved) and saved > 0 else None
            raise BatchSizeError(f"the checkpoint carries {len(carried)} samples into the next epoch"
                                 + (f" from batches of {saved}" if saved else "")
                                 + f" but a batch of this loader holds {size}; resume with "
                                 f"{_batches_of(saved)}.", saved, size)
        self.sampler._prev = list(carried)


def check_sampler_kind(sampler, saved):
    """``CheckpointError`` unless the loader's stateful ``sampler`` (``sampler_of``, or None)
    and the ``saved`` sampler state (or None) are both there or both not: the order and seeds
    of a resumed run come from that state, so another kind of loader would not continue it."""
    if sampler is None and saved is not None:
        raise CheckpointError(f"the checkpoint holds a sampler's state ({sorted(saved) if isinstance(saved, dict) else saved!r}) "
                              "but train_data's loader has no sampler to take it; resume with the loader "
                              "of the saved run (e.g. gluonkit.data.seeded_loader, bucket_loader).")
    if sampler is not None and saved is None:
        raise CheckpointError(f"train_data's sampler ({type(sampler).__name__}) has a state to resume, but "
                              "the checkpoint holds none: it was saved with a loader without one, whose order "
                              "this one would not continue; resume with the loader of the saved run.")


def sampler_of(loader):
    """The batch sampler of ``loader`` whose state a resume needs, or None.

    That is ``loader.batch_sampler`` (gluonkit's loaders expose it; for a
    ``gluon.data.DataLoader``, the one it keeps) when it has ``state_dict`` and
    ``load_state_dict``, or a ``RolloverState`` over gluon's ``last_batch='rollover'`` sampler.
    Samplers without state (shuffling from NumPy's generator, which fit saves) give None.
    """
    sampler = getattr(loader, "batch_sampler", None)
    if sampler is None and isinstance(loader, gluon.data.DataLoader):
        sampler = loader._batch_sampler   # gluon's DataLoader has no public name for it
    if hasattr(sampler, "state_dict") and hasattr(sampler, "load_state_dict"):
        return sampler
    if isinstance(sampler, gluon.data.BatchSampler) and sampler._last_batch == "rollover":   # no public name
        return RolloverState(sampler)
    return None


def _metric_sums(metric):
    """What a metric has summed so far: its fields that hold numbers or arrays (lists and
    dicts of them, nested metrics), by name; locks, strings and other objects are left out."""
    held = {}
    for name, value in vars(metric).items():
        sums = _sums(value)
        if sums is not None:
            held[name] = sums
    return {"type": type(metric).__name__, "sums": held}


def _sums(value):
    """``value`` as JSON values and arrays if it is numbers or arrays, else None."""
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        return {"value": value.item() if isinstance(value, (np.number, np.bool_)) else value}
    if isinstance(value, (np.ndarray, mx.nd.NDArray)):
        return {"array": value.asnumpy() if isinstance(value, mx.nd.NDArray) else value}
    if isinstance(value, (list, tuple)):
        items = [_sums(v) for v in value]
        return None if any(item is None for item in items) else {"list": items}
    if isinstance(value, dict):
        items = [[_sums(k), _sums(v)] for k, v in value.items()]
        return None if any(None in pair for pair in items) else {"dict": items}
    if all(hasattr(value, name) for name in ("update", "get", "reset")):
        return {"metric": _metric_sums(value)}
    return None


def _load_sums(current, saved):
    """The value ``_sums`` saved, of the kind ``current`` is (an NDArray stays an NDArray)."""
    if "value" in saved:
        return saved["value"]
    if "array" in saved:
        array = saved["array"]
        if isinstance(current, mx.nd.NDArray):
            return mx.nd.array(array, ctx=current.context, dtype=array.dtype)
        return array
    if "list" in saved:
        items = saved["list"]
        same = isinstance(current, (list, tuple)) and len(current) == len(items)
        return [_load_sums(c, item) for c, item in zip(current if same else [None] * len(items), items)]
    if "dict" in saved:
        table = current if isinstance(current, dict) else {}
        table.clear()
        table.update((_load_sums(None, k), _load_sums(None, v)) for k, v in saved["dict"])
        return table
    if current is None or type(current).__name__ != saved["metric"]["type"]:
        raise ValueError(f"the snapshot holds the sums of a {saved['metric']['type']} where the run has "
                         f"{type(current).__name__}; resume with the metrics of the interrupted run.")
    _load_metric_sums(current, saved["metric"])
    return current


def _load_metric_sums(metric, saved):
    for name, sums in saved["sums"].items():
        current = getattr(metric, name, None)
        value = _load_sums(current, sums)
        if isinstance(current, tuple) and isinstance(value, list):
            value = tuple(value)
        setattr(metric, name, value)


class Epochs:
    """The epochs and batches of one's own training loop, resumable exactly in mid-epoch.

    Iterating gives the epoch numbers from where the run is; ``batches()`` gives the current
    epoch's batches of ``loader``. Each epoch begins as ``fit``'s do: MXNet's generator is
    reseeded from NumPy's state (which decides gluon's shuffling) and the epoch (but for the
    first epoch, which draws from the stream the user seeded), and the Python and NumPy
    states and the loader's sampler state are noted. ``state_dict()``, saved with a
    checkpoint, holds them and the batches done, so a loop resumed from it with
    ``load_state_dict`` replays the interrupted epoch's order, skips the batches done
    (refusing a loader whose batches hold other numbers of samples) and continues with the
    generators as they were: it ends with the parameters of a loop never stopped.

    A batch counts as done once it is yielded: save after its update. Call
    ``load_state_dict`` after ``Checkpoint.load`` (which restores the generators as at the
    save; this restores those of the epoch).

    Parameters
    ----------
    loader : iterable
        Re-iterable once per epoch (a ``gluon.data.DataLoader``), as ``fit``'s ``train_data``.
    epochs : int
        Epochs to reach.

    Example::

        loop = gluonkit.Epochs(train_loader, epochs=10)
        if ckpt.latest:
            loop.load_state_dict(ckpt.load(net, trainer)["loop"])
        for epoch in loop:
            for x, y in loop.batches():
                ...                                   # forward, backward, trainer.step
                if stop_requested:
                    ckpt.save(net, trainer, epoch, loop=loop.state_dict())
                    raise SystemExit
    """

    def __init__(self, loader, epochs):
        self.loader, self.epochs = loader, non_negative_int(epochs, "epochs", "the number of epochs to reach")
        self.epoch = self.batch = 0
        self._pending = None         # a mid-epoch state to continue from
        self._epoch_state = None     # generators and sampler as the current epoch began
        self._samples = 0            # samples of the epoch's batches so far

    def __iter__(self):
        while self.epoch < self.epochs:
            yield self.epoch
            self.epoch, self.batch, self._pending = self.epoch + 1, 0, None

    def batches(self):
        """The current epoch's batches, after those done when it resumes in mid-epoch."""
        sampler = sampler_of(self.loader)
        resumed, self._pending = self._pending, None
        if resumed is None:
            rng = get_rng_state()
            rng["mxnet_seed"] = reseed_mxnet(salt=self.epoch) if self.epoch else None
            self._epoch_state = {"rng": rng, "sampler": None if sampler is None else sampler.state_dict()}
            skip = 0
        else:
            self._epoch_state = resumed["epoch_state"]
            if sampler is not None and self._epoch_state["sampler"] is not None:
                sampler.load_state_dict(self._epoch_state["sampler"])
            set_rng_state(self._epoch_state["rng"])
            skip = resumed["batch"]
        self.batch, self._samples = 0, 0
        batches = iter(self.loader)
        for batch in batches:
            self.batch, self._samples = self.batch + 1, self._samples + batch_length(batch)
            if self.batch < skip:
                continue
            if self.batch == skip:   # the last batch done before the stop: not trained again
                self._check_skipped(resumed)
                set_rng_state(resumed["rng"])
                continue
            yield batch
        if self.batch < skip:
            raise CheckpointError(f"the loader yielded {self.batch} batches, fewer than the {skip} the "
                                  "state was saved after; resume with the same data and batch size.")

    def _check_skipped(self, saved):
        if self._samples != saved["samples"]:
            raise CheckpointError(f"the state was saved after {saved['batch']} batches holding {saved['samples']} "
                                  f"samples, but the loader's first {saved['batch']} batches hold {self._samples}; "
                                  "resume with the batch size of the interrupted run.")

    def state_dict(self):
        """dict: The epoch, the batches done in it, and what replays it (JSON values and arrays).

        In mid-epoch this reseeds MXNet's generator (whose state cannot be read) and keeps
        the seed, so this loop and one resumed from the state go on with the same stream.
        """
        if not self.batch:
            sampler = sampler_of(self.loader)
            return {"epoch": self.epoch, "batch": 0,
                    "sampler": None if sampler is None else sampler.state_dict()}
        rng = get_rng_state()
        rng["mxnet_seed"] = reseed_mxnet(salt=(self.epoch, self.batch))
        return {"epoch": self.epoch, "batch": self.batch, "samples": self._samples, "rng": rng,
                "epoch_state": self._epoch_state}

    def load_state_dict(self, state):
        """Continue from what ``state_dict`` returned (as ``Checkpoint.load`` gives it back)."""
        if not (isinstance(state, dict) and is_int(state.get("epoch")) and is_int(state.get("batch"))):
            raise ValueError(f"state must be what Epochs.state_dict() returned, got {state!r}.")
        self.epoch, self.batch = state["epoch"], state["batch"]
        if not state["batch"]:
            sampler = sampler_of(self.loader)
            if sampler is not None and state.get("sampler") is not None:
                sampler.load_state_dict(state["sampler"])
            self._pending = None
            return
        check_rng_state(state["rng"])
        check_rng_state(state["epoch_state"]["rng"])
        self._pending = state


class Resumer:
    """The resume side of one ``fit``: snapshots, restores and the replay of an epoch.

    ``FitState`` owns one and hands it the loop's state; nothing else in gluonkit sets a
    generator or a sampler's state.
    """

    def __init__(self):
        self.epoch_rng = None        # generator states at the start of the epoch
        self.pending = None          # a mid-epoch snapshot to continue from
        self.epoch_sampler = None    # the sampler's state at the start of the epoch
        self.callback_states = None  # the callbacks' states, until training begins
        self.seen = 0                # samples of the epoch's batches so far
        self.largest = 0             # samples of the epoch's largest batch so far (the batch size)
        self.sizes = []              # samples of each batch taken from the loader this epoch, in order
        self.skips_at_start = 0      # the trainer's nonfinite_skips when the epoch began
        self.steps_at_start = 0      # the updates applied when the epoch began

    @staticmethod
    def settings(state):
        """The settings a mid-epoch resume must share with the run it continues."""
        return {"accumulate": int(getattr(state.trainer, "accumulate", 1)),
                "devices": [str(ctx) for ctx in state.ctx]}

    def snapshot(self, state, tally, callbacks):
        """What ``FitState.snapshot`` returns (see there); JSON values and arrays."""
        epoch, batch = state.position
        history = {key: list(values) for key, values in state.history.items()}
        callback_states = [[type(cb).__name__, cb.state_dict()] for cb in callbacks]
        if self.pending is not None:   # resumed but not started yet: the snapshot loaded
            return {**self.pending, "history": history, "callbacks": callback_states}
        # the batches done, not those taken ahead (fit with counts by head counts a window first)
        done = self.sizes[:batch] if batch else self.sizes
        updates = self.updates_done(state) if batch else 0
        snap = {"epoch": epoch, "batch": batch, "updates": updates, "step": state.step, "history": history,
                "callbacks": callback_states, "settings": self.settings(state),
                "batch_size": max(done, default=0)}
        sampler = sampler_of(state.train_data)
        if sampler is not None:
            snap["sampler"] = self.epoch_sampler if batch else sampler.state_dict()
        global_batches = global_sampler(state.train_data)
        if global_batches is not None:   # the place in the global order: another number of workers takes it
            pending = state.trainer.pending[0] if hasattr(state.trainer, "pending") else 0
            snap["global"] = global_position(global_batches, updates, pending, getattr(state.trainer, "num_workers", 1))
        if batch:
            tally.settle()
            rng = get_rng_state()
            rng["mxnet_seed"] = reseed_mxnet(salt=(epoch, batch, state.step))
            snap.update(epoch_rng=self.epoch_rng, rng=rng, batch_samples=sum(done),
                        loss_sum=tally.loss_sum, samples=tally.samples,
                        metrics=[_metric_sums(m) for m in tally.metrics], grad_norms=list(tally.grad_norms),
                        nonfinite_skips=self._skips(state) - self.skips_at_start)
            if getattr(state, "head_tally", None) is not None:   # fit with counts by head
                snap["head_losses"] = state.head_tally.state_dict()
        return snap

    def restore(self, state, saved):
        """Set ``state``'s position from what ``Checkpoint.load`` returned; the sampler's state too.

        Returns ``(epoch, step, history)``.
        """
        snap = saved.get("fit")
        if snap is None:
            return saved["epoch"], saved.get("step", 0), state.history
        mine = self.settings(state)
        if snap.get("settings", mine) != mine:
            message = (f"the checkpoint was saved with accumulate={snap['settings']['accumulate']} on "
                       f"{snap['settings']['devices']}; this run has accumulate={mine['accumulate']} on "
                       f"{mine['devices']}")
            if snap["batch"]:
                raise CheckpointError(f"Cannot resume in the middle of epoch {snap['epoch'] + 1}: {message}. "
                                      "The rest of the epoch would not be the one interrupted; resume with "
                                      "the saved settings (they may change at an epoch's end).")
            log.warning("Resuming at an epoch's end with other settings: %s; the run continues with "
                        "this run's.", message)
        sampler = sampler_of(state.train_data)
        check_sampler_kind(sampler, snap.get("sampler"))
        if sampler is not None and snap.get("sampler") is not None:
            try:
                sampler.load_state_dict(snap["sampler"])
            except (TypeError, ValueError) as err:
                message = f"The checkpoint's sampler state does not fit train_data's sampler: {err}"
                if isinstance(err, BatchSizeError):
                    raise BatchSizeError(message, err.saved, err.given) from None
                raise CheckpointError(message) from None
        self.callback_states = snap["callbacks"]
        self.pending = snap if snap["batch"] else None
        return snap["epoch"], snap["step"], {key: list(values) for key, values in snap["history"].items()}

    def load_callback_states(self, callbacks):
        """Give each callback its saved state, once: the k-th callback of a class gets the
        state of the k-th saved one of that class name (a callback added or left out on the
        resume moves no other's state)."""
        saved, self.callback_states = self.callback_states, None
        by_class = {}
        for name, cb_state in saved or ():
            by_class.setdefault(name, []).append(cb_state)
        for cb in callbacks:
            states = by_class.get(type(cb).__name__)
            if states:
                cb.load_state_dict(states.pop(0))

    def updates_done(self, state):
        """The updates applied in the current epoch of ``state`` (a ``Run``): since it began,
        or as the snapshot it continues from recorded them, until it continues."""
        if self.pending is not None:
            return _updates_of(self.pending)
        return state.step - self.steps_at_start

    @staticmethod
    def _skips(state):
        return int(getattr(state.trainer, "nonfinite_skips", 0))

    def begin_epoch(self, state, tally):
        """Start an epoch (or continue the interrupted one); return its batches, an iterator.

        A new epoch reseeds MXNet and notes the generator and sampler states it starts
        from. An interrupted one takes its sums back, replays its data order from those
        states, skips the batches done (refusing a loader whose batches hold other numbers
        of samples) and sets the generators as they were after them.
        """
        sampler = sampler_of(state.train_data)
        self.epoch_sampler = None if sampler is None else sampler.state_dict()
        snap, self.pending = self.pending, None
        if snap is None:
            self.epoch_rng = get_rng_state()
            self.epoch_rng["mxnet_seed"] = reseed_mxnet(salt=state.epoch) if state.epoch else None
            self.skips_at_start = self._skips(state)
            self.steps_at_start = state.step
            return self._batches(state.train_data, 0, None, None)
        tally.loss_sum, tally.samples = snap["loss_sum"], snap["samples"]
        if getattr(state, "head_tally", None) is not None:
            state.head_tally.load_state_dict(snap.get("head_losses"))
        tally.grad_norms = list(snap["grad_norms"])
        if [m["type"] for m in snap["metrics"]] == [type(m).__name__ for m in tally.metrics]:
            try:
                for metric, saved in zip(tally.metrics, snap["metrics"]):
                    _load_metric_sums(metric, saved)
            except ValueError as err:
                raise CheckpointError(f"The checkpoint's metric sums do not fit the run's metrics: {err}") from None
        self.skips_at_start = self._skips(state) - snap.get("nonfinite_skips", 0)
        self.steps_at_start = state.step - _updates_of(snap)
        self.epoch_rng = snap["epoch_rng"]
        set_rng_state(self.epoch_rng)   # replay the epoch's data order from its start
        return self._batches(state.train_data, snap["batch"], snap.get("batch_samples"), snap["rng"],
                             snap.get("batch_size") or None)

    def _batches(self, loader, skip, samples, rng_after, saved_size=None):
        """The loader's batches after the first ``skip``, which must hold ``samples`` samples
        in batches of ``saved_size`` (the interrupted run's, if known)."""
        self.seen = self.largest = 0
        self.sizes = []
        batches = iter(loader)
        for _ in range(skip):
            batch = next(batches, None)
            if batch is None:
                if saved_size and self.largest != saved_size:
                    raise self._size_error(skip, samples, saved_size)
                raise CheckpointError(f"train_data yielded fewer than the {skip} batches the checkpoint "
                                      "was saved after; resume with the same data and batch size.")
            self._count(batch)
        if samples is not None and self.seen != samples:
            raise self._size_error(skip, samples, saved_size)
        if rng_after is not None:
            set_rng_state(rng_after)
        for batch in batches:
            self._count(batch)
            yield batch

    def _count(self, batch):
        size = batch_length(batch)
        self.sizes.append(size)
        self.seen += size
        self.largest = max(self.largest, size)

    def _size_error(self, skip, samples, saved):
        """The refusal of a mid-epoch resume whose first ``skip`` batches do not hold the
        ``samples`` samples of the interrupted run's, in batches of ``saved`` (None: unknown)."""
        return BatchSizeError(
            f"the checkpoint was saved after {skip} batches"
            + (f" of {saved} samples ({samples} in all)" if saved else f" holding {samples} samples")
            + f", but the batches of train_data hold {self.largest} ({self.seen} in its first {skip}); "
            f"resume with {_batches_of(saved)} (it may change at an epoch's end).", saved, self.largest)


def _updates_of(snap):
    """The updates applied in the epoch a mid-epoch snapshot was taken in; one of an earlier
    gluonkit, without them: its global position's, else its batches per accumulation window."""
    if "updates" in snap:
        return snap["updates"]
    if snap.get("global"):
        return snap["global"]["updates"]
    return snap["batch"] // snap.get("settings", {}).get("accumulate", 1)


def convert_legacy_snapshot(snap):
    """A snapshot of gluonkit's previous checkpoint format (metric objects) in this format."""
    if "metrics" in snap:
        snap = {**snap, "metrics": [_metric_sums(m) for m in snap["metrics"]]}
    return snap
