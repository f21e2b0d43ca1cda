"""Trainer: exact gradient accumulation, no stale gradients, deferred parameters skipped."""
import math
import os
import warnings

import mxnet as mx
from mxnet import gluon

from ..names import first_names, network_names, select
from ..validate import check_count, is_int, positive_int
from ._args import (check_clip, check_clip_setting, check_horovod, check_horovod_options, check_kvstore,
                    check_launched, check_learning_rate, check_optimizer, check_pending, check_policy,
                    check_update_on_kvstore, is_distributed, unique_params, warn_if_launched)
from ._heads import HeadCounting, HeadWindow
from ._gradients import clip_factors, read, replicas, scaled_update, sum_of_squares, zero
from .horovod import Horovod, is_horovod
from ._loss_scaling import LossScaling
from ._state import TrainerState
from ._window import Window, whole
from ._workers import Workers

__all__ = ["Trainer"]

_NO_GRADIENT = ("step() found no fresh gradient: no backward() ran since the last update, and "
                "nothing was counted or applied. Call loss.backward() inside autograd.record() "
                "before trainer.step().")


class _KvstoreUpdates(RuntimeError, AssertionError):
    """``allreduce_grads`` or ``update`` where the kvstore updates the parameters: a
    ``RuntimeError``, and the ``AssertionError`` gluon.Trainer raises there, for code that
    catches that one."""


# MXNet 1.9.1's multi-tensor SGD kernels take at most 60 weights per call (61 crash the process)
MULTI_TENSOR_WEIGHTS = 60


def _read_window(count, sum_sq):
    """``(count, sum_sq)`` as floats (a count that is whole as an int), read in one wait."""
    arrays = [a for a in (count, sum_sq) if isinstance(a, mx.nd.NDArray)]
    values = iter(read(*arrays))
    count = whole(next(values)) if isinstance(count, mx.nd.NDArray) else count
    return count, None if sum_sq is None else next(values)


def _aggregate_updates(optimizer):
    """Let SGD update up to 60 parameters per multi-tensor call rather than MXNet's default 4.

    The same arithmetic in fewer calls (each costs the host a Python round trip); left alone
    when ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` is set or the optimizer does not aggregate.
    """
    if (isinstance(optimizer, mx.optimizer.SGD) and optimizer.aggregate_num > 0
            and "MXNET_OPTIMIZER_AGGREGATION_SIZE" not in os.environ):
        optimizer.aggregate_num = MULTI_TENSOR_WEIGHTS


def _named(params):
    """``(params, names)``: what ``gluon.Trainer`` takes, and {Parameter: name} from a Block,
    a dict, or a ParameterDict (named by the block that collected it)."""
    if isinstance(params, gluon.Block):
        params = first_names(select(params))
    if isinstance(params, gluon.ParameterDict):
        return params, {param: name for name, param in (network_names(params) or {}).items()}
    if isinstance(params, dict):
        return params, {param: name for name, param in params.items()}
    return params, {}


