"""fit(): the training loop, with progress bars, metrics, callbacks and clean interruption."""
import collections.abc
import contextlib
import inspect
import itertools
import logging
import math
import os
import signal
import threading
import time

import mxnet as mx
from mxnet import autograd, gluon
from tqdm.auto import tqdm

from ..data.worker_signals import as_a_data_worker
from ..nn.norm import check_sync_batchnorm
from ..split import split_and_load
from ..validate import check_count, non_negative_int
from .batches import (as_dtype, check_arrays, check_hook, compiled_loss, contexts, input_dtype,
                      output_names, per_device, per_sample_losses, single_output, unpack_batch)
from .callbacks import Callback
from .evaluate import evaluate_batches
from .heads import HeadTally, counted_windows, unpack_heads
from .metrics import make_metrics
from .reshard import global_sampler
from .resume import batch_length
from .state import FitState, Run, position_text

__all__ = ["fit", "FitState"]

log = logging.getLogger("gluonkit")
SETTLE_SECONDS = 0.5   # how often the running loss and metrics are counted (and the bar refreshed)


def _call(run, hook):
    """Call ``hook`` of every callback with the run's ``FitState`` (on rank 0 only, where asked)."""
    for cb in run.callbacks:
        if run.is_main_process or not cb.main_process_only:
            getattr(cb, hook)(run.view)


def _check_callbacks(callbacks):
    if callbacks is None:
        return []
    if isinstance(callbacks, Callback):
        callbacks = [callbacks]
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"callbacks must be a list of gluonkit Callback instances, got {callbacks!r}.")
    callbacks = list(callbacks)
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks must be gluonkit Callback instances, got {cb!r}; "
                            "subclass gluonkit.callbacks.Callback.")
    return callbacks


def _class_axis(loss):
    """The axis of the outputs that ``loss`` picks its labels from (a softmax cross-entropy
    with class-index labels), else None."""
    # MXNet keeps both options private; a one-hot label (sparse_label=False) is not picked
    if isinstance(loss, gluon.loss.SoftmaxCrossEntropyLoss) and loss._sparse_label:
        return loss._axis
    return None


def _forward_losses(net, loss, xs, ys):
    outputs = [single_output(net(x)) for x in xs]
    return outputs, per_sample_losses(loss, outputs, ys)


def _check_count(count, index):
    """The count a batch_fn returned, as ``Trainer.step`` takes it: a finite real >= 0 or a
    one-element NDArray (TypeError or ValueError naming the batch otherwise)."""
    try:
        return check_count(count, "count")
    except (TypeError, ValueError) as err:
        raise type(err)(f"batch_fn returned the count {count!r} for batch {index}: {err} Return what "
                        "the losses are normalized by.") from None


def _unpack_step(result, index):
    """(losses, count, outputs, labels) from what a batch_fn returned."""
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 4):
        raise TypeError(f"batch_fn must return (losses, count) or (losses, count, outputs, labels), "
                        f"got {type(result).__name__} for batch {index}.")
    losses, count = check_arrays(result[0], "losses", index), _check_count(result[1], index)
    outputs, labels = (per_device(result[2]), per_device(result[3])) if len(result) == 4 else (None, None)
    return losses, count, outputs, labels


def _step(run, losses, count, labels, outputs):
    """Backward, trainer.step and the tally, shared by both kinds of batches."""
    autograd.backward(losses)
    if run.trainer.step(count) is not False:   # gluon.Trainer returns None: it always updates
        _updated(run)
    run.tally.add(labels, outputs, losses, count)


def _updated(run):
    """Count an update, and give the tally its gradient norm as the trainer holds it (a
    gluonkit.Trainer's as an NDArray not read yet, read when the tally settles), if any."""
    run.step += 1
    norm = getattr(run.trainer, "global_norm_array", None)
    norm = getattr(run.trainer, "global_norm", None) if norm is None else norm
    if norm is not None:
        run.tally.add_norm(norm)


