"""Checkpoint: atomic save and exact resume of a network, its trainer and the random state."""
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import uuid
import zipfile

import mxnet as mx
import numpy as np

from .. import params as _structure
from .._atomic import TMP_PREFIX, atomic_create, atomic_write, fsync_directory
from .._validate import non_negative_int, positive_int
from .rng import get_rng_state, set_rng_state

__all__ = ["Checkpoint", "CheckpointError"]


_FORMAT = "gluonkit-checkpoint"
_VERSION = 2
_NAME = re.compile(r"^(\d{6})-epoch(\d+)\.ckpt$")
_BEST = "best.ckpt"
_RESERVED = ("epoch", "step")
_DIGEST = 64          # hex characters of the SHA-256 kept in the archive's comment
_DATE = (1980, 1, 1, 0, 0, 0)   # fixed member times: a file depends on its contents only


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded here: damaged, of another format or version, or
    saved from another network or trainer. The message names the file and what to do."""


def _npz_bytes(arrays):
    buf = io.BytesIO()
    # prefixed: a parameter named 'file' would clash with np.savez's own argument
    np.savez(buf, **{f"v.{name}": array for name, array in arrays.items()})
    return buf.getvalue()


def _npz_arrays(blob):
    with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
        return {key[2:]: arrays[key] for key in arrays.files}


def _archive(members):
    """A zip of ``members`` whose comment is the SHA-256 of every byte before it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=_DATE), data)
        zf.comment = b"0" * _DIGEST
    body = buf.getvalue()[:-_DIGEST]
    return body + hashlib.sha256(body).hexdigest().encode()


def _unarchive(blob):
    """The members of an ``_archive``; ValueError if any byte differs from what was written."""
    body, digest = blob[:-_DIGEST], blob[-_DIGEST:]
    if len(blob) < _DIGEST or hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError("its checksum does not match its contents")
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _initialized(param):
    try:
        param.list_data()
    except RuntimeError:   # not initialized, or waiting for deferred initialization
        return False
    return True


def _pickled(state):
    """Each value of ``state`` pickled; TypeError naming the first key that cannot be."""
    blobs = {}
    for key, value in state.items():
        try:
            blobs[key] = pickle.dumps(value)
        except Exception as err:   # pickle raises PicklingError, TypeError, AttributeError, ...
            raise TypeError(f"state[{key!r}] cannot be pickled ({type(err).__name__}: {err}); "
                            "pass picklable values (numbers, strings, lists, dicts, arrays) "
                            "to Checkpoint.save.") from err
    return blobs


