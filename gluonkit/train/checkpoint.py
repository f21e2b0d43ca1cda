"""Checkpoint: atomic save and exact resume of a network, its trainer and the random state."""
import io
import json
import logging
import os
import pickle
import re
import shutil

import mxnet as mx
import numpy as np

from ..names import brief_names, select, shape_fits
from ..atomic import atomic_create, atomic_write, fsync_directory, remove_stale, scratch_name
from ..validate import is_int, non_negative_int, positive_int
from ._archive import CheckpointError, from_tree, json_bytes, npy_bytes, read_archive, read_npz, to_tree, write_archive
from .resume import check_rng_state, convert_legacy_snapshot, get_rng_state, set_rng_state

__all__ = ["Checkpoint", "CheckpointError"]

log = logging.getLogger("gluonkit")


_FORMAT = "gluonkit-checkpoint"
_VERSION = 3
_LEGACY = 2           # pickled members: read only with trusted=True
_NAME = re.compile(r"^(\d{6})-epoch(\d+)\.ckpt$")
_BEST = "best.ckpt"
_RESERVED = ("epoch", "step")
_ANOTHER = "; load another one with load(..., path=...) or delete it."
_MAX_COPIES = 4096    # devices a parameter can have been saved from (bounds what a file may ask for)


def _initialized(param):
    try:
        param.list_data()
    except RuntimeError:   # not initialized, or waiting for deferred initialization
        return False
    return True


def _check_param_entry(name, entry):
    """A parameter table entry is ``[shape, dtype name, copies]``; ValueError naming it otherwise."""
    shape, dtype, copies = entry if isinstance(entry, list) and len(entry) == 3 else (None, None, None)
    if not (isinstance(shape, list) and all(is_int(d) and d >= 0 for d in shape) and isinstance(dtype, str)
            and is_int(copies) and 1 <= copies <= _MAX_COPIES):
        raise ValueError(f"the parameter table's entry of {name!r} is {entry!r}, not [shape, dtype, copies] "
                         f"with 1 <= copies <= {_MAX_COPIES}")
    np.dtype(dtype)   # TypeError for a name NumPy does not know