def _train_batch(run, batch):
    """Forward, backward and trainer.step on one batch split over the contexts; its samples."""
    if run.head_counts is not None:
        with autograd.record():
            result = run.batch_fn(run.net, batch, run.ctx, **run.batch_fn_keywords)
            losses, counts, outputs, labels = unpack_heads(result, run.batch)
            weighed = [run.trainer.weigh_losses(by_head) for by_head in losses]
        autograd.backward(weighed)
        if run.trainer.step(counts):
            _updated(run)
        run.tally.add(labels, outputs, None, 0)   # the metrics; the losses go to the heads' tally
        run.head_tally.add(losses, counts)
        return batch_length(batch)
    if run.batch_fn is not None:
        with autograd.record():
            result = run.batch_fn(run.net, batch, run.ctx, **run.batch_fn_keywords)
        losses, count, outputs, labels = _unpack_step(result, run.batch)
        _step(run, losses, count, labels, outputs)
        return batch_length(batch)
    data, label = unpack_batch(batch, run.batch, "train_data")
    xs = split_and_load(as_dtype(data, run.dtype), run.ctx)
    if run.every_device and len(xs) < len(run.ctx):
        raise ValueError(f"batch {run.batch} of epoch {run.epoch + 1} has {data.shape[0]} sample(s) for "
                         f"{len(run.ctx)} devices, and the network's SyncBatchNorm layers wait for "
                         "every device: give every batch at least one sample per device (e.g. "
                         "DataLoader(..., last_batch='discard') or 'rollover').")
    ys = split_and_load(as_dtype(label, run.dtype), run.ctx)
    with autograd.record():
        outputs, losses = _forward_losses(run.net, run.loss_graph, xs, ys)
    _step(run, losses, data.shape[0], ys, outputs)
    return data.shape[0]


def _check_head_counts(head_counts, batch_fn, trainer):
    """Counts by head need a callable, a batch_fn that returns losses by head, and a trainer
    that weighs them (``gluonkit.Trainer``)."""
    if head_counts is None:
        return
    check_hook(head_counts, "head_counts")
    if batch_fn is None:
        raise ValueError("head_counts needs a batch_fn that returns the per-sample losses by head and the "
                         "batch's counts by head; pass batch_fn=... too.")
    if not hasattr(trainer, "begin_window"):
        raise TypeError(f"head_counts needs a gluonkit.Trainer (it counts each window by head before it "
                        f"runs), got {type(trainer).__name__}.")


def _check_validation(run, val_data, val_metrics):
    """Evaluate the first batch of ``val_data`` before training: a loss, eval_fn or metric that
    cannot take the validation batches fails now, not after an epoch; say if no val_loss comes."""
    if val_data is None or isinstance(val_data, collections.abc.Iterator):   # one pass only: not spent
        return
    logs = evaluate_batches(run.net, itertools.islice(val_data, 1), run.ctx, make_metrics(val_metrics),
                     run.loss_graph, "val_data", run.eval_fn)
    if "loss" in logs:
        return
    reason = "eval_fn returns no losses" if run.eval_fn else "there is no eval_fn"
    for cb in run.callbacks:
        if getattr(cb, "monitor", None) == "val_loss":
            raise ValueError(f"{type(cb).__name__} monitors 'val_loss', but this run has no validation "
                             f"loss: loss is None and {reason}; return (outputs, labels, losses) from "
                             "eval_fn, or monitor another key (e.g. 'val_accuracy').")
    if run.is_main_process:
        log.info("fit: the history will have no val_loss: loss is None and %s; return (outputs, "
                 "labels, losses) from eval_fn to get one.", reason)


def _takes_state(fn):
    """Whether ``fn`` accepts a ``state`` keyword (named, or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):   # a callable whose signature Python cannot read
        return False
    return any(p.kind == p.VAR_KEYWORD or (p.name == "state" and p.kind != p.POSITIONAL_ONLY)
               for p in params)


def _check_trainer(trainer, net):
    """The trainer must be a gluon.Trainer that updates some of the network's parameters."""
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError(f"trainer must be a gluon.Trainer (e.g. gluonkit.Trainer), got {trainer!r}.")
    mine = {id(p) for p in net.collect_params().values()}
    # gluon.Trainer keeps its parameters under a private name only (MXNet has no public one)
    if mine and not any(id(p) in mine for p in trainer._params):
        names = [p.name for p in trainer._params[:3]]
        raise ValueError(f"the trainer updates none of the network's parameters (it holds {names}"
                         f"{', ...' if len(trainer._params) > 3 else ''}); build it from this "
                         "network: gluonkit.Trainer(net.collect_params(), ...).")


