"""The Trainer's persistence: structural parameter names, ``state_dict`` and ``load_state_dict``.

A mixin of ``gluonkit.Trainer`` (its only user), kept apart so that the update path and the
state it saves each fit in a module of their own. The state holds JSON values and NumPy
arrays only, so that a checkpoint stores it without pickling.
"""
import re
import warnings
from collections.abc import Mapping

import mxnet as mx
import numpy as np
from mxnet import gluon

from ..names import brief_names, first_names, select, shape_fits
from ..validate import is_int
from ._args import check_pending
from ._heads import check_head_state
from ._gradients import replicas, zero

__all__ = ["TrainerState"]


class TrainerState:
    """Names, ``state_dict`` and ``load_state_dict`` of ``gluonkit.Trainer``.

    Optimizer states are read from and written to the public ``Updater.states`` as arrays,
    nested as the optimizer nests them (never through ``Updater.get_states``, which pickles).
    Three private members of MXNet have no public route and are used here only: the
    optimizer's per-index update counts (re-keyed from the trainer's indices to names), the
    updater of a kvstore that updates on the kvstore (KVStore saves it only to a file), and
    the fresh-gradient flags of the pending window.
    """

    _STATE_FORMAT = ["gluonkit.Trainer", 2]

    @property
    def params(self):
        """dict of str to Parameter: The parameters, in update order, by name (see ``name_params``)."""
        return {self._name_of(param): param for param in self._params}

    def name_params(self, names):
        """Name the parameters structurally, as a network that holds them names them.

        The names key ``state_dict`` (so a state loads into another build of the network,
        whose ``Parameter.name`` prefixes differ) and appear in warnings. ``fit`` and
        ``Checkpoint`` call it with their network. Parameters not in ``names`` keep theirs.

        Parameters
        ----------
        names : Block or dict of str to Parameter
            A network (named by ``gluonkit.params.select``) or a mapping.

        Example::

            trainer.name_params(net)
            list(trainer.params)     # ['0.weight', '0.bias', '1.weight', '1.bias']
        """
        self._names = self._naming(names)

    def _naming(self, names):
        """{Parameter: name} as ``name_params(names)`` would set it (changes nothing)."""
        if isinstance(names, gluon.Block):
            names = select(names)
        if not isinstance(names, Mapping):
            raise TypeError(f"names must be a Block or a dict of name -> Parameter, got {names!r}.")
        ours = set(self._params)
        chosen = dict(self._names)
        chosen.update({param: name for name, param in first_names(names).items() if param in ours})
        return chosen

    def _name_of(self, param, naming=None):
        return (self._names if naming is None else naming).get(param, param.name)

    def _state_updaters(self):
        """The updaters holding the optimizer states (the kvstore's when it updates)."""
        if self._kv_initialized and self._kvstore and self._update_on_kvstore:
            return [self._kvstore._updater]   # KVStore only writes its updater to a file
        return self._updaters

    def _init_kvstore(self):
        """Set up the kvstore (gluon's); optimizer states loaded before go to its updater."""
        super()._init_kvstore()
        loaded = self._updaters[0].states
        if self._kvstore and self._update_on_kvstore and loaded:
            _put_states(self._kvstore._updater, {i: _as_numpy(s) for i, s in loaded.items()})
            for updater in self._updaters:   # consumed: a later kvstore reset must not bring them back
                _put_states(updater, {})

    def _set_up_kvstore_keeping_copies(self):
        """Set up the kvstore now as the first update would, but keep every device's values.

        gluon's set-up copies the first device's value of every parameter to all devices
        (BatchNorm running statistics included); a run that set it up at its first update
        holds the per-device values that a checkpoint restored, so they are put back.
        """
        kept = [(arrays, [a.copy() for a in arrays]) for param in self._params
                if param._data is not None for arrays in [param.list_data()] if len(arrays) > 1]
        self._init_kvstore()
        if self._params_to_init:
            self._init_params()
        for arrays, copies in kept:
            for array, copy in zip(arrays, copies):
                copy.copyto(array)

    def _unique_names(self, naming=None):
        names = [self._name_of(param, naming) for param in self._params]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"Several parameters of the trainer are named {repeated}; name them "
                             "apart with trainer.name_params(net) (structural names).")
        return names

    def state_dict(self):
        """The optimizer states and the pending window, keyed by parameter name.

        JSON values (numbers, strings, lists, dicts) and NumPy arrays only. Holds the
        optimizer's type, hyper-parameters (its number and string fields), learning-rate
        scheduler (its type and fields; a scheduler holding anything else is refused with
        ``ValueError``) and update counts; each parameter's optimizer state (momentum, ...)
        as arrays, and its shape; ``accumulate``; the pending accumulation window: its
        ``(steps, count)`` and, when steps are pending, each parameter's gradient on each
        device and whether a backward wrote it; ``nonfinite_skips``; whether the kvstore was
        set up; and the dynamic loss scaler's state (its scale and clean windows counted) when
        one is attached (``gluonkit.trainer.amp.init_trainer``), else None; and the counts by
        head of a window begun with ``begin_window`` (``heads``), else None.

        Reading the state changes nothing (the kvstore is not set up by it).

        Example::

            state = trainer.state_dict()
            other.load_state_dict(state)    # a trainer over another build of the network
        """
        names = self._unique_names()
        states = self._state_updaters()[0].states
        optimizer = self._optimizer
        counts = {str(device): {names[i]: int(n) for i, n in table.items()}
                  for device, table in optimizer._all_index_update_counts.items()}   # MXNet keeps no public copy
        window = {}
        self._window.mark_saved()
        if self._window.steps:
            for name, param in zip(names, self._params):
                if param.grad_req != "null" and param._data is not None:
                    window[name] = {"grads": [g.asnumpy() for g in param.list_grad()],
                                    "fresh": [bool(a._fresh_grad) for a in replicas(param)]}
        return {"format": list(self._STATE_FORMAT), "params": names,
                "shapes": [None if p.shape is None else list(p.shape) for p in self._params],
                "optimizer": _describe_optimizer(optimizer),
                "states": {names[i]: _as_numpy(state) for i, state in states.items()},
                "update_counts": counts, "accumulate": self._accumulate,
                "pending": list(self.pending), "window": window,
                "nonfinite_skips": self._nonfinite_skips, "kvstore_ready": bool(self._kv_initialized),
                "loss_scaler": self._scaler_state(), "heads": self._heads.state()}

    def _scaler_state(self):
        """The loss scaler's fields by name (gluonkit's and MXNet's scalers share them), or None."""
        scaler = getattr(self, "_amp_loss_scaler", None)
        return None if scaler is None else {name.lstrip("_"): value for name, value in vars(scaler).items()}

    def check_state_dict(self, state, names=None):
        """Raise ``ValueError`` (what differs, and the fix) if ``load_state_dict(state)`` would fail.

        Changes nothing. A parameter that is not initialized yet passes if its known
        dimensions fit; ``load_state_dict`` needs it initialized when the window holds its
        gradient. With ``names`` (as for ``name_params``) the parameters are checked under
        those names, still without renaming them.
        """
        self._check_state(state, initialized=False, naming=None if names is None else self._naming(names))

    def _check_state(self, state, initialized, naming=None):
        """``state`` with its parameters renamed to this trainer's names; ValueError if it does not fit."""
        keys = ("params", "shapes", "optimizer", "states", "update_counts", "accumulate", "pending",
                "window", "nonfinite_skips", "kvstore_ready")
        if isinstance(state, dict) and isinstance(state.get("optimizer"), mx.optimizer.Optimizer):
            state = _from_previous_format(state)
        if not (isinstance(state, dict) and state.get("format") == list(self._STATE_FORMAT)
                and all(key in state for key in keys)):
            raise ValueError("state is not a gluonkit.Trainer state_dict (of this version); pass "
                             "what Trainer.state_dict() returned.")
        names = self._unique_names(naming)
        state = _renamed(state, self._matching(state, names))
        _check_optimizer(self._optimizer, state["optimizer"])
        steps, _ = check_pending(state["pending"], accumulate=None)
        if steps and state["accumulate"] != self._accumulate:
            raise ValueError(f"the state holds a partial accumulation window ({steps} of "
                             f"{state['accumulate']} micro-batches) but the trainer has accumulate="
                             f"{self._accumulate}; resume with accumulate={state['accumulate']}.")
        check_pending(state["pending"], self._accumulate)
        _check_tables(state, names)
        self._check_scaler_state(state["loss_scaler"])
        check_head_state(state.get("heads"))
        params = dict(zip(names, self._params))
        for name, saved_state in state["states"].items():
            _check_optimizer_state(name, saved_state, params[name], self._optimizer, names.index(name))
        for name, saved_window in state["window"].items():
            param = params[name]
            if not (isinstance(saved_window, dict) and isinstance(saved_window.get("grads"), list)
                    and isinstance(saved_window.get("fresh"), list)):
                raise ValueError(f"the state's window[{name!r}] must be a dict of 'grads' and 'fresh' lists; "
                                 "pass what Trainer.state_dict() returned.")
            if initialized and param._data is None:
                raise ValueError(f"the state's window holds a gradient of {name} but the parameter "
                                 "is not initialized yet; load the network's parameters first.")
            for grad in saved_window["grads"]:
                if not (isinstance(grad, np.ndarray) and shape_fits(param.shape, grad.shape)
                        and grad.dtype == np.dtype(param.dtype)):
                    raise ValueError(f"the state's window holds a {getattr(grad, 'dtype', type(grad).__name__)} "
                                     f"gradient of shape {getattr(grad, 'shape', None)} for {name}, which is "
                                     f"{np.dtype(param.dtype)} of shape {param.shape}; load a state of this network.")
        return state

    def _matching(self, state, names):
        """{saved name: this trainer's name}: by name, else by position where the names differ only
        by Gluon's global prefix counters (``dense0_`` / ``dense3_``) and the shapes agree."""
        saved = state["params"]
        if not isinstance(saved, list) or not isinstance(state["shapes"], list) \
                or len(state["shapes"]) != len(saved):
            raise ValueError("the state's params and shapes must be lists of equal length; pass what "
                             "Trainer.state_dict() returned.")
        if set(saved) == set(names):
            shapes = dict(zip(saved, state["shapes"]))
            for name, param in zip(names, self._params):
                shape = shapes[name]
                if shape is not None and not shape_fits(param.shape, tuple(shape)):
                    raise ValueError(f"the state was saved by a trainer whose {name} has shape "
                                     f"{tuple(shape)} but this trainer's has shape {param.shape}; "
                                     "load a state of the same network.")
            return {name: name for name in names}
        if len(saved) == len(names) and all(
                _without_counters(a) == _without_counters(b)
                and (shape is None or shape_fits(p.shape, tuple(shape)))
                for a, b, shape, p in zip(saved, names, state["shapes"], self._params)):
            return dict(zip(saved, names))
        raise ValueError(
            f"the state was saved by a trainer of {len(saved)} parameters "
            f"({brief_names(sorted(map(str, saved)))}) but this trainer has {len(names)} "
            f"({brief_names(sorted(names))}); build the trainer over the same parameters "
            "and name them alike (Trainer(net, ...) or trainer.name_params(net)).")

    def _check_scaler_state(self, saved):
        if saved is None:
            return
        mine = self._scaler_state()
        if mine is None:
            raise ValueError(f"the state holds a dynamic loss scale ({saved.get('next_loss_scale')!r}) of a mixed "
                             "precision run but no loss scaler is attached to this trainer; call "
                             "gluonkit.trainer.amp.init_trainer(trainer) before loading the state.")
        if set(saved) != set(mine):
            raise ValueError(f"the state's loss scaler holds {sorted(saved)} but this trainer's holds "
                             f"{sorted(mine)}; load a state saved by gluonkit.Trainer.state_dict().")

    def load_state_dict(self, state):
        """Restore ``state_dict()``'s optimizer states and replace the pending window with its own.

        Everything is checked first (``check_state_dict``): on ``ValueError`` nothing has
        changed. Parameters are matched by name, so the state of another build of the
        network loads; a state whose names differ from this trainer's only by Gluon's global
        prefix counters (``dense0_weight`` / ``dense1_weight``: two networks built in one
        process without structural names) is matched by position, where the shapes agree.
        The optimizer must be of the same type (and learning-rate scheduler); it takes the
        saved hyper-parameters, scheduler fields and update counts. The pending window becomes
        the saved one: its gradients, fresh flags and counts, or an empty window (zero
        gradients) if none was pending. A window saved on another number of devices lands
        summed on the first device. A state of the previous format (pickled with its optimizer
        object, as ``Checkpoint.load(..., trusted=True)`` reads from an old file) is converted.

        Parameter values are not changed: if the saved trainer had set up its kvstore, this
        one is set up too, keeping each device's values (gluon's set-up copies the first
        device's to all). Load the network's parameters first: with several devices and an
        update on the kvstore ``Parameter.set_data`` resets the kvstore, and its optimizer
        states with it.

        A state with a loss scaler's state needs a scaler attached first
        (``gluonkit.trainer.amp.init_trainer``); it takes the saved scale, so the resumed run
        scales, drops and grows its windows as the original would have. A state without one
        leaves the attached scaler as it is.
        """
        state = self._check_state(state, initialized=True)
        names = self._unique_names()
        index = {name: i for i, name in enumerate(names)}
        if state["kvstore_ready"] and not self._kv_initialized:
            self._set_up_kvstore_keeping_copies()
        optimizer = self._optimizer
        _restore_optimizer(optimizer, state["optimizer"])
        optimizer._all_index_update_counts = {   # MXNet's per-device counts (no public setter)
            int(device): {index[name]: n for name, n in table.items()}
            for device, table in state["update_counts"].items()} or {0: {}}
        optimizer._index_update_count = optimizer._all_index_update_counts.setdefault(0, {})
        for updater in self._state_updaters():
            _put_states(updater, {index[name]: s for name, s in state["states"].items()})
        for name, param in zip(names, self._params):
            if param.grad_req != "null" and param._data is not None:
                self._restore_window(param, state["window"].get(name))
        if state["loss_scaler"] is not None:
            scaler = self._amp_loss_scaler
            for name, value in state["loss_scaler"].items():
                setattr(scaler, "_" + name, value)
            self._scale = self._amp_original_scale / scaler.loss_scale   # what the window was scaled by
        self._nonfinite_skips = int(state["nonfinite_skips"])
        self.pending = tuple(state["pending"])   # also takes the statistics a dropped window returns to
        self._heads.load(state.get("heads"))   # a state saved before counts by head has none

    @staticmethod
    def _restore_window(param, saved):
        """Put a parameter's saved window gradients back (None: an empty window)."""
        targets = param.list_grad()
        if saved is None:
            zero(targets)
            fresh = False
        else:
            grads = saved["grads"]
            if len(grads) != len(targets):   # another number of devices: the sum on the first
                total = sum(grads)
                grads = [total] + [np.zeros_like(total)] * (len(targets) - 1)
            for target, value in zip(targets, grads):
                target[:] = mx.nd.array(value, ctx=target.context, dtype=value.dtype)
            fresh = any(saved["fresh"])
        for array in replicas(param):
            array._fresh_grad = fresh