class Checkpoint:
    """Atomic checkpoints of a network, its trainer and the random state, for exact resumption.

    Each ``save`` writes one file ``<index>-epoch<epoch>.ckpt`` into ``directory`` holding:
    the parameters by structural name (each device's copy where they differ, as BatchNorm
    running statistics do), the trainer's ``state_dict()`` (optimizer states by parameter,
    update counts, learning-rate scheduler, pending accumulation window), ``epoch``,
    ``step`` (updates applied so far), the Python and NumPy generator states, and your
    ``**state``. A file is written under a temporary name in the same directory, fsynced,
    then linked under a name no other file has: a crash mid-write leaves the previous
    checkpoints intact, and several processes saving into one directory never replace each
    other's files. The last ``keep`` files are kept, plus ``best.ckpt`` (the one last saved
    with ``best=True``). A SHA-256 of the file guards every byte against damage. The scratch
    file of a writer killed mid-save is removed by the next ``save`` on its machine once that
    process is gone (``gluonkit.atomic.remove_stale``); a live writer's, and one from another
    machine sharing the directory, are kept.

    Loading a file never runs code from it: a checkpoint is a zip of one JSON member (the
    metadata, the trainer's and your state, the generator states) and NumPy ``.npy`` arrays
    read with ``allow_pickle=False``, each checked to hold no more than its bytes. So
    ``**state`` takes JSON values and arrays only. A file of gluonkit's previous format
    (pickled members) is refused unless you say you wrote it (``trusted=True``).

    ``save`` leaves every generator as it was. MXNet's cannot be read or restored: ``fit``
    reseeds it where epochs begin (and at a mid-epoch snapshot), so resumed runs match.

    Parameters
    ----------
    directory : str or path-like
        Where the checkpoints go; created on the first save.
    keep : int, default 3
        Number of most recent checkpoints to keep (the best one is kept besides).

    Example::

        ckpt = gluonkit.Checkpoint("runs/mnist/checkpoints")
        ckpt.save(net, trainer, epoch=2, note="after warm-up")
        ...
        state = ckpt.load(net, trainer)       # the latest; best=True for the best one
        state["epoch"], state["note"]         # (2, 'after warm-up')
    """

    def __init__(self, directory, keep=3):
        directory = os.fspath(directory)
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise NotADirectoryError(f"Checkpoint directory {directory!r} is an existing file; "
                                     "pass the path of a directory (it is created if missing).")
        self.directory = directory
        self.keep = positive_int(keep, "keep", "checkpoints to keep")

    def __repr__(self):
        return f"Checkpoint({self.directory!r}, keep={self.keep})"

    @property
    def paths(self):
        """list of str: The checkpoint files, oldest first (``best.ckpt`` not included)."""
        if not os.path.isdir(self.directory):
            return []
        found = sorted((int(m.group(1)), name) for name in os.listdir(self.directory)
                       for m in [_NAME.match(name)] if m)
        return [os.path.join(self.directory, name) for _, name in found]

    @property
    def latest(self):
        """str or None: The most recently saved checkpoint file."""
        paths = self.paths
        return paths[-1] if paths else None

    @property
    def latest_epoch(self):
        """int or None: The ``epoch`` (epochs completed) the latest checkpoint was saved with,
        read from its name; None when there is no checkpoint."""
        latest = self.latest
        return None if latest is None else int(_NAME.match(os.path.basename(latest)).group(2))

    @property
    def best(self):
        """str or None: ``best.ckpt`` if a checkpoint was saved with ``best=True``."""
        path = os.path.join(self.directory, _BEST)
        return path if os.path.isfile(path) else None

    def _new_names(self, epoch):
        """Names for the next file, each after every checkpoint in the directory now."""
        while True:
            last = max((int(_NAME.match(os.path.basename(p)).group(1)) for p in self.paths), default=0)
            yield f"{last + 1:06d}-epoch{epoch:04d}.ckpt"

    def save(self, net, trainer, epoch, *, best=False, **state):
        """Write a checkpoint atomically; return its path.

        Everything is checked and serialized before anything is written.

        Parameters
        ----------
        net : Block
            The network; every parameter must be initialized.
        trainer : gluonkit.Trainer or None
            Saved through its ``state_dict()`` (optimizer states and pending window).
        epoch : int
            Epochs completed.
        best : bool, default False
            Also make this checkpoint ``best.ckpt``.
        **state
            What to get back from ``load`` (keys other than 'epoch', 'step'): JSON values
            (None, bool, numbers, str, lists, dicts with str keys) and arrays (NumPy or
            NDArray; they come back as NumPy arrays, tuples as lists). Anything else (an
            object, a function) raises ``TypeError`` naming its key.
        """
        epoch = non_negative_int(epoch, "epoch", "epochs completed")
        clash = [key for key in _RESERVED if key in state]
        if clash:
            raise ValueError(f"state key(s) {clash} are reserved: load() returns the checkpoint's "
                             "epoch and step under them. Rename your keys.")
        params = select(net)
        uninitialized = [name for name, p in params.items() if not _initialized(p)]
        if uninitialized:
            raise RuntimeError(f"Cannot save: parameter(s) {brief_names(uninitialized)} are "
                               "not initialized yet; run a forward pass (or give the layers their "
                               "input sizes) before saving.")
        arrays = {}
        user = {key: to_tree(value, arrays, f"state[{key!r}]") for key, value in state.items()}
        meta = {"format": _FORMAT, "version": _VERSION, "epoch": epoch, "step": 0, "params": {},
                "trainer": None, "state": user, "rng": to_tree(get_rng_state(), arrays, "rng")}
        if trainer is not None:
            if not hasattr(trainer, "state_dict"):
                raise TypeError(f"trainer must be a gluonkit.Trainer (a drop-in for gluon.Trainer "
                                f"whose state_dict() a checkpoint stores), got {type(trainer).__name__}.")
            trainer.name_params(net)
            meta["trainer"] = to_tree(trainer.state_dict(), arrays, "trainer.state_dict()")
            meta["step"] = int(trainer.optimizer.num_update)
            meta["optimizer"] = type(trainer.optimizer).__name__
        members = {}
        for name, p in params.items():
            copies = [d.asnumpy() for d in p.list_data()]
            members[f"params/{name}.npy"] = npy_bytes(copies[0])
            for i, copy in enumerate(copies[1:], 1):   # copies that differ, as running statistics
                if not np.array_equal(copy, copies[0]):
                    members[f"params/{name}@{i}.npy"] = npy_bytes(copy)
            meta["params"][name] = [list(copies[0].shape), copies[0].dtype.name, len(copies)]
        members.update({f"arrays/{key}.npy": npy_bytes(array) for key, array in arrays.items()})
        members["meta.json"] = json_bytes(meta)
        blob = write_archive(members)

        os.makedirs(self.directory, exist_ok=True)
        for stale in remove_stale(self.directory):
            log.info("Removed %s, left by a writer that is no longer running.",
                     os.path.join(self.directory, stale))
        name = atomic_create(self.directory, self._new_names(epoch), lambda f: f.write(blob))
        path = os.path.join(self.directory, name)
        if best:
            self._mark_best(path)
        for old in self.paths[:-self.keep]:
            try:
                os.remove(old)
            except FileNotFoundError:   # another process saving here pruned it first
                pass
        return path

    def _mark_best(self, path):
        """Make ``best.ckpt`` the same file as ``path`` (a hard link, or a copy), atomically."""
        def write(f):
            with open(path, "rb") as src:
                shutil.copyfileobj(src, f)

        tmp = os.path.join(self.directory, scratch_name("best"))
        try:
            os.link(path, tmp)
        except OSError:   # no hard links here: copy
            atomic_write(self.directory, _BEST, write)
            return
        os.replace(tmp, os.path.join(self.directory, _BEST))
        fsync_directory(self.directory)

    @staticmethod
    def saved_at(path):
        """``(epoch, step)`` a checkpoint file was saved at: epochs completed and updates applied.

        ``CheckpointError`` naming the file if it is damaged or not a checkpoint.
        """
        meta = Checkpoint._read(os.fspath(path), trusted=False)[0]
        return meta["epoch"], meta["step"]

    @staticmethod
    def saved_state(path):
        """The ``**state`` a checkpoint file was saved with, read without loading it into a network.

        ``CheckpointError`` naming the file if it is damaged or not a checkpoint.
        """
        return Checkpoint._read(os.fspath(path), trusted=False)[3]

    def load(self, net, trainer=None, *, best=False, path=None, trusted=False):
        """Restore the latest checkpoint (or the best, or ``path``) into ``net`` and ``trainer``.

        Reads only, and runs no code from the file. Everything is checked before anything
        changes: a corrupted or truncated file (any byte), one from a network with other
        parameter names, shapes or dtypes, or a trainer state that does not fit
        (``trainer.check_state_dict``) raises ``CheckpointError`` (a ``ValueError``) naming
        the file and what does not match, and leaves ``net``, ``trainer`` and the generators
        untouched. Then the parameters are set (each device's saved copy onto its device
        when the number of devices is the same, else the first device's copy everywhere),
        the trainer's state is loaded, replacing its pending window, and the Python and NumPy
        generators are restored as at ``save``. With a distributed trainer every worker calls
        ``load`` (it compares the positions across the workers): checkpoints of different
        epochs or updates are refused on every worker, naming both positions.

        Parameters
        ----------
        net : Block
            Parameters may be uninitialized, deferred, or of unknown shape (a freshly
            built ``gluon.SymbolBlock``); they take the saved shapes, on their deferred
            contexts (or the CPU).
        trainer : gluonkit.Trainer or None
            Gets the optimizer states and pending window; None loads the parameters only.
        best : bool, default False
            Load ``best.ckpt`` instead of the latest.
        path : str, optional
            Load this file instead (from any directory).
        trusted : bool, default False
            Also read a checkpoint of gluonkit's previous format, whose members are pickled:
            unpickling runs whatever code the file names, so only for files you wrote
            yourself. ``save`` it again to convert it.

        Returns
        -------
        dict
            The ``**state`` given to ``save``, plus 'epoch' and 'step'.
        """
        distributed = trainer is not None and getattr(trainer, "num_workers", 1) > 1
        try:
            path, meta, trainer_state, user, rng, plan = self._check_load(net, trainer, best, path, trusted)
        except Exception:
            if distributed:   # the other workers wait in the comparison of positions: tell them
                _check_same_position(None, trainer, None)
            raise
        if distributed:
            _check_same_position(path, trainer, meta)
        self._apply(net, plan)
        if trainer is not None:
            trainer.name_params(net)
            trainer.load_state_dict(trainer_state)   # keeps each device's values, as set just now
        set_rng_state(rng)
        return {**user, "epoch": meta["epoch"], "step": meta["step"]}

    def _check_load(self, net, trainer, best, path, trusted):
        """Everything ``load`` reads and checks before it changes anything: ``(path, meta,
        trainer_state, user, rng, plan)``."""
        if path is None:
            path = self.best if best else self.latest
            if path is None:
                what = "best checkpoint (save one with best=True)" if best else "checkpoint"
                raise FileNotFoundError(f"No {what} in {self.directory!r}; save one first, "
                                        "or start without resuming.")
        path = os.fspath(path)
        meta, arrays, trainer_state, user, rng = self._read(path, trusted)
        params = select(net)
        plan = self._plan(path, meta, arrays, params)
        if trainer is not None:
            if trainer_state is None:
                raise CheckpointError(f"Checkpoint {path!r} was saved without a trainer; "
                                      "load it with trainer=None.")
            if not hasattr(trainer, "load_state_dict"):
                raise TypeError(f"trainer must be a gluonkit.Trainer, got {type(trainer).__name__}.")
            try:
                trainer.check_state_dict(trainer_state, names=net)
            except ValueError as err:
                raise CheckpointError(f"Checkpoint {path!r} does not fit the trainer: {err}") from None
        return path, meta, trainer_state, user, rng, plan

    @staticmethod
    def _read(path, trusted):
        """``(meta, parameter arrays, trainer state, user state, generator states)`` of a file;
        CheckpointError naming it for any damage, and for the previous format unless ``trusted``."""
        with open(path, "rb") as f:
            blob = f.read()
        try:
            members = read_archive(blob)
            meta = json.loads(members["meta.json"].decode())
            if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
                raise ValueError(f"its format is {meta.get('format') if isinstance(meta, dict) else meta!r}")
        except Exception as err:   # zipfile and json raise many types on damaged bytes
            reason = (f"Checkpoint {path!r} is corrupted or truncated, or not a checkpoint "
                      f"({type(err).__name__}: {err})")
            raise CheckpointError(reason + _ANOTHER, damaged=path, reason=reason) from None
        if meta.get("version") == _LEGACY and not trusted:
            raise CheckpointError(f"Checkpoint {path!r} is of gluonkit's previous format, whose pickled "
                                  "members could run code when loaded, so it was not read; if you wrote it "
                                  "yourself, convert it once: state = Checkpoint(...).load(net, trainer, "
                                  "path=..., trusted=True), then save it again.")
        if meta.get("version") not in (_VERSION, _LEGACY):
            raise CheckpointError(f"{path!r} is a gluonkit checkpoint of version {meta.get('version')!r}; "
                                  f"this gluonkit reads version {_VERSION}. Load it with the gluonkit "
                                  "that wrote it.")
        try:
            if meta["version"] == _LEGACY:
                parts = _legacy_parts(members)
            else:
                arrays = read_npz(members, "arrays/")
                trainer = None if meta["trainer"] is None else from_tree(meta["trainer"], arrays)
                parts = (read_npz(members, "params/"), trainer, from_tree(meta["state"], arrays),
                         from_tree(meta["rng"], arrays))
            check_rng_state(parts[3])
            if not isinstance(parts[2], dict) or not isinstance(meta["params"], dict):
                raise ValueError("its state or parameter table is not a dict")
            for name, entry in meta["params"].items():
                _check_param_entry(name, entry)
            return (meta,) + parts
        except Exception as err:   # a missing key or array, a bad array header, a damaged pickle
            reason = (f"Checkpoint {path!r} is corrupted or not a checkpoint of this gluonkit "
                      f"({type(err).__name__}: {err})")
            raise CheckpointError(reason + _ANOTHER, damaged=path, reason=reason) from None

    @staticmethod
    def _plan(path, meta, arrays, params):
        """{name: (parameter, saved copies)}; CheckpointError naming every mismatch."""
        saved = meta["params"]
        missing = set(params) - set(saved)
        unexpected = set(saved) - set(params)
        problems = []
        if missing:
            problems.append("the network has parameters the checkpoint lacks: "
                            + brief_names(sorted(missing)))
        if unexpected:
            problems.append("the checkpoint has parameters the network lacks: "
                            + brief_names(sorted(unexpected)))
        for name in sorted(set(params) & set(saved)):
            shape, dtype, _ = saved[name]
            p = params[name]
            if not shape_fits(p.shape, tuple(shape)):
                problems.append(f"{name} has shape {tuple(shape)} in the checkpoint but {p.shape} "
                                "in the network")
            elif np.dtype(p.dtype).name != dtype:
                problems.append(f"{name} has dtype {dtype} in the checkpoint but "
                                f"{np.dtype(p.dtype).name} in the network")
        if problems:
            raise CheckpointError(f"Checkpoint {path!r} does not match the network: " + "; ".join(problems)
                                  + ". Build the network the checkpoint was saved from.")
        plan = {}
        for name, p in params.items():
            shape, dtype, count = saved[name]
            copies = [arrays.get(name)] + [arrays.get(f"{name}@{i}", arrays.get(name)) for i in range(1, count)]
            if any(c is None or c.shape != tuple(shape) or c.dtype.name != dtype for c in copies):
                raise CheckpointError(f"Checkpoint {path!r} is corrupted: its arrays of {name} are missing or "
                                      f"not of shape {tuple(shape)} and dtype {dtype}; load another one.")
            plan[name] = (p, copies)
        return plan

    @staticmethod
    def _apply(net, plan):
        """Set every parameter: each device's saved copy where the number of devices is the same,
        else the first copy everywhere; initialize those without data."""
        fresh = {}
        for p, copies in plan.values():
            if _initialized(p):
                p.set_data(mx.nd.array(copies[0], dtype=copies[0].dtype))
            else:
                fresh[p.name] = mx.nd.array(copies[0], dtype=copies[0].dtype)
        if fresh:
            # load_dict initializes deferred and uninitialized parameters from the data
            net.collect_params().load_dict(fresh, allow_missing=True)
        for p, copies in plan.values():
            targets = p.list_data()
            if len(targets) == len(copies):
                for target, copy in zip(targets[1:], copies[1:]):
                    if copy is not copies[0]:
                        target[:] = mx.nd.array(copy, dtype=copy.dtype)