@contextlib.contextmanager
def _stop_on_signals(run):
    """While training, SIGINT and SIGTERM ask to stop after the current step (distributed: after
    the next update, on every worker); a second aborts."""
    if threading.current_thread() is not threading.main_thread():
        yield   # signal handlers can only be installed from the main thread
        return

    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:   # a process forked meanwhile: a DataLoader worker gluon's pool
            as_a_data_worker(signum)    # put in place of one that died, not the one training
            return
        if run.interrupted is not None:
            raise KeyboardInterrupt
        run.interrupted = signal.Signals(signum)
        if run.workers > 1:
            run.trainer.request_stop()
            log.warning("%s received: every worker stops after the next update and writes its checkpoint "
                        "(send it again to abort now).", run.interrupted.name)
        else:
            log.warning("%s received: stopping after the current %s (send it again to abort now).",
                        run.interrupted.name, "update" if run.stops_between_updates else "step")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)


def _stopping(run):
    """Whether to stop now: on a signal; distributed, once every worker agreed to (the workers
    that got no signal stop as if they had got SIGTERM)."""
    if run.workers == 1:   # on global batches, between updates: a checkpoint any number of workers resumes
        return run.interrupted is not None and not (run.stops_between_updates and run.trainer.pending[0])
    if run.trainer.stopping and run.interrupted is None:
        run.interrupted = signal.SIGTERM
    return run.trainer.stopping


def _finish_updates(run):
    """Apply the partial window at the end of the epoch's data; distributed, take part in the
    other workers' updates with a count of 0 until every worker is out of data (each such
    update ends like a batch: ``on_batch_end`` runs, so a schedule sets the next rate)."""
    if not getattr(run.trainer, "flush", None):
        return
    if run.workers == 1:
        if run.trainer.flush():
            _updated(run)
        return
    while True:
        if run.trainer.flush(wait_for_workers=False):
            _updated(run)
        if not run.trainer.workers_busy:
            return
        _call(run, "on_batch_end")


def _append_row(history, logs):
    """Add an epoch's row to the history, NaN where a key is missing: a key new in this row
    (val_data given on a resume) gets NaN for the earlier epochs, so every list keeps one
    entry per epoch, aligned with 'epoch'."""
    rows = len(history.get("epoch", ()))
    for key, values in history.items():
        if key not in logs:
            values.append(math.nan)
    for key, value in logs.items():
        history.setdefault(key, [math.nan] * rows).append(value)