def _from_previous_format(old):
    """A state of the previous format (pickled with its optimizer object, as a trusted checkpoint
    of that format holds) in this format."""
    names = list(old["params"])
    return {"format": list(TrainerState._STATE_FORMAT), "params": names, "shapes": [None] * len(names),
            "optimizer": _describe_optimizer(old["optimizer"]),
            "states": {name: _as_numpy(state) for name, state in old["states"].items()},
            "update_counts": {str(device): table for device, table in old["update_counts"].items()},
            "accumulate": old["accumulate"], "pending": list(old["pending"]), "window": old["window"],
            "nonfinite_skips": 0, "kvstore_ready": bool(old["states"]), "loss_scaler": old.get("loss_scaler")}


_COUNTER = re.compile(r"(?<=[a-z])\d+_")


def _without_counters(name):
    """A Gluon name without its global prefix counters: ``hybridsequential0_dense1_weight`` ->
    ``hybridsequential_dense_weight``."""
    return _COUNTER.sub("_", str(name))


def _renamed(state, names):
    """``state`` with every per-parameter table keyed by ``names[saved name]``."""
    def rename(table):
        return {names.get(key, key): value for key, value in table.items()} if isinstance(table, dict) else table

    counts = state["update_counts"]
    return {**state, "params": [names[name] for name in state["params"]],
            "states": rename(state["states"]), "window": rename(state["window"]),
            "update_counts": {device: rename(table) for device, table in counts.items()}
            if isinstance(counts, dict) else counts}