class Checkpoint:
    """Atomic checkpoints of a network, its trainer and the random state, for exact resumption.

    Each ``save`` writes one file ``<index>-epoch<epoch>.ckpt`` into ``directory`` holding:
    the parameters by structural name (each device's copy where they differ, as BatchNorm
    running statistics do), the trainer's ``state_dict()`` as an opaque part (optimizer
    states, update counts, learning-rate scheduler, pending accumulation window),
    ``epoch``, ``step`` (updates applied so far), the Python and NumPy generator states,
    and your ``**state``. A file is written under a temporary name in the same directory,
    fsynced, then linked under a name no other file has: a crash mid-write leaves the
    previous checkpoints intact, and several processes saving into one directory never
    replace each other's files. The last ``keep`` files are kept, plus ``best.ckpt`` (the
    one last saved with ``best=True``). A SHA-256 of the file guards every byte.

    ``save`` leaves every generator as it was. MXNet's cannot be read or restored: ``fit``
    reseeds it where epochs begin (and at a mid-epoch snapshot), so resumed runs match.

    Files hold pickled objects (as MXNet's own trainer states do): load only checkpoints
    you trust.

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
            Anything picklable to get back from ``load`` (keys other than 'epoch', 'step');
            a value that cannot be pickled raises ``TypeError`` naming its key.
        """
        epoch = non_negative_int(epoch, "epoch", "epochs completed")
        clash = [key for key in _RESERVED if key in state]
        if clash:
            raise ValueError(f"state key(s) {clash} are reserved: load() returns the checkpoint's "
                             "epoch and step under them. Rename your keys.")
        params = _structure.select(net)
        uninitialized = [name for name, p in params.items() if not _initialized(p)]
        if uninitialized:
            raise RuntimeError(f"Cannot save: parameter(s) {_structure.brief_names(uninitialized)} are "
                               "not initialized yet; run a forward pass (or give the layers their "
                               "input sizes) before saving.")
        user = _pickled(state)
        meta = {"format": _FORMAT, "version": _VERSION, "epoch": epoch, "step": 0, "params": {}}
        arrays = {}
        for name, p in params.items():
            copies = [d.asnumpy() for d in p.list_data()]
            arrays[name] = copies[0]
            for i, copy in enumerate(copies[1:], 1):   # copies that differ, as running statistics
                if not np.array_equal(copy, copies[0]):
                    arrays[f"{name}@{i}"] = copy
            meta["params"][name] = [list(copies[0].shape), copies[0].dtype.name, len(copies)]
        members = {"params.npz": _npz_bytes(arrays)}
        if trainer is not None:
            if not hasattr(trainer, "state_dict"):
                raise TypeError(f"trainer must be a gluonkit.Trainer (a drop-in for gluon.Trainer "
                                f"whose state_dict() a checkpoint stores), got {type(trainer).__name__}.")
            trainer.name_params(net)
            members["trainer.pkl"] = pickle.dumps(trainer.state_dict())
            meta["step"] = int(trainer.optimizer.num_update)
            meta["optimizer"] = type(trainer.optimizer).__name__
        members["state.pkl"] = pickle.dumps({"user": user, "rng": get_rng_state()})
        members["meta.json"] = json.dumps(meta, indent=1).encode()
        blob = _archive(members)

        os.makedirs(self.directory, exist_ok=True)
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

        tmp = os.path.join(self.directory, f"{TMP_PREFIX}best-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            os.link(path, tmp)
        except OSError:   # no hard links here: copy
            atomic_write(self.directory, _BEST, write)
            return
        os.replace(tmp, os.path.join(self.directory, _BEST))
        fsync_directory(self.directory)

    def load(self, net, trainer=None, *, best=False, path=None):
        """Restore the latest checkpoint (or the best, or ``path``) into ``net`` and ``trainer``.

        Reads only. Everything is checked before anything changes: a corrupted or
        truncated file (any byte), one from a network with other parameter names, shapes
        or dtypes, or a trainer state that does not fit (``trainer.check_state_dict``)
        raises ``ValueError`` naming the file and what does not match, and leaves ``net``,
        ``trainer`` and the generators untouched. Then the parameters are set (each
        device's saved copy onto its device when the number of devices is the same, else
        the first device's copy everywhere), the trainer's state is loaded, replacing its
        pending window, and the Python and NumPy generators are restored as at ``save``.

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

        Returns
        -------
        dict
            The ``**state`` given to ``save``, plus 'epoch' and 'step'.
        """
        if path is None:
            path = self.best if best else self.latest
            if path is None:
                what = "best checkpoint (save one with best=True)" if best else "checkpoint"
                raise FileNotFoundError(f"No {what} in {self.directory!r}; save one first, "
                                        "or start without resuming.")
        path = os.fspath(path)
        meta, members, saved = self._read(path)
        params = _structure.select(net)
        plan = self._plan(path, meta, members, params)
        trainer_state = None
        if trainer is not None:
            trainer_state = self._trainer_state(path, members, net, trainer)
        try:
            user = {key: pickle.loads(blob) for key, blob in saved["user"].items()}
        except Exception as err:   # e.g. a class that no longer exists
            raise CheckpointError(f"Checkpoint {path!r} holds state that cannot be unpickled here "
                             f"({type(err).__name__}: {err}).") from err

        self._apply(net, plan)
        if trainer is not None:
            trainer.name_params(net)
            trainer.load_state_dict(trainer_state)
        # after the trainer: setting up its kvstore copies the first device's values to all
        self._apply_device_copies(plan)
        if trainer is not None:
            trainer.pending = trainer.pending   # a dropped window returns to these statistics
        set_rng_state(saved["rng"])
        return {**user, "epoch": meta["epoch"], "step": meta["step"]}

    @staticmethod
    def _read(path):
        """Read and check a checkpoint file; any damage -> ValueError naming it."""
        with open(path, "rb") as f:
            blob = f.read()
        try:
            members = _unarchive(blob)
            meta = json.loads(members["meta.json"].decode())
            saved = pickle.loads(members["state.pkl"])
            if meta.get("format") != _FORMAT:
                raise ValueError(f"its format is {meta.get('format')!r}")
        except Exception as err:   # zipfile, json and pickle raise many types on damaged bytes
            raise CheckpointError(f"Checkpoint {path!r} is corrupted or truncated, or not a checkpoint "
                             f"({type(err).__name__}: {err}); load another one with "
                             "load(..., path=...) or delete it.") from err
        if meta.get("version") != _VERSION:
            raise CheckpointError(f"{path!r} is a gluonkit checkpoint of version {meta.get('version')!r}; "
                             f"this gluonkit reads version {_VERSION}. Load it with the gluonkit "
                             "that wrote it.")
        return meta, members, saved

    @staticmethod
    def _plan(path, meta, members, params):
        """{name: (parameter, saved copies)}; ValueError naming every mismatch."""
        saved = meta["params"]
        missing = set(params) - set(saved)
        unexpected = set(saved) - set(params)
        problems = []
        if missing:
            problems.append("the network has parameters the checkpoint lacks: "
                            + _structure.brief_names(sorted(missing)))
        if unexpected:
            problems.append("the checkpoint has parameters the network lacks: "
                            + _structure.brief_names(sorted(unexpected)))
        for name in sorted(set(params) & set(saved)):
            shape, dtype, _ = saved[name]
            p = params[name]
            if not _structure.shape_fits(p.shape, tuple(shape)):
                problems.append(f"{name} has shape {tuple(shape)} in the checkpoint but {p.shape} "
                                "in the network")
            elif np.dtype(p.dtype).name != dtype:
                problems.append(f"{name} has dtype {dtype} in the checkpoint but "
                                f"{np.dtype(p.dtype).name} in the network")
        if problems:
            raise CheckpointError(f"Checkpoint {path!r} does not match the network: " + "; ".join(problems)
                             + ". Build the network the checkpoint was saved from.")
        arrays = _npz_arrays(members["params.npz"])
        plan = {}
        for name, p in params.items():
            count = saved[name][2]
            copies = [arrays[name]] + [arrays.get(f"{name}@{i}", arrays[name]) for i in range(1, count)]
            plan[name] = (p, copies)
        return plan

    @staticmethod
    def _trainer_state(path, members, net, trainer):
        """The trainer's saved state, checked against ``trainer``."""
        if "trainer.pkl" not in members:
            raise CheckpointError(f"Checkpoint {path!r} was saved without a trainer; "
                             "load it with trainer=None.")
        if not hasattr(trainer, "load_state_dict"):
            raise TypeError(f"trainer must be a gluonkit.Trainer, got {type(trainer).__name__}.")
        try:
            state = pickle.loads(members["trainer.pkl"])
        except Exception as err:   # e.g. an optimizer class that is not defined here
            raise CheckpointError(f"Checkpoint {path!r} holds trainer states that cannot be unpickled "
                             f"here ({type(err).__name__}: {err}).") from err
        try:
            trainer.check_state_dict(state, names=net)
        except ValueError as err:
            raise CheckpointError(f"Checkpoint {path!r} does not fit the trainer: {err}") from None
        return state

    @staticmethod
    def _apply(net, plan):
        """Set the parameters to the first device's copy; initialize those without data."""
        fresh = {}
        for p, copies in plan.values():
            if _initialized(p):
                p.set_data(mx.nd.array(copies[0], dtype=copies[0].dtype))
            else:
                fresh[p.name] = mx.nd.array(copies[0], dtype=copies[0].dtype)
        if fresh:
            # load_dict initializes deferred and uninitialized parameters from the data
            net.collect_params().load_dict(fresh, allow_missing=True)

    @staticmethod
    def _apply_device_copies(plan):
        """Each device's own saved copy, where they differ (BatchNorm running statistics)."""
        for p, copies in plan.values():
            targets = p.list_data()
            if len(targets) == len(copies):
                for target, copy in zip(targets[1:], copies[1:]):
                    if copy is not copies[0]:
                        target[:] = mx.nd.array(copy, dtype=copy.dtype)
