"""Trainer: exact gradient accumulation, no stale gradients, deferred parameters skipped."""
import numbers
import warnings
from collections import defaultdict

import mxnet as mx
from mxnet import gluon

__all__ = ["Trainer"]


def _check_count(batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (the number of samples the "
                         f"gradients were summed over), got {batch_size!r}.")
    return int(batch_size)


def _zero(grads):
    """Set gradient arrays to zero, one fused call per context for the dense ones."""
    by_ctx = defaultdict(list)
    for grad in grads:
        if grad.stype == "default":
            by_ctx[grad.context].append(grad)
        else:
            mx.nd.zeros_like(grad, out=grad)
    for arrays in by_ctx.values():
        mx.nd.reset_arrays(*arrays, num_arrays=len(arrays))


def _replicas(param):
    """The parameter's arrays on every context, whatever their storage type."""
    return param._check_and_get(param._data, list)


def _is_distributed(kvstore):
    kv_type = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")
    return "dist" in str(kv_type), "async" in str(kv_type)


class Trainer(gluon.Trainer):
    """A ``gluon.Trainer`` that accumulates gradients exactly and never applies stale ones.

    With ``accumulate=k``, ``step`` collects ``k`` micro-batches (of any sizes, shapes and
    device splits) and then applies one update normalized by the total number of samples:
    the result equals one step on the whole batch. With ``accumulate=1`` it is a drop-in
    replacement for ``gluon.Trainer``.

    On every update:

    * a parameter whose gradient no backward wrote since the last update (on every context)
      is skipped: no update, no weight decay, optimizer state untouched;
    * a context that got no data contributes zero, never its previous gradient;
    * a parameter still waiting for deferred initialization is skipped, and joins once
      initialized;
    * with a distributed kvstore, ``batch_size`` is the local count and the global count is
      summed over the workers.

    Parameters
    ----------
    params : ParameterDict, dict or list of Parameter
        The parameters to optimize.
    optimizer : str or Optimizer
        As for ``gluon.Trainer``.
    optimizer_params : dict, optional
        As for ``gluon.Trainer``, e.g. ``{'learning_rate': 0.1}``.
    kvstore : str or KVStore, default 'device'
        As for ``gluon.Trainer``. Distributed kvstores must be synchronous.
    compression_params : dict, optional
        As for ``gluon.Trainer``.
    update_on_kvstore : bool, optional
        As for ``gluon.Trainer``. With a distributed kvstore updates run on the workers
        (the global sample count changes from update to update), so it cannot be True there.
    accumulate : int, default 1
        Number of ``step`` calls per update. With ``accumulate > 1`` every trainable
        parameter gets ``grad_req='add'`` and its gradient is zeroed now and after each update.

    Example::

        trainer = gluonkit.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1},
                                   accumulate=4)
        for x, y in loader:                       # micro-batches of any size
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(x.shape[0])              # True on every 4th call
        trainer.flush()                           # apply what is left at the end of the epoch
    """

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device",
                 compression_params=None, update_on_kvstore=None, accumulate=1):
        if isinstance(accumulate, bool) or not isinstance(accumulate, numbers.Integral) or accumulate < 1:
            raise ValueError(f"accumulate must be a positive integer (micro-batches per update), "
                             f"got {accumulate!r}; use 1 to update on every step.")
        distributed, asynchronous = _is_distributed(kvstore)
        if distributed:
            if asynchronous:
                raise ValueError(f"kvstore={kvstore!r} is asynchronous; gluonkit.Trainer normalizes each "
                                 "update by the global sample count, which needs 'dist_sync' or "
                                 "'dist_device_sync'.")
            if update_on_kvstore:
                raise ValueError("update_on_kvstore=True cannot be used with a distributed kvstore in "
                                 "gluonkit.Trainer: the servers' optimizer would use a fixed batch size. "
                                 "Leave update_on_kvstore unset; gradients are summed on the servers and "
                                 "every worker applies the same update.")
            update_on_kvstore = False
        super().__init__(params, optimizer, optimizer_params, kvstore=kvstore,
                         compression_params=compression_params,
                         update_on_kvstore=update_on_kvstore)
        self._accumulate = int(accumulate)
        self._pending_steps = 0
        self._pending_samples = 0
        self._selected = None
        self._skipped = ()
        self._warned_unused = False
        self._count_key_ready = False
        if self._accumulate > 1:
            if self._contains_sparse_grad:
                raise ValueError("accumulate > 1 needs dense gradients; a parameter has a sparse "
                                 "gradient (grad_stype='row_sparse'). Use accumulate=1 for it.")
            for param in self._params:
                if param.grad_req != "null":
                    param.grad_req = "add"
            self._zero_grads(self._params)

    @property
    def accumulate(self):
        """int: Number of ``step`` calls per update."""
        return self._accumulate

    @property
    def pending(self):
        """tuple of int: ``(steps, samples)`` collected since the last update."""
        return self._pending_steps, self._pending_samples

    @property
    def skipped(self):
        """tuple of str: Names of the parameters the last update left out (unused or deferred)."""
        return self._skipped

    def step(self, batch_size, ignore_stale_grad=False):
        """Add ``batch_size`` samples to the window; update once the window is full.

        Parameters
        ----------
        batch_size : int
            Number of samples whose loss gradients the last backward(s) summed (on this
            worker). The update is normalized by the sum over the window.
        ignore_stale_grad : bool, default False
            Unused parameters are always skipped; True only silences the warning about them.

        Returns
        -------
        bool
            True if this call applied an update.
        """
        self._pending_samples += _check_count(batch_size)
        self._pending_steps += 1
        if self._pending_steps < self._accumulate:
            return False
        self._apply(ignore_stale_grad)
        return True

    def flush(self, ignore_stale_grad=False):
        """Apply a partial window now, normalized by the samples it holds.

        Returns
        -------
        bool
            False if nothing was pending.
        """
        if not self._pending_steps:
            return False
        self._apply(ignore_stale_grad)
        return True

    def _apply(self, ignore_stale_grad):
        samples = self._global_count(self._pending_samples)
        self._pending_steps = self._pending_samples = 0
        self._check_and_rescale_grad(self._scale / samples)
        self._allreduce_grads()
        self._update(ignore_stale_grad)

    def _global_count(self, local_count):
        """The number of samples in this window summed over all workers."""
        if not self._kv_initialized:
            self._init_kvstore()
        if not self._distributed:
            return local_count
        key = len(self._params)  # one past the parameters' keys
        count = mx.nd.array([local_count], dtype="float64")
        if not self._count_key_ready:
            self._kvstore.init(key, mx.nd.zeros(1, dtype="float64"))
            self._count_key_ready = True
        self._kvstore.pushpull(key, count, out=count)
        return int(round(count.asscalar()))

    def _init_kvstore(self):
        # MXNet reads every parameter's data to choose the kvstore; deferred ones have none yet.
        params = self._params
        self._params = [p for p in params if p._data is not None] or params
        try:
            super()._init_kvstore()
        finally:
            self._params = params

    def _select(self, ignore_stale_grad=False):
        """Indices of the parameters to update; zero the contexts that got no gradient."""
        selected, skipped = [], []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            if param._data is None:
                skipped.append(param.name)
                continue
            fresh = [bool(arr._fresh_grad) for arr in _replicas(param)]
            if not any(fresh):
                skipped.append(param.name)
                continue
            if not all(fresh):
                _zero([g for g, f in zip(param.list_grad(), fresh) if not f])
            selected.append(i)
        if skipped and not selected:
            raise RuntimeError("step() found no fresh gradient: no backward() ran since the last update. "
                               "Call loss.backward() inside autograd.record() before trainer.step().")
        if skipped and not self._warned_unused and not ignore_stale_grad:
            warnings.warn(f"Skipping {len(skipped)} parameter(s) that got no gradient since the last "
                          f"update (unused or not yet initialized): {', '.join(skipped)}. They are left "
                          "unchanged; this is warned once (see Trainer.skipped for each update).",
                          stacklevel=5)
            self._warned_unused = True
        self._skipped = tuple(skipped)
        self._selected = selected
        return selected

    def _allreduce_grads(self):
        if self._params_to_init:
            self._init_params()
        selected = self._select() if self._selected is None else self._selected
        if not self._kvstore:
            return
        for i in selected:
            param = self._params[i]
            grads = param.list_grad()
            if grads[0].stype != "default":
                self._kvstore.push(i, grads, priority=-i)
                if param._stype == "default":
                    out = param.list_data() if self._update_on_kvstore else grads
                    self._kvstore.pull(i, out, priority=-i, ignore_sparse=self._distributed)
            elif self._update_on_kvstore:
                self._kvstore.pushpull(i, grads, out=param.list_data(), priority=-i)
            else:
                self._kvstore.pushpull(i, grads, priority=-i)

    def _update(self, ignore_stale_grad=False):
        selected = self._select(ignore_stale_grad) if self._selected is None else self._selected
        self._selected = None
        params = [self._params[i] for i in selected]
        loss_scaler = getattr(self, "_amp_loss_scaler", None)
        overflow = loss_scaler is not None and loss_scaler.has_overflow(params)
        if not overflow and not (self._kvstore and self._update_on_kvstore):
            updates = [[] for _ in self._updaters]
            for i, param in zip(selected, params):
                for upd, arr, grad in zip(updates, param.list_data(), param.list_grad()):
                    upd.append((i, grad, arr))
            for updater, upd in zip(self._updaters, updates):
                if upd:
                    indices, grads, arrays = zip(*upd)
                    updater(list(indices), list(grads), list(arrays))
        for param in params:
            for arr in _replicas(param):
                arr._fresh_grad = False
        self._zero_grads([p for p in params if p.grad_req == "add"])

    @staticmethod
    def _zero_grads(params):
        _zero([g for p in params if p._data is not None and p.grad_req != "null" for g in p.list_grad()])