def _plain(value):
    """Whether ``value`` is a JSON value: None, bool, number, str, or lists and str-keyed dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _describe_optimizer(optimizer):
    """The optimizer's type, public number/string fields and learning-rate scheduler, as JSON."""
    fields = {name: value for name, value in vars(optimizer).items()
              if not name.startswith("_") and name != "lr_scheduler"
              and (value is None or isinstance(value, (bool, int, float, str)))}
    scheduler = optimizer.lr_scheduler
    described = None
    if scheduler is not None:
        held = vars(scheduler)
        odd = next((name for name, value in held.items() if not _plain(value)), None)
        if odd is not None:
            raise ValueError(f"the optimizer's lr_scheduler ({type(scheduler).__name__}) holds {odd!r}, a "
                             f"{type(held[odd]).__name__}, which a state dict cannot store; use a scheduler of "
                             "mx.lr_scheduler (numbers only), or set the rate with gluonkit.callbacks.LRSchedule.")
        described = {"type": type(scheduler).__name__, "fields": {k: _listed(v) for k, v in held.items()}}
    return {"type": type(optimizer).__name__, "fields": fields, "lr_scheduler": described}


def _listed(value):
    """Tuples as lists, as JSON gives them back."""
    if isinstance(value, (list, tuple)):
        return [_listed(v) for v in value]
    if isinstance(value, dict):
        return {k: _listed(v) for k, v in value.items()}
    return value


