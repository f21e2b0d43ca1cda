"""The Trainer's persistence: structural parameter names, ``state_dict`` and ``load_state_dict``.

A mixin of ``gluonkit.Trainer`` (its only user), kept apart so that the update path and the
state it saves each fit in a module of their own.
"""
import copy
import pickle
import warnings
from collections.abc import Mapping

import mxnet as mx
import numpy as np
from mxnet import gluon

from .. import params as _structure
from ._gradients import replicas, zero
from ._trainer_args import check_pending

__all__ = ["TrainerState"]


class TrainerState:
    """Names, ``state_dict`` and ``load_state_dict`` of ``gluonkit.Trainer``.

    Optimizer states travel through MXNet's public ``Updater.get_states`` / ``set_states``.
    Three private members have no public route and are used here only: the optimizer's
    per-index update counts (re-keyed from the trainer's indices to names), the updater of a
    kvstore that updates on the kvstore (KVStore saves it only to a file), and the
    fresh-gradient flags of the pending window.
    """

    _STATE_FORMAT = ("gluonkit.Trainer", 1)

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
            names = _structure.select(names)
        if not isinstance(names, Mapping):
            raise TypeError(f"names must be a Block or a dict of name -> Parameter, got {names!r}.")
        ours = set(self._params)
        chosen = dict(self._names)
        chosen.update({param: name for name, param in _structure.first_names(names).items() if param in ours})
        return chosen

    def _name_of(self, param, naming=None):
        return (self._names if naming is None else naming).get(param, param.name)

    def _state_updaters(self):
        """The updaters holding the optimizer states (the kvstore's when it updates)."""
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()
        if self._update_on_kvstore:
            return [self._kvstore._updater]   # KVStore only writes its updater to a file
        return self._updaters

    def _unique_names(self, naming=None):
        names = [self._name_of(param, naming) for param in self._params]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"Several parameters of the trainer are named {repeated}; name them "
                             "apart with trainer.name_params(net) (structural names).")
        return names

    def state_dict(self):
        """The optimizer states and the pending window, keyed by parameter name (picklable).

        Holds the optimizer (its hyper-parameters, learning-rate scheduler and update
        counts), each parameter's optimizer state (momentum, ...), ``accumulate``, the
        pending accumulation window: its ``(steps, samples)`` and, when steps are pending,
        each parameter's gradient on each device and whether a backward wrote it; and the
        dynamic loss scaler's state (its scale and clean windows counted) when one is
        attached (``gluonkit.train.amp.init_trainer``), else None.

        Example::

            state = trainer.state_dict()
            other.load_state_dict(state)    # a trainer over another build of the network
        """
        names = self._unique_names()
        states, optimizer = pickle.loads(self._state_updaters()[0].get_states(dump_optimizer=True))
        counts = {device: {names[i]: n for i, n in table.items()}
                  for device, table in optimizer._all_index_update_counts.items()}
        optimizer._all_index_update_counts = {0: {}}
        optimizer._index_update_count = optimizer._all_index_update_counts[0]
        window = {}
        if self._pending_steps:
            for name, param in zip(names, self._params):
                if param.grad_req != "null" and param._data is not None:
                    window[name] = {"grads": [g.asnumpy() for g in param.list_grad()],
                                    "fresh": [bool(a._fresh_grad) for a in replicas(param)]}
        return {"format": self._STATE_FORMAT, "params": names, "optimizer": optimizer,
                "states": {names[i]: state for i, state in states.items()},
                "update_counts": counts, "accumulate": self._accumulate,
                "pending": self.pending, "window": window, "loss_scaler": self._scaler_state()}

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
        keys = ("params", "optimizer", "states", "update_counts", "accumulate", "pending", "window")
        if not (isinstance(state, dict) and state.get("format") == self._STATE_FORMAT
                and all(key in state for key in keys)):
            raise ValueError("state is not a gluonkit.Trainer state_dict (of this version); pass "
                             "what Trainer.state_dict() returned.")
        mine, saved = type(self._optimizer).__name__, type(state["optimizer"]).__name__
        if mine != saved:
            raise ValueError(f"the state holds {saved} optimizer states but the trainer uses {mine}; "
                             "create the trainer with the same optimizer.")
        names = self._unique_names(naming)
        if set(names) != set(state["params"]):
            raise ValueError(
                f"the state was saved by a trainer of {len(state['params'])} parameters "
                f"({_structure.brief_names(sorted(state['params']))}) but this trainer has {len(names)} "
                f"({_structure.brief_names(sorted(names))}); build the trainer over the same parameters "
                "and name them alike (Trainer(net, ...) or trainer.name_params(net)).")
        steps, _ = check_pending(state["pending"], accumulate=None)
        if steps and state["accumulate"] != self._accumulate:
            raise ValueError(f"the state holds a partial accumulation window ({steps} of "
                             f"{state['accumulate']} micro-batches) but the trainer has accumulate="
                             f"{self._accumulate}; resume with accumulate={state['accumulate']}.")
        check_pending(state["pending"], self._accumulate)
        self._check_scaler_state(state.get("loss_scaler"))   # absent from states saved before it was kept
        _check_tables(state, names)
        params = dict(zip(names, self._params))
        for name, saved_state in state["states"].items():
            _check_optimizer_state(name, saved_state, params[name], state["optimizer"], names.index(name))
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
                if not (isinstance(grad, np.ndarray) and _structure.shape_fits(param.shape, grad.shape)
                        and grad.dtype == np.dtype(param.dtype)):
                    raise ValueError(f"the state's window holds a {getattr(grad, 'dtype', type(grad).__name__)} "
                                     f"gradient of shape {getattr(grad, 'shape', None)} for {name}, which is "
                                     f"{np.dtype(param.dtype)} of shape {param.shape}; load a state of this network.")

    def _check_scaler_state(self, saved):
        if saved is None:
            return
        mine = self._scaler_state()
        if mine is None:
            raise ValueError(f"the state holds a dynamic loss scale ({saved.get('next_loss_scale')!r}) of a mixed "
                             "precision run but no loss scaler is attached to this trainer; call "
                             "gluonkit.train.amp.init_trainer(trainer) before loading the state.")
        if set(saved) != set(mine):
            raise ValueError(f"the state's loss scaler holds {sorted(saved)} but this trainer's holds "
                             f"{sorted(mine)}; load a state saved by gluonkit.Trainer.state_dict().")

    def load_state_dict(self, state):
        """Restore ``state_dict()``'s optimizer states and replace the pending window with its own.

        Everything is checked first (``check_state_dict``): on ``ValueError`` nothing has
        changed. Parameters are matched by name, so the state of another build of the
        network loads. The pending window becomes the saved one: its gradients, fresh flags
        and counts, or an empty window (zero gradients) if none was pending. A window saved
        on another number of devices lands summed on the first device.

        With several devices and an update on the kvstore, load the network's parameters
        first: ``Parameter.set_data`` resets the kvstore, and its optimizer states with it.

        A state with a loss scaler's state needs a scaler attached first
        (``gluonkit.train.amp.init_trainer``); it takes the saved scale, so the resumed run
        scales, drops and grows its windows as the original would have. A state without one
        leaves the attached scaler as it is.
        """
        self._check_state(state, initialized=True)
        names = self._unique_names()
        index = {name: i for i, name in enumerate(names)}
        optimizer = copy.copy(state["optimizer"])
        optimizer._all_index_update_counts = {
            device: {index[name]: n for name, n in table.items()}
            for device, table in state["update_counts"].items()} or {0: {}}
        optimizer._index_update_count = optimizer._all_index_update_counts.setdefault(0, {})
        blob = pickle.dumps(({index[name]: s for name, s in state["states"].items()}, optimizer))
        updaters = self._state_updaters()
        for updater in updaters:
            updater.set_states(blob)
            updater.optimizer = updaters[0].optimizer
        self._optimizer = updaters[0].optimizer
        self._optimizer.param_dict = dict(enumerate(self._params))
        for name, param in zip(names, self._params):
            if param.grad_req != "null" and param._data is not None:
                self._restore_window(param, state["window"].get(name))
        if state.get("loss_scaler") is not None:
            scaler = self._amp_loss_scaler
            for name, value in state["loss_scaler"].items():
                setattr(scaler, "_" + name, value)
            self._scale = self._amp_original_scale / scaler.loss_scale   # what the window was scaled by
        self.pending = tuple(state["pending"])

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
                             f"{_structure.brief_names(unknown)}; pass what Trainer.state_dict() returned.")


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
    if _layout(saved) != _layout(expected):
        raise ValueError(f"the state's optimizer state of {name} is laid out as {_layout(saved)} (array shapes) "
                         f"where {type(optimizer).__name__} keeps {_layout(expected)} for a parameter of shape "
                         f"{param.shape}; load a state of this network.")


def _layout(state):
    """An optimizer state's structure: the shapes of its NDArrays, nested as it nests them."""
    if isinstance(state, (tuple, list)):
        return tuple(_layout(part) for part in state)
    if state is None or isinstance(state, mx.nd.NDArray):
        return None if state is None else state.shape
    return type(state).__name__