def _run_epoch(run, train_data, val_data, val_metrics, progress):
    began = run.continues_epoch   # resumed in its middle: its on_epoch_begin ran before the stop
    if run.head_counts is not None:
        run.head_tally = HeadTally()   # a resume in mid-epoch takes its sums back
    batches, skips_before = run.begin_epoch()   # after the batches done, when resuming in mid-epoch
    if run.head_counts is not None:
        batches = counted_windows(batches, run.trainer, run.head_counts)
    if not began:
        _call(run, "on_epoch_begin")
    total = len(train_data) if hasattr(train_data, "__len__") else None
    bar = tqdm(total=total, initial=run.batch, disable=not (progress and run.is_main_process), unit="batch",
               leave=True,
               desc=f"epoch {run.epoch + 1}/{run.epochs}", dynamic_ncols=True)
    tic, seen = time.perf_counter(), 0
    next_settle = tic + SETTLE_SECONDS

    def show_running(now):
        rate = seen / max(now - tic, 1e-9)
        bar.set_postfix({**{k: f"{v:.4f}" for k, v in run.logs.items()}, "samples/s": f"{rate:.0f}"},
                        refresh=False)

    try:
        for batch in batches:
            seen += _train_batch(run, batch)
            run.batch += 1
            now = time.perf_counter()
            if now >= next_settle:   # waits for the batch: at most 0.5 s of work is queued ahead
                run.tally.settle()
                if not bar.disable:
                    show_running(now)
                next_settle = now + SETTLE_SECONDS
            bar.update(1)
            _call(run, "on_batch_end")
            if _stopping(run):
                return
        if not bar.disable:
            show_running(time.perf_counter())
    finally:
        bar.close()
    if run.batch == 0:
        raise ValueError(f"train_data yielded no batches in epoch {run.epoch + 1}; pass a "
                         "non-empty loader that can be iterated once per epoch (a generator is "
                         "exhausted after one pass: use a gluon.data.DataLoader).")
    _finish_updates(run)
    if run.workers > 1 and _stopping(run):
        return
    _call(run, "on_train_data_end")
    mx.nd.waitall()   # the clock reads the devices' work, not only what the host queued
    train_time = time.perf_counter() - tic
    if run.head_counts is None:
        logs = {"epoch": run.epoch + 1, **run.tally.values()}
    else:
        logs = {"epoch": run.epoch + 1, **run.head_tally.values(), **run.tally.values(loss=False)}
    if val_data is not None:
        val = evaluate_batches(run.net, val_data, run.ctx, val_metrics, run.loss_graph, "val_data",
                        run.eval_fn)
        logs.update({f"val_{k}": v for k, v in val.items()})
    if getattr(run.trainer, "on_nonfinite", "ignore") == "skip":
        logs["nonfinite_skips"] = run.trainer.nonfinite_skips - skips_before
    if run.workers > 1:   # the job's samples: every worker's
        seen = float(run.trainer.sum_over_workers([seen])[0])
    logs.update(lr=run.trainer.learning_rate, samples_per_sec=seen / max(train_time, 1e-9),
                time=time.perf_counter() - tic)
    _append_row(run.history, logs)
    if run.is_main_process:
        log.info("epoch %d/%d: %s", run.epoch + 1, run.epochs,
                 ", ".join(f"{k} {v:.4g}" for k, v in logs.items() if k != "epoch"))
    run.epoch_logs, run.phase = logs, "end"
    _call(run, "on_epoch_end")
    run.epoch += 1
    run.phase = "idle"