def _check_optimizer(optimizer, saved):
    """The saved optimizer description fits ``optimizer`` (type, fields, scheduler type)."""
    if not (isinstance(saved, dict) and isinstance(saved.get("fields"), dict) and "lr_scheduler" in saved):
        raise ValueError("the state's optimizer must be a dict of 'type', 'fields' and 'lr_scheduler'; "
                         "pass what Trainer.state_dict() returned.")
    mine = type(optimizer).__name__
    if saved.get("type") != mine:
        raise ValueError(f"the state holds {saved.get('type')} optimizer states but the trainer uses {mine}; "
                         "create the trainer with the same optimizer.")
    unknown = sorted(set(saved["fields"]) - set(vars(optimizer)))
    odd = [name for name, value in saved["fields"].items() if not _plain(value) or isinstance(value, (list, dict))]
    if unknown or odd:
        raise ValueError(f"the state's {mine} fields {unknown or odd} are not number or string fields of "
                         "this optimizer; pass what Trainer.state_dict() returned.")
    scheduler, described = optimizer.lr_scheduler, saved["lr_scheduler"]
    have = None if scheduler is None else type(scheduler).__name__
    want = None if described is None else described.get("type")
    if have != want:
        raise ValueError(f"the state was saved with lr_scheduler {want} but the trainer's optimizer has "
                         f"{have}; create the optimizer with the same learning-rate scheduler.")
    if described is not None and not (isinstance(described.get("fields"), dict) and _plain(described["fields"])):
        raise ValueError("the state's lr_scheduler fields must be a dict of JSON values; pass what "
                         "Trainer.state_dict() returned.")


