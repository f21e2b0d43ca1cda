"""Checkpoint: atomic save and exact resume of a network, its trainer and the random state."""
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

from .._atomic import TMP_PREFIX, atomic_write, fsync_directory, scratch_file
from .rng import get_rng_state, reseed_mxnet, set_rng_state

__all__ = ["Checkpoint"]

_FORMAT = "gluonkit-checkpoint"
_VERSION = 1
_NAME = re.compile(r"^(\d{6})-epoch(\d+)\.ckpt$")
_BEST = "best.ckpt"
_RESERVED = ("epoch", "step")


def _structural_params(net):
    """Parameters by structural name, as ``save_parameters`` names them."""
    return net._collect_params_with_prefix()


def _trainer_params(trainer):
    return list(trainer._params)


def _npz_bytes(arrays):
    buf = io.BytesIO()
    # prefixed: a parameter named 'file' would clash with np.savez's own argument
    np.savez(buf, **{f"v.{name}": array for name, array in arrays.items()})
    return buf.getvalue()


def _npz_arrays(blob):
    with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
        return {key[2:]: arrays[key] for key in arrays.files}


def _trainer_state_bytes(trainer, directory):
    """``trainer.save_states`` writes a file; read it back from a scratch file."""
    tmp, f = scratch_file(directory, "trainer")
    f.close()
    try:
        trainer.save_states(tmp)
        with open(tmp, "rb") as f:
            return f.read()
    finally:
        os.remove(tmp)


def _load_trainer_state(trainer, blob, directory):
    tmp, f = scratch_file(directory, "trainer")
    try:
        with f:
            f.write(blob)
        trainer.load_states(tmp)
    finally:
        os.remove(tmp)


def _pending(trainer):
    """``(micro-batches, samples)`` in the trainer's accumulation window."""
    return tuple(getattr(trainer, "pending", (0, 0)))


def _compatible(saved_shape, shape):
    """A shape with unknown (0) dimensions matches any saved size there."""
    return len(saved_shape) == len(shape) and all(d in (0, s) for s, d in zip(saved_shape, shape))