def _check_same_position(path, trainer, meta):
    """Refuse, on every worker at once, checkpoints of different positions (epoch, update):
    each worker sends its own and gets every worker's back (a collective). A worker that could
    not read or check its checkpoint sends ``meta=None`` (then raises its own error), and the
    others refuse too, naming it."""
    rank, workers = trainer.rank, trainer.num_workers
    positions = np.zeros((workers, 2))
    positions[rank] = (-1, -1) if meta is None else (meta["epoch"], meta["step"])
    positions = trainer.sum_over_workers(positions).reshape(workers, 2)
    if meta is None:
        return
    failed = [r for r in range(workers) if positions[r][0] < 0]
    if failed:
        raise CheckpointError(f"Rank(s) {', '.join(map(str, failed))} could not load their checkpoint (their "
                              f"own error says why), so rank {rank} does not resume from {path!r} either: "
                              "fix those ranks' checkpoints, or start every worker without resuming.")
    other = next((r for r in range(workers) if (positions[r] != positions[rank]).any()), None)
    if other is None:   # this worker's position is every worker's
        return
    at = lambda r: f"epoch {int(positions[r][0])}, update {int(positions[r][1])}"
    raise CheckpointError(f"Checkpoint {path!r} is at {at(rank)} on rank {rank}, but rank {other} resumes from "
                          f"{at(other)}: every worker must resume from the same update; load the checkpoints "
                          "the workers saved together (ModelCheckpoint(resume=True) finds the newest).")