def _restore_optimizer(optimizer, saved):
    for name, value in saved["fields"].items():
        setattr(optimizer, name, value)
    if saved["lr_scheduler"] is not None:
        scheduler = optimizer.lr_scheduler
        for name, value in saved["lr_scheduler"]["fields"].items():
            current = getattr(scheduler, name, None)
            setattr(scheduler, name, tuple(value) if isinstance(current, tuple) else value)


def _as_numpy(state):
    """An optimizer state (None, an NDArray, or tuples/lists of them) with NumPy arrays, as lists."""
    if isinstance(state, (tuple, list)):
        return [_as_numpy(part) for part in state]
    return state.asnumpy() if isinstance(state, mx.nd.NDArray) else state


def _as_ndarrays(state):
    """``_as_numpy``'s inverse: tuples of NDArrays, as the optimizers create them."""
    if isinstance(state, (tuple, list)):
        return tuple(_as_ndarrays(part) for part in state)
    if isinstance(state, np.ndarray):
        return mx.nd.array(state, dtype=state.dtype)
    return state


def _put_states(updater, states):
    """Give an ``mx.optimizer.Updater`` these states (index -> NumPy tree), moved to each weight's
    device at its next update, as ``Updater.set_states`` does."""
    updater.states = {i: _as_ndarrays(_as_numpy(state)) for i, state in states.items()}
    updater.states_synced = dict.fromkeys(updater.states, False)