class Trainer(TrainerState, LossScaling, Workers, HeadCounting, gluon.Trainer):
    """A ``gluon.Trainer`` that accumulates gradients exactly and never applies stale ones.

    With ``accumulate=k``, ``step`` collects ``k`` micro-batches (of any sizes, shapes and
    device splits) and then applies one update normalized by the sum of their counts (any
    finite reals >= 0: samples, positives, tokens, a sum of weights; or one-element NDArrays):
    the result equals one step on the whole batch. With ``accumulate=1`` it is a drop-in
    replacement for ``gluon.Trainer``, bit for bit for every count ``gluon.Trainer.step`` takes.

    On every update:

    * a parameter whose gradient no backward wrote since the last update (on every context)
      is skipped: no update, no weight decay, optimizer state untouched;
    * a context that got no data contributes zero, never its previous gradient;
    * a parameter still waiting for deferred initialization is skipped, and joins once
      initialized;
    * with a distributed kvstore (or Horovod), ``batch_size`` is the local count and the
      global count is summed over the workers;
    * with ``clip_global_norm``, the gradient of the whole window (normalized by the global
      count, summed over devices and workers) is scaled to at most that norm, on the device.

    The host waits for the devices at most once per update, and only where it decides by a
    value on them: a count given as an NDArray, ``on_nonfinite`` 'skip' or 'raise', or a loss
    scaler attached; never for clipping (docs/trainer.md, "Steps that never wait").

    Parameters
    ----------
    params : Block, ParameterDict, dict or list of Parameter
        The parameters to optimize, all on the same contexts. A Block gives all of its
        parameters under their structural names (``features.0.weight``, as
        ``gluonkit.params.select`` gives them), and so does ``block.collect_params()`` (named by
        that block); a dict names them by its keys; a list goes by ``Parameter.name`` until
        ``name_params`` names them. The names key
        ``state_dict`` and appear in warnings. A parameter listed twice (shared by two blocks
        and collected from both) is updated once.
    optimizer : str or Optimizer
        As for ``gluon.Trainer``. SGD updates up to 60 parameters per multi-tensor call
        (MXNet's default is 4; the environment variable ``MXNET_OPTIMIZER_AGGREGATION_SIZE``,
        if set, wins): the same arithmetic in fewer host calls.
    optimizer_params : dict, optional
        As for ``gluon.Trainer``, e.g. ``{'learning_rate': 0.1}``; not with an Optimizer instance.
    kvstore : str or KVStore, default 'device'
        As for ``gluon.Trainer``; a name MXNet does not know is refused. Distributed kvstores
        must be synchronous, in a process started by ``python -m gluonkit.launch``.
        'horovod' (or a ``gluonkit.trainer.Horovod``) sums over the ranks of a job started
        by ``horovodrun`` with the same contract (Horovod is an optional install).
    compression_params : dict, optional
        As for ``gluon.Trainer`` (MXNet's 1-bit and 2-bit kvstore compression; not with Horovod).
    update_on_kvstore : bool, optional
        As for ``gluon.Trainer``. With a distributed kvstore updates run on the workers
        (the global sample count changes from update to update), so it cannot be True there;
        nor with ``clip_global_norm`` (unset, it becomes False); nor where no kvstore is
        created (``kvstore=None``, or one context). When it is False the gradients
        are summed first and the non-finite check and the norm read one device's copy, in one
        pass; otherwise the check reads every device's copy before the kvstore updates.
    accumulate : int, default 1
        Number of ``step`` calls per update. With ``accumulate > 1`` every trainable
        parameter gets ``grad_req='add'`` and its gradient is zeroed now and after each update;
        ``step`` refuses a trainable parameter switched to ``grad_req='write'`` afterwards.
    on_nonfinite : {'ignore', 'skip', 'raise'}, default 'ignore'
        What an update does when a gradient holds NaN or Inf: 'ignore' applies it as
        ``gluon.Trainer`` would; 'skip' leaves parameters and optimizer states unchanged,
        zeroes the gradients, counts it in ``nonfinite_skips`` and warns; 'raise' raises
        ``FloatingPointError`` naming the first parameter affected. Both restore the
        running statistics (non-differentiable parameters such as BatchNorm's running mean
        and variance) to their values at the start of the dropped window. With a loss scaler
        attached (``attach_loss_scaler``) such a window is a loss-scale overflow:
        whatever the policy it is dropped and the scaler halves its scale ('skip' also warns and
        counts it, 'raise' raises after dropping it).
    clip_global_norm : float, optional
        Scale each update's gradient (the window's, normalized by the global count) so that
        its L2 norm over all parameters is at most this value; ``global_norm`` gives the norm
        before clipping.
    compression, gradient_predivide_factor : optional
        With ``kvstore='horovod'``, as for ``hvd.DistributedTrainer``: ``hvd.Compression.fp16``
        sends the gradients as float16; the counts stay exact (see ``gluonkit.trainer.Horovod``).

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
                 compression_params=None, update_on_kvstore=None, accumulate=1, on_nonfinite="ignore",
                 clip_global_norm=None, compression=None, gradient_predivide_factor=None):
        accumulate = positive_int(accumulate, "accumulate", "micro-batches per update; use 1 to update on every step")
        check_policy(on_nonfinite)
        clip_global_norm = check_clip(clip_global_norm)
        check_optimizer(optimizer, optimizer_params)
        check_kvstore(kvstore)
        params, names = _named(params)
        params = unique_params(params)
        horovod_options = {name: value for name, value in (("compression", compression),
                           ("gradient_predivide_factor", gradient_predivide_factor)) if value is not None}
        check_horovod_options(kvstore, horovod_options)
        if is_horovod(kvstore):
            check_horovod(params, compression_params, update_on_kvstore)
            kvstore = kvstore if isinstance(kvstore, Horovod) else Horovod(**horovod_options)
        check_update_on_kvstore(params, kvstore, update_on_kvstore)
        distributed, asynchronous = is_distributed(kvstore)
        if clip_global_norm is not None:
            check_clip_setting(params, kvstore, update_on_kvstore)
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
            check_launched(kvstore)
            update_on_kvstore = False
        else:
            warn_if_launched(kvstore)
        super().__init__(params, optimizer, optimizer_params, kvstore=kvstore,
                         compression_params=compression_params,
                         update_on_kvstore=update_on_kvstore)
        _aggregate_updates(self._optimizer)
        if isinstance(kvstore, Horovod):   # the summed gradients arrive divided by it
            self._scale *= kvstore.gradient_predivide_factor
        if clip_global_norm is not None and update_on_kvstore is None:
            self._kvstore_params["update_on_kvstore"] = False   # clip the summed gradient first
        self._names = names
        self._accumulate = accumulate
        self._on_nonfinite = on_nonfinite
        self._clip_global_norm = clip_global_norm
        self._global_norm = None      # a float, or a one-element NDArray not read yet
        self._amp_loss_scaler = None  # set by attach_loss_scaler; MXNet's amp reads the same field
        self._amp_original_scale = self._scale
        self._nonfinite_skips = 0
        self._window = Window()
        self._heads = HeadWindow()   # the counts by head of a window begun with begin_window
        self._grouping = {}   # the gradients' grouping for their sum of squares, kept between updates
        self._selected = None
        self._skipped = ()
        self._warned_unused = False
        self._reduced = False         # allreduce_grads() ran, update() has not yet
        if self._accumulate > 1:
            if self._contains_sparse_grad:
                raise ValueError("accumulate > 1 needs dense gradients; a parameter has a sparse "
                                 "gradient (grad_stype='row_sparse'). Use accumulate=1 for it.")
            for param in self._params:
                if param.grad_req != "null":
                    param.grad_req = "add"
            self._zero_grads(self._params)
        self._init_workers()
        if distributed:
            # every worker starts from worker 0's weights, before its first forward
            self._init_kvstore()
            self._init_params()
        self.snapshot_statistics()

    @property
    def accumulate(self):
        """int: Number of ``step`` calls per update."""
        return self._accumulate

    @property
    def pending(self):
        """tuple: ``(steps, count)`` collected since the last update, on this worker.

        Reading it waits for the counts given as NDArrays. Settable, to resume a window whose
        gradients were restored (as ``Checkpoint`` does); that window replaces the current one.
        """
        return self._window.total()

    @pending.setter
    def pending(self, window):
        steps, count = check_pending(window, self._accumulate)
        self._window.replace(steps, int(count) if is_int(count) else float(count))
        self.snapshot_statistics()

    @property
    def on_nonfinite(self):
        """str: What an update does with NaN or Inf gradients: 'ignore', 'skip' or 'raise'.

        Settable, e.g. to 'raise' while debugging; every worker of a distributed run must
        use the same policy.
        """
        return self._on_nonfinite

    @on_nonfinite.setter
    def on_nonfinite(self, policy):
        was_ignoring = self._on_nonfinite == "ignore"
        self._on_nonfinite = check_policy(policy)
        if was_ignoring != (policy == "ignore"):
            self.snapshot_statistics()

    @property
    def clip_global_norm(self):
        """float or None: The largest global gradient norm an update applies."""
        return self._clip_global_norm

    @property
    def global_norm(self):
        """float or None: L2 norm of the last applied update's gradient, before clipping.

        The gradient normalized by the window's global count, over every parameter updated,
        summed over devices and workers. Measured only when the gradients are read anyway
        (``clip_global_norm`` set, ``on_nonfinite`` other than 'ignore', or a loss scaler
        attached); None otherwise, before the first update, and when the kvstore updates
        several devices one by one (nothing summed their gradients first). Where the update
        did not read it on the host (clipping under 'ignore'), reading it waits for the
        device; ``global_norm_array`` gives it without a wait.
        """
        if isinstance(self._global_norm, mx.nd.NDArray):
            self._global_norm = read(self._global_norm)[0]
        return self._global_norm

    @property
    def global_norm_array(self):
        """NDArray or None: ``global_norm`` as a float64 NDArray of shape (1,), without a wait.

        ``fit`` collects it after each update and reads the epoch's norms together when it
        settles its running tally, not once per update.
        """
        norm = self._global_norm
        if norm is None or isinstance(norm, mx.nd.NDArray):
            return norm
        return mx.nd.array([norm], dtype="float64")

    @property
    def nonfinite_skips(self):
        """int: Updates skipped so far because a gradient held NaN or Inf (``on_nonfinite='skip'``)."""
        return self._nonfinite_skips

    def load_states(self, fname):
        """Load optimizer states (as ``gluon.Trainer``); the network's parameters were loaded too,
        so the running statistics a dropped window returns to are taken again now."""
        super().load_states(fname)
        self.snapshot_statistics()

    def set_learning_rate(self, lr):
        """Set a new learning rate; it must be a finite number >= 0, and the optimizer have no
        ``lr_scheduler`` (``RuntimeError``; ``gluon.Trainer`` raises a ``UserWarning``)."""
        lr = check_learning_rate(lr)
        scheduler = self._optimizer.lr_scheduler
        if scheduler is not None:
            raise RuntimeError(f"set_learning_rate({lr!r}): the optimizer's lr_scheduler "
                               f"({type(scheduler).__name__}) sets the learning rate at every update. Change "
                               "the scheduler, or create the trainer without one and set the rate by hand "
                               "or with gluonkit.callbacks.LRSchedule.")
        super().set_learning_rate(lr)

    @property
    def rank(self):
        """int: This worker's index with a distributed kvstore, else 0."""
        return self._kvstore.rank if self._distributed else 0

    @property
    def num_workers(self):
        """int: Number of workers with a distributed kvstore, else 1."""
        return self._kvstore.num_workers if self._distributed else 1

    @property
    def skipped(self):
        """tuple of str: Names of the parameters the last update left out (unused or deferred)."""
        return self._skipped

    def step(self, batch_size, ignore_stale_grad=False):
        """Add ``batch_size`` to the window's count; update once the window is full.

        Parameters
        ----------
        batch_size : int, float, NDArray or dict
            What the loss was normalized by in the last backward(s), on this worker: samples,
            or positive anchors, tokens, valid pixels, a sum of weights. Any finite real >= 0
            (a Python or NumPy number; integers keep exact arithmetic), or a one-element
            NDArray of any dtype on any device, which is added up there and read once, at the
            update. The update is normalized by the window's count summed over the workers
            (``rescale_grad = 1 / count``, as ``gluon.Trainer.step`` sets it); a window whose
            count is 0 is dropped with a warning (nothing to normalize by). A negative, NaN or
            infinite number is a ``ValueError`` raised before anything changes; an NDArray
            count is checked when read, at the update, which then applies nothing. A step
            with no backward since the last update (no parameter got a gradient) is a
            ``RuntimeError``, also raised before anything changes, whatever ``accumulate``;
            except a step of count 0, a micro-batch that got no sample (as on a worker or
            rank whose share of it was empty), which adds nothing; an NDArray count of 0 too
            (read at the update, which raises that ``RuntimeError`` if it is not 0).

            Counts by head (``{'mlm': n_tokens, 'nsp': n_sequences}``), in a window begun
            with ``begin_window`` whose losses ``weigh_losses`` weighed: this micro-batch's
            count of each head. The window's counts by head must add up to those
            ``begin_window`` got (checked at the update; a window that does not is dropped
            with a ``ValueError``, as is one that never weighed a head announced above 0). A
            window whose every head counts 0 is dropped with a warning, as a count of 0.
        ignore_stale_grad : bool, default False
            Unused parameters are always skipped; True only silences the warning about them.

        Returns
        -------
        bool
            True if this call applied an update (False while the window fills, or when
            ``on_nonfinite='skip'`` or a zero count dropped it).
        """
        if self._reduced:
            raise RuntimeError("step() was called after allreduce_grads(): step sums the gradients "
                               "itself, so they would be added twice. Call update(count) after "
                               "allreduce_grads(), or step(count) alone.")
        if isinstance(batch_size, dict) or self._heads.totals is not None:
            by_head, count = self._count_heads(batch_size)
        else:
            by_head, count = None, check_count(batch_size)
        if isinstance(count, mx.nd.NDArray):   # 0 is a micro-batch of no sample: decided when read
            without_backward = not self._has_fresh_gradient()
        elif count != 0 and not self._has_fresh_gradient():
            raise RuntimeError(_NO_GRADIENT)
        else:
            without_backward = False
        if by_head is not None:
            self._heads.add(by_head)
        self._window.add(count, without_backward)
        if self._window.steps < self._accumulate:
            return False
        return self._apply_window(ignore_stale_grad)

    def flush(self, ignore_stale_grad=False, wait_for_workers=True):
        """Apply a partial window now, normalized by the samples it holds.

        With a distributed kvstore this worker is out of data: it takes part in the updates of
        the workers that still have some with a count of 0 and zero gradients, until every
        worker flushed (so shards that make different numbers of updates never leave a worker
        waiting), or until the job agreed to stop (``stopping``). It returns once this worker's
        last all-reduce is done: the worker may leave, or read and save its weights, at once.

        Parameters
        ----------
        ignore_stale_grad : bool, default False
            As for ``step``.
        wait_for_workers : bool, default True
            False takes part in one update only (distributed): call again while
            ``workers_busy`` is True, e.g. to set the learning rate in between.

        Returns
        -------
        bool
            False if nothing was pending (with a distributed kvstore: if no update was applied).
        """
        if not self._distributed:
            return bool(self._window.steps) and self._apply_window(ignore_stale_grad)
        applied = False
        while True:
            self._wait_for_collectives()   # none in flight when a round begins
            self._heads.join(self.sum_over_workers)
            applied = self._apply_window(ignore_stale_grad, active=False) or applied
            if not wait_for_workers or not self.workers_busy:
                self._wait_for_collectives()   # nor when this worker may leave, or read its weights
                return applied

    def allreduce_grads(self):
        """Sum each parameter's gradient over the devices (and the workers), for ``update``.

        Taking ``step`` apart, as GluonNLP's scripts do: ``allreduce_grads()``, then whatever
        reads or scales the summed gradients (``gluon.utils.clip_global_norm``), then
        ``update(count)``. With a distributed kvstore (or Horovod) every worker calls both (they
        are collectives): the workers first agree which parameters got a gradient on some
        worker, and a worker that got none for one sends zeros, so all send the same. Once per
        update: a second call before ``update`` (which would add the sums again) is a
        ``RuntimeError``, as is ``step`` after it.
        """
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()
        if self._kvstore and self._update_on_kvstore:
            raise _KvstoreUpdates("allreduce_grads() cannot be used with update_on_kvstore=True: the kvstore "
                                  "updates the parameters as it sums. Create the Trainer with "
                                  "update_on_kvstore=False, or call step() alone.")
        if self._reduced:
            raise RuntimeError("allreduce_grads() was called twice before update(): the second call "
                               "would add the summed gradients again. Call update(count) after each "
                               "allreduce_grads().")
        if self._distributed:
            self._select(elsewhere=self._agree(0, 0, True).fresh)
        self._allreduce_grads()
        self._reduced = True

    def update(self, batch_size, ignore_stale_grad=False):
        """Apply the gradients ``allreduce_grads`` summed, normalized by ``batch_size`` summed over
        the workers: each worker passes its own count, as to ``step``, so that
        ``allreduce_grads(); update(n)`` equals ``step(n)``. A collective with a distributed kvstore.
        On several devices or workers, ``update`` without ``allreduce_grads()`` before it (each
        would apply its own gradient) is a ``RuntimeError`` that changes nothing.

        Parameters
        ----------
        batch_size : int, float, NDArray or dict
            As for ``step`` (read here: a wait for an NDArray). Counts that sum to 0 over the
            workers skip the update with a warning, as a window of 0 does. In a window begun
            with ``begin_window``, its counts by head (a dict), which must equal its counts: the
            gradient, weighed by ``weigh_losses`` already, is applied as it is (a window whose
            every head counts 0 is skipped with that warning).
        ignore_stale_grad : bool, default False
            As for ``step``.
        """
        if self._kvstore and self._update_on_kvstore:
            raise _KvstoreUpdates("update() cannot be used with update_on_kvstore=True: the kvstore updates "
                                  "the parameters as it sums. Create the Trainer with update_on_kvstore=False, "
                                  "or call step() alone.")
        if not self._reduced and (self._distributed or len(self._contexts) > 1):
            raise RuntimeError("update() was called without allreduce_grads(): each device and worker "
                               "would apply its own gradient, and their weights would part. Call "
                               "trainer.allreduce_grads() first (then update(count)), or step(count) "
                               "alone, which does both.")
        if isinstance(batch_size, dict) or self._heads.totals is not None:
            by_head, _ = self._count_heads(batch_size)   # the losses were weighed by the window's counts
            self._heads.add(by_head)
            count = 1 if any(self._heads.totals.values()) else 0   # every head of count 0: dropped
            self._check_heads()
        else:
            count = check_count(batch_size)
            if isinstance(count, mx.nd.NDArray):
                count = whole(read(count)[0])
            if self._distributed:
                count = whole(float(self.sum_over_workers([count])[0]))
        selected = self._select(ignore_stale_grad) if self._selected is None else self._selected
        if not 0 < count < math.inf:
            self._drop_empty(selected, count)
            return
        super().update(count, ignore_stale_grad)

    def _apply(self, ignore_stale_grad, active=True, normalizer=None):
        """Apply the pending window as one update; False if it was dropped. The gradient is
        divided by ``normalizer``, by default the window's count.

        The host waits for the devices once, only where it decides something by a value on
        them: with ``on_nonfinite`` 'skip' or 'raise', or with a loss scaler (a window that
        overflowed is dropped, the scale moves), it reads the window's count and sum of squares
        together; with a count given as an NDArray (a window of 0 is dropped) and nothing else
        to decide, it reads the count alone: a window's only NDArray count is read as given, so
        the read waits for the operators that computed it (often long done), not for the
        backward pass queued after them. The clip factor is computed on the device and folded
        into the update unless the norm was read anyway; ``global_norm`` is read on demand.
        """
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()
        if self._accumulate > 1:
            self._check_accumulating()
        self._check_without_backward()
        scaler = self._amp_loss_scaler
        decides = self._on_nonfinite != "ignore" or scaler is not None
        if self._distributed:   # the workers agree on the count and the parameters first
            steps, local_count = self._window.total()   # NDArray counts read: the round is read anyway
            self._window.take()
            agreed = self._agree(local_count, steps, active)
            if not agreed.steps:   # every worker was out of data: nothing to update
                self._selected = None
                return False
            if agreed.count == 0 and not any(agreed.fresh):   # micro-batches of no sample everywhere
                self._drop_empty([], 0)
                return False
            selected, count, lone = self._select(ignore_stale_grad, agreed.fresh), agreed.count, False
        else:
            local_count, arrays = self._window.take()
            if local_count == 0 and not arrays and not self._has_fresh_gradient():   # no sample at all
                self._drop_empty([], 0)
                return False
            selected = self._select(ignore_stale_grad)
            # one NDArray count, nothing else to read: read as given, it waits only for what made it
            lone = not decides and len(arrays) == 1
            count = local_count if lone else self._sum_counts(local_count, arrays)
        kvstore_updates = bool(self._kvstore and self._update_on_kvstore)
        if not kvstore_updates:
            self._allreduce_grads()   # first, so one device's copy holds the whole gradient
        one_copy = not kvstore_updates and (self._kvstore is not None or len(self._contexts) == 1)
        measures = decides or self._clip_global_norm is not None
        sum_sq = sum_of_squares(self._grads(selected, one_copy), self._grouping) if measures else None
        if decides:   # the one wait: count and squares together
            count, sum_sq = _read_window(count, sum_sq)
        elif lone:   # the one wait
            count = whole(count + float(arrays[0].asnumpy().reshape(-1)[0]))
        elif isinstance(count, mx.nd.NDArray):   # the one wait: the count alone
            count = whole(read(count)[0])
        if not 0 < count < math.inf:
            self._drop_empty(selected, count)
            return False
        divisor = count if normalizer is None else normalizer
        multiplier = abs(self._scale) / divisor
        if isinstance(sum_sq, mx.nd.NDArray):   # clipping under 'ignore': on the device, no wait
            norm, factor = clip_factors(sum_sq, multiplier, self._clip_global_norm)
        else:
            norm, factor = (None if sum_sq is None else math.sqrt(sum_sq) * multiplier), None
        if scaler is not None:   # once per window: the scale halves on overflow, grows after clean runs
            if hasattr(scaler, "record"):   # gluonkit's: told by this pass, which saw every device
                scaler.record(not math.isfinite(sum_sq))
            else:                           # MXNet's reads the first device's gradients itself
                scaler.has_overflow([self._params[i] for i in selected])
        if decides and not math.isfinite(norm):
            self._discard(selected, one_copy)
            return False
        self._check_and_rescale_grad(self._scale * self._clip(norm) / divisor)
        if kvstore_updates:
            self._allreduce_grads()
        self._update(ignore_stale_grad, factor)
        # per-device squares do not add up to the norm of the sum: no norm when nothing summed them
        self._global_norm = norm if one_copy or len(self._contexts) == 1 else None
        return True

    def _clip(self, norm):
        """The clip factor min(1, clip / norm) for ``rescale_grad``; 1.0 without clipping, for a
        NaN or infinite norm (applied as it is), and for a norm on the device, whose factor
        the update folds in."""
        clip = self._clip_global_norm
        if clip is None or isinstance(norm, mx.nd.NDArray):
            return 1.0
        return clip / norm if math.isfinite(norm) and norm > clip else 1.0

    def _sum_counts(self, count, arrays):
        """The window's count: an int, or a one-element NDArray still to read."""
        if not arrays:
            return count
        ctx = arrays[0].context
        return mx.nd.add_n(mx.nd.array([count], ctx=ctx, dtype="float64"), *(a.as_in_context(ctx) for a in arrays))

    def _grads(self, selected, one_copy):
        return [g for i in selected for g in self._params[i].list_grad()[:1 if one_copy else None]]

    def _drop_empty(self, selected, count):
        """Drop a window whose count is 0 (warn) or not a count at all (raise)."""
        self._selected = None
        self._finish([self._params[i] for i in selected])
        if count != 0:
            self._window.restore_statistics()   # the dropped window's forward passes changed them
            raise ValueError(f"The counts given to step() in this window sum to {count} over the "
                             "workers; a count (samples, positives, tokens, pixels) must be >= 0. "
                             "The window was dropped; no update was applied.")
        self.snapshot_statistics()   # the window's forward passes were fine: keep their statistics
        warnings.warn("Skipped an update: the counts given to step() in this window sum to 0 (no "
                      "samples or positives), so there is nothing to normalize the gradient by.",
                      stacklevel=4)

    def _discard(self, selected, one_copy):
        """Drop a window whose gradients hold NaN or Inf, then warn or raise."""
        params = [self._params[i] for i in selected]
        culprit = next((self._name_of(p) for p in params
                        if not math.isfinite(read(sum_of_squares(p.list_grad()[:1 if one_copy else None]))[0])),
                       "a parameter on another worker")
        self._selected = None
        self._finish(params)
        self._window.restore_statistics()
        if self._on_nonfinite == "ignore":   # a loss-scale overflow: the scaler has lowered its scale
            return
        if self._on_nonfinite == "raise":
            raise FloatingPointError(
                f"The gradient of {culprit} holds NaN or Inf; no update was applied. Lower the learning "
                "rate, clip gradients or check the inputs; on_nonfinite='skip' drops such updates instead.")
        self._nonfinite_skips += 1
        warnings.warn(f"Skipped an update: the gradient of {culprit} holds NaN or Inf "
                      f"({self._nonfinite_skips} skipped so far).", stacklevel=4)

    def _check_without_backward(self):
        """Refuse a window in which an NDArray count other than 0 was stepped without a backward."""
        given = self._window.without_backward()
        if given:
            self._window.take()
            self._selected = None
            self._finish([p for p in self._params if p._data is not None and p.grad_req != "null"])
            self._window.restore_statistics()
            raise RuntimeError(f"step() was given a count of {given} (an NDArray, read now) with no backward "
                               "since the last update; only a micro-batch of no sample (a count of 0) may "
                               "step without a backward. Call loss.backward() inside autograd.record() "
                               "before trainer.step(); this window was dropped, nothing was updated.")

    def _wait_for_collectives(self):
        """Wait until the parameters' last update, and so every all-reduce it read, is done."""
        for param in self._params:
            if param._data is not None:
                for array in param.list_data():
                    array.wait_to_read()

    def _check_accumulating(self):
        """Refuse a trainable parameter switched to grad_req='write' within accumulation."""
        written = [self._name_of(p) for p in self._params if p.grad_req == "write"]
        if written:
            self._window.take()
            self._selected = None
            self._finish([p for p in self._params if p._data is not None and p.grad_req != "null"])
            raise RuntimeError(f"Parameter(s) {', '.join(written)} have grad_req='write', but with "
                               f"accumulate={self._accumulate} every trainable parameter needs "
                               "grad_req='add' (each backward would overwrite the gradients of the "
                               "earlier micro-batches). Set param.grad_req = 'add' (or unfreeze with "
                               "gluonkit.params.unfreeze); this window was dropped, nothing was updated.")

    def snapshot_statistics(self):
        """Take the current running statistics as those a dropped window returns to.

        The Trainer takes them at every window's start. Call it after setting the network's
        running statistics by other means (parameters loaded from a file). Only kept where a
        window can be dropped (``on_nonfinite`` 'skip' or 'raise', or a loss scaler attached).
        """
        droppable = self._on_nonfinite != "ignore" or self._amp_loss_scaler is not None
        self._window.snapshot(self._params, droppable)

    def _init_kvstore(self):
        # MXNet reads every parameter's data to choose the kvstore; deferred ones have none yet.
        params = self._params
        self._params = [p for p in params if p._data is not None] or params
        try:
            super()._init_kvstore()
        finally:
            self._params = params
        self._distributed = self._distributed or is_distributed(self._kvstore)[0]   # gluon: 'dist' names only

    def _has_fresh_gradient(self):
        """Whether a backward wrote a gradient of some trainable parameter since the last update
        (True when no parameter is trainable: there is nothing to miss)."""
        trainable = False
        for param in self._params:
            if param.grad_req == "null":
                continue
            trainable = True
            if param._data is not None and any(arr._fresh_grad for arr in replicas(param)):
                return True
        return not trainable

    def _select(self, ignore_stale_grad=False, elsewhere=None):
        """Indices of the parameters to update; zero the contexts that got no gradient.

        ``elsewhere`` (distributed): a bool per parameter, whether it got a gradient on some
        worker; such a parameter is updated here too, from zero gradients if none came here.
        """
        selected, skipped = [], []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            if param._data is None:
                skipped.append(self._name_of(param))
                continue
            fresh = [bool(arr._fresh_grad) for arr in replicas(param)]
            if not any(fresh) and not (elsewhere and elsewhere[i]):
                skipped.append(self._name_of(param))
                continue
            if not all(fresh):
                zero([g for g, f in zip(param.list_grad(), fresh) if not f])
            selected.append(i)
        if skipped and not selected:
            raise RuntimeError(_NO_GRADIENT)
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
        if isinstance(self._kvstore, Horovod):   # dense only: one grouped all-reduce
            self._kvstore.pushpull(selected, [self._params[i].list_grad() for i in selected], gradients=True)
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

    def _update(self, ignore_stale_grad=False, factor=None):
        """Update the selected parameters; ``factor`` (``clip_factors``'s) scales their
        gradients on the devices (folded into SGD's learning rates and weight decays)."""
        selected = self._select(ignore_stale_grad) if self._selected is None else self._selected
        self._selected = None
        params = [self._params[i] for i in selected]
        if not (self._kvstore and self._update_on_kvstore):
            updates = [[] for _ in self._updaters]
            for i, param in zip(selected, params):
                for upd, arr, grad in zip(updates, param.list_data(), param.list_grad()):
                    upd.append((i, grad, arr))
            for updater, upd in zip(self._updaters, updates):
                if upd:
                    indices, grads, arrays = zip(*upd)
                    if factor is None:
                        updater(list(indices), list(grads), list(arrays))
                    else:
                        scaled_update(updater, list(indices), list(grads), list(arrays), factor,
                                      dense=not self._contains_sparse_grad)
        self._finish(params)
        self.snapshot_statistics()

    def _finish(self, params):
        """Mark the parameters' gradients as consumed; zero the accumulating ones."""
        self._reduced = False
        for param in params:
            for arr in replicas(param):
                arr._fresh_grad = False
        self._zero_grads([p for p in params if p.grad_req == "add"])

    @staticmethod
    def _zero_grads(params):
        zero([g for p in params if p._data is not None and p.grad_req != "null" for g in p.list_grad()])