class _LegacyUnpickler(pickle.Unpickler):
    """Unpickles the previous format's members, refusing every global but what such a file holds:
    NumPy arrays and MXNet's NDArrays, optimizers, learning-rate schedulers and metrics (GluonCV's
    too). Even a file one trusts cannot name another function for unpickling to call."""

    _PLAIN = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
              ("numpy.core.multiarray", "scalar"), ("builtins", "bytearray"), ("builtins", "set"),
              ("builtins", "frozenset"), ("collections", "OrderedDict")}
    _BASES = (mx.nd.NDArray, mx.optimizer.Optimizer, mx.lr_scheduler.LRScheduler, mx.metric.EvalMetric)

    def find_class(self, module, name):
        if (module, name) in self._PLAIN:
            return super().find_class(module, name)
        if module.split(".")[0] in ("mxnet", "gluoncv"):
            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, self._BASES):
                return found
        raise pickle.UnpicklingError(f"it names {module}.{name}, which no gluonkit checkpoint holds")


def _legacy_loads(blob):
    return _LegacyUnpickler(io.BytesIO(blob)).load()


def _legacy_parts(members):
    """The parts of a checkpoint of the previous format, unpickled (``load(..., trusted=True)``)
    by :class:`_LegacyUnpickler`."""
    with np.load(io.BytesIO(members["params.npz"]), allow_pickle=False) as saved:
        arrays = {key[2:]: saved[key] for key in saved.files}
    state = _legacy_loads(members["state.pkl"])
    user = {key: _legacy_loads(blob) for key, blob in state["user"].items()}
    if isinstance(user.get("fit"), dict):
        user["fit"] = convert_legacy_snapshot(user["fit"])
    trainer = None
    if "trainer.pkl" in members:
        trainer = _legacy_loads(members["trainer.pkl"])   # Trainer.load_state_dict converts it
    return arrays, trainer, user, state["rng"]