def fit(net, loss, trainer, train_data, *, epochs, ctx=None, val_data=None, metrics=None,
        callbacks=(), progress=True, batch_fn=None, eval_fn=None, val_metrics=None, head_counts=None):
    """Train ``net`` for ``epochs`` epochs; return the per-epoch history.

    Each batch is split over ``ctx`` with ``gluonkit.split_and_load``, the per-sample losses
    are back-propagated, and ``trainer.step`` gets the batch's true sample count, so
    accumulation (``gluonkit.Trainer(accumulate=k)``) and uneven splits are exact; a partial
    accumulation window is flushed at the end of every epoch. Floating-point data and labels
    of another precision than the network's parameters (float64 arrays into a float32
    network) are cast to the network's. A tqdm bar shows each epoch (running loss, metrics, samples/s) and
    a summary line goes to the 'gluonkit' logger.

    Any other training step (detection, multi-task, losses normalized by positive anchors or
    valid pixels) goes through ``batch_fn(net, batch, ctx_list)``, called inside
    ``autograd.record()``. A ``batch_fn`` that accepts a ``state`` keyword also gets the
    ``FitState`` (``state.epoch``, ``state.batch``, ``state.step``: where the run is, also
    after a resume), as Estimator's batch processor sees its estimator. It returns
    ``(losses, count)`` or ``(losses, count, outputs, labels)``: ``losses`` a list of
    NDArrays, one per device, of any shape (the sum of all their elements is
    back-propagated), ``count`` what that sum is normalized by, handed to ``trainer.step``
    (a finite real >= 0 such as a sum of sample weights, or a one-element NDArray), and
    ``outputs`` / ``labels`` (lists over the devices) what the metrics see. A ``batch_fn``
    that returns no outputs (a detector in training mode returns losses, not detections)
    leaves the metrics to ``val_data`` and ``eval_fn``. The history's 'loss' is then the
    epoch's sum of the losses divided by the sum of the counts.

    MXNet's generator is reseeded at the start of every epoch from NumPy's state, the epoch
    and a number drawn from MXNet's generator as the run began, so seeding NumPy and MXNet
    (``np.random.seed``, ``mx.random.seed``, or ``gluonkit.seed_all``) makes a run
    reproducible (docs/fit.md, "What a run depends on") and a run resumed from a checkpoint
    (``ModelCheckpoint(..., resume=True)``) ends with the same parameters as one never
    stopped. A stop in mid-epoch resumes at the same batch, with the same data order and
    accumulation window; it is bit-exact unless the rest of that epoch draws from MXNet's
    generator (dropout, MXNet random augmentations), which cannot be replayed. Each epoch
    begins once over the whole run: a run resumed in mid-epoch does not call
    ``on_epoch_begin`` for it again, and calls the callbacks' ``on_resume`` instead.

    SIGINT (Ctrl-C) or SIGTERM finish the current step (on ``gluonkit.data.global_loader``'s
    global batches, the current update, so that any number of workers resumes the
    checkpoint), run ``on_train_end`` (where
    ``ModelCheckpoint`` saves), then raise ``KeyboardInterrupt`` or ``SystemExit(143)``; a
    second signal aborts at once. With several workers (a distributed ``gluonkit.Trainer``)
    the signal asks the job to stop (``trainer.request_stop()``) and every worker stops after
    the same update, those that got no signal too (as if by SIGTERM), and none leaves ``fit``
    before every worker ran ``on_train_end`` (``horovodrun`` ends the other ranks as soon as
    one exits, and would cut their checkpoints short). A worker out of data at
    the end of an epoch takes part in the others' updates with a count of 0
    (``trainer.flush``), ``on_batch_end`` running after each, so shards may differ in size. The handlers are installed only while ``fit`` runs (from
    the main thread) and the previous ones are restored.

    Parameters
    ----------
    net : Block
        Initialized (parameters may wait for deferred initialization).
    loss : gluon.loss.Loss or None
        Must return one value per sample. May be None with ``batch_fn``.
    trainer : gluon.Trainer
        Usually a ``gluonkit.Trainer``, over (some of) the network's parameters.
    train_data : iterable of (data, label), or of any batch ``batch_fn`` takes
        Re-iterable once per epoch, e.g. a ``gluon.data.DataLoader``; for exact resumption
        its order must depend only on the NumPy/Python generators (``shuffle=True`` does);
        the samples ``last_batch='rollover'`` carries into the next epoch are saved too.
    epochs : int
        Epochs to reach (a resumed run continues up to it).
    ctx : Context or list of Context, optional
        Defaults to the contexts of the network's parameters.
    val_data : iterable, optional
        Evaluated after every epoch; its results get the prefix 'val_'.
    metrics : str, EvalMetric, list of them, or per output, optional
        E.g. 'acc' or ``mx.metric.TopKAccuracy(5)``; computed on the training batches (not
        when ``batch_fn`` returns no outputs), and on val data unless ``val_metrics`` is
        given. See ``evaluate`` for one-hot labels, metrics of several fields and metrics
        per output (``{'digit': 'acc', 'parity': ['acc', 'f1']}``).
    val_metrics : same kinds as ``metrics``, optional
        The metrics of ``val_data`` when they differ from the training ones (RMSE on soft
        training targets, accuracy on hard validation labels); None: ``metrics``; ``[]``: none.
    callbacks : iterable of Callback, or None
        See ``gluonkit.callbacks``.
    progress : bool, default True
        Show the progress bar.
    batch_fn : callable, optional
        ``batch_fn(net, batch, ctx_list[, state=FitState]) -> (losses, count[, outputs,
        labels])``, see above.
    head_counts : callable, optional
        ``head_counts(batch) -> {head: count}``: a batch's counts by head, from its labels
        (no forward), for a network whose heads each have their own count (docs/trainer.md,
        "Counts by head"). Each accumulation window is then taken from ``train_data`` and
        counted (``trainer.begin_window``) before it runs; ``batch_fn`` returns the losses as
        a list over the devices of dicts of per-sample losses by head and the batch's counts
        by head, and the history has each head's mean loss (``loss_<head>``) beside
        'loss', their sum. Needs a ``gluonkit.Trainer`` and a ``batch_fn``.
    eval_fn : callable, optional
        ``eval_fn(net, batch, ctx_list) -> (outputs, labels[, losses])`` for ``val_data``, as
        in ``evaluate``. 'val_loss' is the mean of the losses it returns, else of
        ``loss(outputs, labels)`` (which must then take the validation labels), else absent
        (the log says so; a callback monitoring 'val_loss' is refused). The first
        validation batch is evaluated before training, so a loss or metric that cannot
        take it fails at once.

    Returns
    -------
    dict of list
        Per epoch: 'epoch', 'loss', 'grad_norm' (the mean over the epoch's updates of
        ``trainer.global_norm``, if the trainer has it; read when the running tally settles,
        not once per update), each metric, 'val_loss' and
        'val_<metric>' (with val_data), 'nonfinite_skips' (updates dropped for NaN/Inf
        gradients, with a ``gluonkit.Trainer(on_nonfinite='skip')``), 'lr',
        'samples_per_sec' (every worker's samples, distributed), 'time' (seconds, validation
        included); one entry per epoch in
        every list, NaN for an epoch without that key (trained before a resume added
        val_data).

    Example::

        trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, train_loader,
                               epochs=10, val_data=test_loader, metrics="acc",
                               callbacks=[ModelCheckpoint("runs/cnn", monitor="val_accuracy")])
        history["val_accuracy"][-1]
    """
    epochs = non_negative_int(epochs, "epochs", "the number of epochs to reach")
    _check_trainer(trainer, net)
    check_hook(batch_fn, "batch_fn")
    check_hook(eval_fn, "eval_fn")
    if loss is None and batch_fn is None:
        raise ValueError("loss is None; pass a gluon.loss.Loss, or a batch_fn that computes the "
                         "losses itself.")
    _check_head_counts(head_counts, batch_fn, trainer)
    names = output_names(net)
    run = Run(net, loss, trainer, contexts(ctx, net), epochs, _check_callbacks(callbacks),
              make_metrics(metrics, names), outputs_optional=val_data is not None)
    run.train_data = train_data
    run.stops_between_updates = global_sampler(train_data) is not None and hasattr(trainer, "pending")
    run.batch_fn, run.eval_fn, run.dtype = batch_fn, eval_fn, input_dtype(net)
    run.head_counts = head_counts
    run.batch_fn_keywords = {"state": run.view} if batch_fn is not None and _takes_state(batch_fn) else {}
    run.loss_graph = compiled_loss(loss)
    run.tally.class_axis = None if batch_fn is not None else _class_axis(loss)
    run.every_device = check_sync_batchnorm(net, run.ctx)
    if hasattr(trainer, "name_params"):
        trainer.name_params(net)   # structural names in its warnings and state_dict
    val_metrics = make_metrics(metrics if val_metrics is None else val_metrics, names)
    _check_validation(run, val_data, val_metrics)
    with _stop_on_signals(run):
        _call(run, "on_train_begin")
        run.apply_callback_states()
        if run.resumed is not None:
            _call(run, "on_resume")
        while run.epoch < epochs and not run.stop_training and not _stopping(run):
            _run_epoch(run, train_data, val_data, val_metrics, progress)
        _call(run, "on_train_end")
    if run.interrupted is not None:
        message = f"training stopped by {run.interrupted.name} after {position_text(run.view)}"
        log.warning("%s.", message)
        if run.workers > 1 and run.trainer.stopping:   # every worker stopped here: leave together
            run.trainer.sum_over_workers([0.0])
        if run.interrupted == signal.SIGTERM:
            raise SystemExit(128 + signal.SIGTERM)
        raise KeyboardInterrupt(message)
    return run.history