def _check_tables(state, names):
    """The state's per-parameter tables are dicts that name only ``names``."""
    counts = state["update_counts"]
    tables = [("states", state["states"]), ("window", state["window"])]
    tables += [("update_counts", table) for table in (counts.values() if isinstance(counts, dict) else [counts])]
    for key, table in tables:
        if not isinstance(table, dict):
            raise ValueError(f"the state's {key} must be a dict by parameter name, got {table!r}; pass "
                             "what Trainer.state_dict() returned.")
        unknown = sorted(set(table) - set(names))
        if unknown:
            raise ValueError(f"the state's {key} names parameters this trainer does not have: "
                             f"{brief_names(unknown)}; pass what Trainer.state_dict() returned.")
    odd = [(device, table) for device, table in counts.items()
           if not (isinstance(device, str) and device.isdigit()
                   and all(is_int(n) and n >= 0 for n in table.values()))]
    if odd:
        raise ValueError(f"the state's update_counts must map device numbers ('0', '1', ...) to counts >= 0 "
                         f"by parameter, got {odd[0][0]!r}: {odd[0][1]!r}; pass what Trainer.state_dict() returned.")
    skips, ready = state["nonfinite_skips"], state["kvstore_ready"]
    if not (is_int(skips) and skips >= 0 and isinstance(ready, bool)):
        raise ValueError(f"the state's nonfinite_skips must be an int >= 0 and kvstore_ready a bool, got "
                         f"{skips!r} and {ready!r}; pass what Trainer.state_dict() returned.")
    scaler = state["loss_scaler"]
    if scaler is not None and not (isinstance(scaler, dict) and _plain(scaler)):
        raise ValueError(f"the state's loss_scaler must be a dict of numbers, got {scaler!r}; pass what "
                         "Trainer.state_dict() returned.")


def _check_optimizer_state(name, saved, param, optimizer, index):
    """Refuse a parameter's optimizer state laid out otherwise than ``optimizer`` creates it.

    Array shapes are compared with a state created for the parameter (momentum and Adam's
    moments have its shape, GroupAdaGrad keeps one value per row); not for a parameter whose
    shape is not fully known yet (deferred initialization).
    """
    if param.shape is None or not all(d > 0 for d in param.shape):
        return
    with warnings.catch_warnings():   # SGD warns about float16 weights without multi_precision
        warnings.simplefilter("ignore")
        expected = optimizer.create_state_multi_precision(index, mx.nd.zeros(param.shape, dtype=param.dtype))
    if _layout(saved) != _layout(expected) and hasattr(optimizer, "momentum") \
            and (saved is None) != (expected is None):
        raise ValueError(f"the state {'holds no' if saved is None else 'holds a'} momentum buffer "
                         f"for {name} but this {type(optimizer).__name__} has momentum "
                         f"{optimizer.momentum:g}; resume with the momentum the state was trained "
                         "with (--momentum on the commands).")
    if _layout(saved) != _layout(expected):
        raise ValueError(f"the state's optimizer state of {name} is laid out as {_layout(saved)} (array shapes, dtypes) "
                         f"where {type(optimizer).__name__} keeps {_layout(expected)} for a parameter of shape "
                         f"{param.shape}; load a state of this network.")


def _layout(state):
    """An optimizer state's structure: the shapes and dtypes of its arrays, nested as it nests them."""
    if isinstance(state, (tuple, list)):
        return tuple(_layout(part) for part in state)
    if isinstance(state, (np.ndarray, mx.nd.NDArray)):
        return state.shape, np.dtype(state.dtype).name
    return None if state is None else type(state).__name__