def _describe(names, limit=8):
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class Checkpoint:
    """Atomic checkpoints of a network, its trainer and the random state, for exact resumption.

    Each ``save`` writes one file ``<index>-epoch<epoch>.ckpt`` into ``directory`` holding:
    the parameters (by structural name), the trainer's optimizer states (momentum, update
    counts, learning-rate scheduler), ``epoch``, ``step`` (updates applied so far), the
    pending accumulation window of a ``gluonkit.Trainer`` (its gradients and sample count),
    the Python and NumPy generator states, the seed MXNet was reseeded with, and your
    ``**state``. A file is written to a temporary name in the same directory, fsynced, then
    renamed: a crash mid-write leaves the previous checkpoints intact. The last ``keep``
    files are kept, plus ``best.ckpt`` (the one last saved with ``best=True``).

    MXNet cannot report its generator's state, so ``save`` reseeds MXNet with a seed derived
    from the Python and NumPy states and ``load`` reseeds it with the same seed: the run that
    saved and a run resumed from the file continue with identical random streams.

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
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer (checkpoints to keep), got {keep!r}.")
        self.directory = directory
        self.keep = keep

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

    def save(self, net, trainer, epoch, *, best=False, **state):
        """Write a checkpoint atomically; return its path.

        Parameters
        ----------
        net : Block
            The network; every parameter must be initialized.
        trainer : gluon.Trainer or None
            Its optimizer states and (``gluonkit.Trainer``) pending window are saved.
        epoch : int
            Epochs completed.
        best : bool, default False
            Also make this checkpoint ``best.ckpt``.
        **state
            Anything picklable to get back from ``load`` (keys other than 'epoch', 'step').
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int (epochs completed), got {epoch!r}.")
        clash = [key for key in _RESERVED if key in state]
        if clash:
            raise ValueError(f"state key(s) {clash} are reserved: load() returns the checkpoint's "
                             "epoch and step under them. Rename your keys.")
        params = _structural_params(net)
        uninitialized = [name for name, p in params.items() if p._data is None]
        if uninitialized:
            raise RuntimeError(f"Cannot save: parameter(s) {_describe(uninitialized)} are not "
                               "initialized yet; run a forward pass (or give the layers their "
                               "input sizes) before saving.")
        os.makedirs(self.directory, exist_ok=True)
        names = {id(p): name for name, p in params.items()}
        meta = {"format": _FORMAT, "version": _VERSION, "epoch": epoch,
                "params": {name: [list(p.shape), np.dtype(p.dtype).name]
                           for name, p in params.items()}}
        members = {"params.npz": _npz_bytes({name: p.list_data()[0].asnumpy()
                                            for name, p in params.items()})}
        step, pending = 0, (0, 0)
        if trainer is not None:
            tparams = _trainer_params(trainer)
            step = int(trainer.optimizer.num_update)
            pending = _pending(trainer)
            meta.update(optimizer=type(trainer.optimizer).__name__,
                        trainer_params=[names.get(id(p)) for p in tparams],
                        accumulate=getattr(trainer, "accumulate", 1), pending=list(pending))
            members["trainer.states"] = _trainer_state_bytes(trainer, self.directory)
            if pending[0]:
                grads, fresh = {}, {}
                for p in tparams:
                    if p.grad_req == "null" or p._data is None:
                        continue
                    # MXNet flags a fresh gradient on the parameter's data array
                    for i, (g, d) in enumerate(zip(p.list_grad(), p.list_data())):
                        key = f"{names[id(p)]}@{i}"
                        grads[key] = g.asnumpy()
                        fresh[key] = bool(d._fresh_grad)
                members["grads.npz"] = _npz_bytes(grads)
                meta["fresh_grads"] = fresh
        meta["step"] = step
        rng = get_rng_state()
        rng["mxnet_seed"] = reseed_mxnet(salt=(epoch, step))
        members["state.pkl"] = pickle.dumps({"user": state, "rng": rng})
        members["meta.json"] = json.dumps(meta, indent=1).encode()

        index = max((int(_NAME.match(os.path.basename(p)).group(1)) for p in self.paths), default=0)
        name = f"{index + 1:06d}-epoch{epoch:04d}.ckpt"

        def write(f):
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
                for member, data in members.items():
                    zf.writestr(member, data)

        atomic_write(self.directory, name, write)
        path = os.path.join(self.directory, name)
        if best:
            self._mark_best(path)
        for old in self.paths[:-self.keep]:
            os.remove(old)
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

        Everything is checked before anything changes: a corrupted or truncated file, or
        one from a network with other parameter names, shapes or dtypes, or from another
        optimizer, raises ``ValueError`` naming what does not match and leaves ``net`` and
        ``trainer`` untouched. The random generators are restored as they were at ``save``.

        Parameters
        ----------
        net : Block
            Parameters may still wait for deferred initialization.
        trainer : gluon.Trainer or None
            Gets the optimizer states and pending window; None loads the parameters only.
        best : bool, default False
            Load ``best.ckpt`` instead of the latest.
        path : str, optional
            Load this file instead.

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
        params = _structural_params(net)
        self._check_params(path, meta, params)
        if trainer is not None:
            trainer_states = self._check_trainer(path, meta, members, params, trainer)

        arrays = _npz_arrays(members["params.npz"])
        for name, p in params.items():
            p._load_init(mx.nd.array(arrays[name], dtype=arrays[name].dtype), None)
        if trainer is not None:
            _load_trainer_state(trainer, trainer_states, self.directory)
            if meta.get("pending", [0, 0])[0]:
                self._restore_window(meta, members, params, trainer)
        set_rng_state(saved["rng"])
        return {**saved["user"], "epoch": meta["epoch"], "step": meta["step"]}

    @staticmethod
    def _read(path):
        """Read and check every member of a checkpoint file; corrupt -> ValueError."""
        try:
            with zipfile.ZipFile(path) as zf:
                members = {name: zf.read(name) for name in zf.namelist()}
            meta = json.loads(members["meta.json"].decode())
            saved = pickle.loads(members["state.pkl"])
        except FileNotFoundError:
            raise
        except (zipfile.BadZipFile, KeyError, ValueError, EOFError, OSError,
                pickle.UnpicklingError) as err:
            raise ValueError(f"Checkpoint {path!r} is corrupted or truncated ({err}); load another "
                             "one with load(..., path=...) or delete it.") from err
        if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
            raise ValueError(f"{path!r} is not a gluonkit checkpoint of version {_VERSION} "
                             f"(format {meta.get('format')!r}, version {meta.get('version')!r}).")
        if "params.npz" not in members:
            raise ValueError(f"Checkpoint {path!r} is truncated: it has no parameters.")
        return meta, members, saved

    @staticmethod
    def _check_params(path, meta, params):
        saved = meta["params"]
        missing = set(params) - set(saved)
        unexpected = set(saved) - set(params)
        problems = []
        if missing:
            problems.append(f"the network has parameters the checkpoint lacks: {_describe(missing)}")
        if unexpected:
            problems.append(f"the checkpoint has parameters the network lacks: {_describe(unexpected)}")
        for name in sorted(set(params) & set(saved)):
            shape, dtype = saved[name]
            p = params[name]
            if not _compatible(tuple(shape), p.shape):
                problems.append(f"{name} has shape {tuple(shape)} in the checkpoint but {p.shape} "
                                "in the network")
            elif np.dtype(p.dtype).name != dtype:
                problems.append(f"{name} has dtype {dtype} in the checkpoint but "
                                f"{np.dtype(p.dtype).name} in the network")
        if problems:
            raise ValueError(f"Checkpoint {path!r} does not match the network: " + "; ".join(problems)
                             + ". Build the network the checkpoint was saved from.")

    @staticmethod
    def _check_trainer(path, meta, members, params, trainer):
        if "optimizer" not in meta:
            raise ValueError(f"Checkpoint {path!r} was saved without a trainer; "
                             "load it with trainer=None.")
        optimizer = type(trainer.optimizer).__name__
        if meta["optimizer"] != optimizer:
            raise ValueError(f"Checkpoint {path!r} holds {meta['optimizer']} optimizer states but "
                             f"the trainer uses {optimizer}; create the trainer with the same "
                             "optimizer, or load with trainer=None.")
        names = {id(p): name for name, p in params.items()}
        current = [names.get(id(p)) for p in _trainer_params(trainer)]
        saved = meta["trainer_params"]
        if None in current or None in saved or sorted(current) != sorted(saved):
            raise ValueError(f"Checkpoint {path!r} was saved by a trainer of {len(saved)} "
                             f"parameters ({_describe(map(str, saved))}) but this trainer has "
                             f"{len(current)} ({_describe(map(str, current))}); build the trainer "
                             "over the network's parameters, as when saving.")
        if "trainer.states" not in members:
            raise ValueError(f"Checkpoint {path!r} is truncated: it has no trainer states.")
        pending = meta.get("pending", [0, 0])
        accumulate = getattr(trainer, "accumulate", 1)
        if pending[0] and meta["accumulate"] != accumulate:
            raise ValueError(f"Checkpoint {path!r} holds a partial accumulation window "
                             f"({pending[0]} of {meta['accumulate']} micro-batches) but the trainer "
                             f"has accumulate={accumulate}; resume with "
                             f"accumulate={meta['accumulate']}.")
        if pending[0] and "grads.npz" not in members:
            raise ValueError(f"Checkpoint {path!r} is truncated: its pending window has no gradients.")
        try:
            states = pickle.loads(members["trainer.states"])
        except Exception as err:  # any unpickling failure means a damaged file
            raise ValueError(f"Checkpoint {path!r} has unreadable trainer states ({err}).") from err
        if not (isinstance(states, tuple) and len(states) == 2
                and type(states[1]).__name__ == optimizer):
            raise ValueError(f"Checkpoint {path!r} has trainer states that are not {optimizer} "
                             "optimizer states.")
        if current == saved:
            return members["trainer.states"]
        # gluon.Trainer orders parameters by their prefixed names ('dense10_' < 'dense9_'), which
        # differ between two builds of one network: re-key the states by structural name.
        where = {name: i for i, name in enumerate(current)}
        order = [where[name] for name in saved]
        slots, opt = states
        for counts in opt._all_index_update_counts.values():   # in place: one is aliased
            old = dict(counts)
            counts.clear()
            counts.update({order[i]: n for i, n in old.items()})
        return pickle.dumps(({order[i]: slot for i, slot in slots.items()}, opt))

    @staticmethod
    def _restore_window(meta, members, params, trainer):
        """Put the pending window's gradients back, and its counts through ``trainer.step``."""
        grads = _npz_arrays(members["grads.npz"])
        fresh = meta["fresh_grads"]
        names = {id(p): name for name, p in params.items()}
        for p in _trainer_params(trainer):
            if p.grad_req == "null":
                continue
            name = names[id(p)]
            saved = sorted((k for k in grads if k.rsplit("@", 1)[0] == name),
                           key=lambda k: int(k.rsplit("@", 1)[1]))
            if not saved:     # it was still waiting for deferred initialization
                continue
            targets = p.list_grad()
            if len(saved) == len(targets):
                values = [grads[k] for k in saved]
            else:  # another number of devices: the window's sum goes to the first one
                total = sum(grads[k] for k in saved)
                values = [total] + [np.zeros_like(total)] * (len(targets) - 1)
            was_fresh = any(fresh[k] for k in saved)
            for g, d, value in zip(targets, p.list_data(), values):
                g[:] = mx.nd.array(value, ctx=g.context, dtype=value.dtype)
                d._fresh_grad = was_fresh
        trainer.pending = tuple(meta["pending"])
