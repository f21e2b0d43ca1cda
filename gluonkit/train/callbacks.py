"""Callbacks for ``fit``: checkpoints, early stopping, learning-rate schedules, logs and plots.

The implementation; import them from their public address, ``gluonkit.callbacks``.
"""
import csv
import errno
import io
import json
import logging
import math
import numbers
import os
import time

from ..atomic import atomic_text, atomic_write
from ..validate import finite_real, non_negative_int, positive_int
from .checkpoint import Checkpoint, CheckpointError
from .reshard import global_sampler, reshard
from .state import position_text

__all__ = ["Callback", "ModelCheckpoint", "EarlyStopping", "LRSchedule", "HistoryLogger",
           "PlotCurves"]

log = logging.getLogger("gluonkit")


def _writable_directory(directory, writer):
    """Create ``directory`` if missing; an ``OSError`` naming it if ``writer`` cannot write there.

    Writers check this when training begins: a bad path fails before the first batch, not
    when the first epoch's results are written.
    """
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:   # a file in the path, no permission, a read-only filesystem
        code = errno.ENOTDIR if err.errno == errno.EEXIST else err.errno   # the path is a file
        raise OSError(code, f"{writer} cannot create the directory {directory!r} "
                            f"({os.strerror(code)}); pass a directory you can write to.") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"{writer} cannot write into {directory!r}; pass a "
                                            "directory you can write to.")


def _writable_file(path, writer):
    """:func:`_writable_directory` for ``path``'s directory, and ``path`` not a directory."""
    _writable_directory(os.path.dirname(os.path.abspath(path)), writer)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{writer} cannot write {path!r}: it is a "
                                              "directory; remove it or pass another path.")


class Callback:
    """Base class of ``fit`` callbacks: override the hooks you need.

    Every hook receives the ``FitState`` (``state.net``, ``state.trainer``, ``state.epoch``,
    ``state.batch``, ``state.step``, ``state.logs``, ``state.history``, ...). Set
    ``state.stop_training = True`` to stop after the current epoch. A callback whose
    decisions depend on the past returns it from ``state_dict`` so that checkpoints carry it.

    Resuming is safe for hooks written as a training script's loop body: each epoch begins
    once over the whole run. A run resumed in the middle of an epoch does not call
    ``on_epoch_begin`` for it again (what that call did to the trainer, such as
    ``trainer.set_learning_rate(trainer.learning_rate * 0.1)``, is in the checkpoint), and
    the batches done before the stop are not seen again; ``on_resume`` runs instead, and
    ``state.resumed`` says where the run continued from.

    In distributed training a callback whose ``main_process_only`` is True runs on the
    worker of rank 0 only (writers of files do this).

    Example::

        class PrintLR(Callback):
            def on_epoch_end(self, state):
                print(state.epoch, state.trainer.learning_rate)
    """

    main_process_only = False

    def on_train_begin(self, state):
        """Called once before the first epoch (a resumed run restores its state here)."""

    def on_resume(self, state):
        """Called once when the run continues from a checkpoint: after every ``on_train_begin``
        and the callbacks' ``load_state_dict``, before the next batch; ``state.resumed`` is
        the position. Redo here what the checkpoint does not hold (e.g. a data transform
        chosen per epoch): an epoch resumed in its middle does not begin again."""

    def on_epoch_begin(self, state):
        """Called when an epoch begins: once per epoch of the run, a resumed run included."""

    def on_batch_end(self, state):
        """Called after every batch's ``trainer.step``."""

    def on_train_data_end(self, state):
        """Called when the epoch's training data is done and its last update applied (on every
        worker after the same update), before validation and ``on_epoch_end``."""

    def on_epoch_end(self, state):
        """Called after every epoch, validation included; ``state.logs`` holds its row."""

    def on_train_end(self, state):
        """Called once at the end, also when a signal stopped training."""

    def state_dict(self):
        """dict: What a checkpoint must remember of this callback: JSON values and arrays."""
        return {}

    def load_state_dict(self, state):
        """Restore what ``state_dict`` returned."""


#: Parts of the names of quantities that are better lower: losses and MXNet's error metrics.
_LOWER_IS_BETTER = ("loss", "err", "mae", "mse", "cross-entropy", "perplexity")


class _Monitor:
    """Tracks the best value of one key of the epoch logs."""

    def __init__(self, monitor, mode, min_delta=0.0):
        if not isinstance(monitor, str):
            raise TypeError(f"monitor must be a key of the epoch logs, e.g. 'val_loss' or "
                            f"'val_accuracy', got {monitor!r}.")
        min_delta = abs(finite_real(min_delta, "min_delta", "the least change that counts"))
        if mode == "auto":
            mode = "min" if any(part in monitor.lower() for part in _LOWER_IS_BETTER) else "max"
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min', 'max' or 'auto', got {mode!r}.")
        self.monitor, self.mode, self.min_delta = monitor, mode, min_delta
        self.best = None

    def improved(self, logs):
        """Whether ``logs[monitor]`` beats the best so far (which it then becomes)."""
        if self.monitor not in logs:
            raise KeyError(f"Cannot monitor {self.monitor!r}: the epoch logs hold "
                           f"{sorted(logs)}; pass one of them (val_ keys need val_data).")
        value = float(logs[self.monitor])
        if math.isnan(value):
            return False
        better = (self.best is None
                  or (value < self.best - self.min_delta if self.mode == "min"
                      else value > self.best + self.min_delta))
        if better:
            self.best = value
        return better


class ModelCheckpoint(Callback):
    """Save a ``Checkpoint`` every ``every`` epochs, the best one by ``monitor``, and at the end.

    The end-of-training save also covers a stop by SIGINT/SIGTERM in mid-epoch (the pending
    accumulation window and the data position are saved). With ``resume=True`` training
    continues from the latest checkpoint, if any, exactly where it stopped.

    In distributed training every worker saves its own checkpoint at the same points: the
    worker of rank 0 into ``checkpoint``'s directory, the worker of rank ``r`` into its
    ``rank-r`` folder. Each holds the worker's own data position, generators, pending window
    and running sums (and the parameters, so that a file alone resumes). A resume takes, on
    every worker, the newest checkpoint that every rank saved (a worker lost while saving
    leaves its set incomplete, and the one before is taken: keep at least 2; a damaged file too,
    with a warning that names it), by rank: the
    worker that has rank ``r`` now, and so reads shard ``r``, resumes rank ``r``'s state,
    whichever order the workers started in. Each checkpoint records the number of workers
    that saved it: when none is complete (a worker lost before its first save), a job of as
    many workers trains from the start (a warning says so). When rank 0's newest checkpoint was
    saved by another number of workers (one process included), every worker resumes from that
    file, taking its own share of the updates done from the global position a run on
    ``gluonkit.data.global_loader``'s global batches records (``gluonkit.train.reshard``); a
    checkpoint of batches per worker, or of the middle of an update, is then refused with
    ``CheckpointError`` before anything is loaded. The directory must be one every worker sees
    (a shared folder); otherwise copy every worker's folder to every host before resuming.

    Parameters
    ----------
    checkpoint : Checkpoint or str
        A ``Checkpoint`` or its directory.
    every : int, default 1
        Save after every ``every``-th epoch.
    monitor : str, optional
        A key of the epoch logs, e.g. 'val_accuracy'; an improvement saves ``best.ckpt``.
    mode : {'auto', 'min', 'max'}
        'auto': 'min' for losses and errors (keys containing 'loss', 'err', 'mae', 'mse',
        'cross-entropy' or 'perplexity'), else 'max'.
    resume : bool, default False
        Load the latest checkpoint at the start of training.
    save_best_params : str or path-like, optional
        Also write the best network as a ``.params`` file (``net.save_parameters``, replaced
        atomically at each improvement), for ``load_parameters`` and scripts that take one.
        Needs ``monitor``. Like ``save_parameters`` it holds the mean of a parameter's
        per-device copies (BatchNorm running statistics), where ``best.ckpt`` keeps each.

    Example::

        fit(net, loss, trainer, train_loader, epochs=20, val_data=val_loader, metrics="acc",
            callbacks=[ModelCheckpoint("runs/cnn/checkpoints", monitor="val_accuracy",
                                       resume=True, save_best_params="runs/cnn/best.params")])
    """

    def __init__(self, checkpoint, every=1, monitor=None, mode="auto", resume=False,
                 save_best_params=None):
        self.checkpoint = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint)
        self.every = positive_int(every, "every", "epochs between saves")
        self._monitor = _Monitor(monitor, mode) if monitor else None
        if save_best_params is not None and not monitor:
            raise ValueError(f"save_best_params={os.fspath(save_best_params)!r} needs monitor=..., the "
                             "key of the epoch logs that decides the best (e.g. 'val_accuracy').")
        self.save_best_params = None if save_best_params is None else os.fspath(save_best_params)
        self.resume = resume
        self._saved_at = None
        self._own = self.checkpoint   # this worker's: rank r > 0 saves into rank-r

    def _of_rank(self, rank):
        if rank == 0:
            return self.checkpoint
        return Checkpoint(os.path.join(self.checkpoint.directory, f"rank-{rank}"), keep=self.checkpoint.keep)

    def _newest_complete(self, rank, workers):
        """The path of this rank's part of the newest checkpoint every rank saved, or None to
        train from the start: no rank saved any, or this job's workers saved some but no set
        is complete (a worker was lost before its first save). ``CheckpointError`` if no set is
        complete and the checkpoints were saved by another number of workers."""
        saved = []
        for r in range(workers):
            by_position = {}
            for path in self._of_rank(r).paths:    # oldest first: the newest file of a position wins
                try:
                    by_position[Checkpoint.saved_at(path)] = path
                except CheckpointError as err:   # damaged: not part of a complete set, and said
                    if rank == 0:
                        log.warning("%s; every worker resumes from the newest checkpoint all %d worker(s) saved "
                                    "without it (the work since is trained again): remove the damaged file.",
                                    err.reason.rstrip("."), workers)
            saved.append(by_position)
        if not any(saved):
            return None
        newest = lambda position: position[::-1]   # (step, epoch): mid-epoch saves order by step
        common = set.intersection(*(set(positions) for positions in saved))
        if common:
            return saved[rank][max(common, key=newest)]
        missing = [r for r, positions in enumerate(saved) if not positions]
        detail = f"rank(s) {missing} saved none" if missing else "the ranks saved different epochs"
        last = max((item for positions in saved for item in positions.items()), key=lambda item: newest(item[0]))
        saved_by = Checkpoint.saved_state(last[1]).get("workers")
        if saved_by == workers:
            if rank == 0:
                log.warning("%s holds no checkpoint that all %d workers saved (%s): training from the start.",
                            self.checkpoint.directory, workers, detail)
            return None
        fix = (f"resume with the {saved_by} worker(s) that saved them" if saved_by
               else "resume with the number of workers that saved them")
        raise CheckpointError(f"{self.checkpoint.directory} holds no checkpoint that all {workers} workers "
                              f"saved ({detail}); {fix}, or start without resuming.")

    @property
    def monitor(self):
        """str or None: The key of the epoch logs that decides the best checkpoint."""
        return self._monitor.monitor if self._monitor else None

    def on_train_begin(self, state):
        self._saved_at = None
        if not hasattr(state.trainer, "state_dict"):
            raise TypeError(f"ModelCheckpoint: trainer must be a gluonkit.Trainer (a drop-in for "
                            f"gluon.Trainer whose state_dict() a checkpoint stores), got "
                            f"{type(state.trainer).__name__}.")
        rank, workers = getattr(state.trainer, "rank", 0), getattr(state.trainer, "num_workers", 1)
        self._own = self._of_rank(rank)
        _writable_directory(self.checkpoint.directory, "ModelCheckpoint")   # rank-r is made at its first save
        if state.is_main_process and self.save_best_params:
            _writable_file(self.save_best_params, "ModelCheckpoint")
        if self._monitor:
            self._monitor.best = None
        if not self.resume:
            return
        path, resharded = self._other_workers(workers)
        if path is None:
            path = self._newest_complete(rank, workers) if workers > 1 else self.checkpoint.latest
        if path is None:
            if state.is_main_process:
                log.info("No checkpoint in %s: training from the start.", self.checkpoint.directory)
            return
        if resharded is not None:   # checked before anything changes
            resharded = reshard(resharded[1], resharded[0], global_sampler(state.train_data), workers, path)
        saved = self._own.load(state.net, state.trainer, path=path)
        if resharded is not None:
            saved["fit"] = resharded
        state.restore(saved)
        self._saved_at = state.position
        if state.is_main_process:
            log.info("Resumed from %s: %s done.", path, position_text(state))
            if resharded is not None:
                log.info("It was saved by %d worker(s); this job's %d worker(s) continue after %d "
                         "update(s) of epoch %d, each with its share of the global batches.",
                         saved["workers"], workers, resharded["global"]["updates"], resharded["epoch"] + 1)

    def _other_workers(self, workers):
        """``(rank 0's newest checkpoint, (the number of workers that saved it, its fit snapshot))``
        if a job of another number of workers than ``workers`` saved it, else ``(None, None)``."""
        newest = self.checkpoint.latest
        try:
            saved = Checkpoint.saved_state(newest) if newest else {}
        except CheckpointError:   # damaged: the same number of workers' rules say what follows
            return None, None
        saved_by = saved.get("workers")
        if saved_by is None or saved_by == workers:
            return None, None
        return newest, (saved_by, saved.get("fit"))

    def _save(self, state, best=False):
        position = state.position
        best = best and state.is_main_process
        path = self._own.save(state.net, state.trainer, position[0], best=best, fit=state.snapshot(),
                              workers=getattr(state.trainer, "num_workers", 1))
        self._saved_at = position
        if best and self.save_best_params:
            directory, name = os.path.split(os.path.abspath(self.save_best_params))
            atomic_write(directory, name, lambda f: state.net.save_parameters(f.name))
        if state.is_main_process:
            log.info("Saved checkpoint %s%s.", path, " (best)" if best else "")

    def on_epoch_end(self, state):
        best = bool(self._monitor) and self._monitor.improved(state.logs)
        if best or (state.epoch + 1) % self.every == 0:
            self._save(state, best=best)

    def on_train_end(self, state):
        if self._saved_at != state.position:
            self._save(state)

    def state_dict(self):
        """The best value of ``monitor`` so far, so that a resumed run saves ``best.ckpt``
        only where the run never stopped would."""
        return {"best": self._monitor.best} if self._monitor else {}

    def load_state_dict(self, state):
        if self._monitor and "best" in state:
            self._monitor.best = state["best"]


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs.

    Example::

        EarlyStopping(monitor="val_loss", patience=3)
    """

    def __init__(self, monitor="val_loss", patience=5, min_delta=0.0, mode="auto"):
        self.patience = positive_int(patience, "patience", "epochs")
        self._monitor = _Monitor(monitor, mode, min_delta)
        self.wait = 0

    @property
    def monitor(self):
        """str: The key of the epoch logs watched."""
        return self._monitor.monitor

    def on_train_begin(self, state):
        self._monitor.best, self.wait = None, 0

    def on_epoch_end(self, state):
        if self._monitor.improved(state.logs):
            self.wait = 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            state.stop_training = True
            log.info("Early stopping: %s has not improved on %.4g for %d epoch(s).",
                     self._monitor.monitor, self._monitor.best, self.wait)

    def state_dict(self):
        return {"best": self._monitor.best, "wait": self.wait}

    def load_state_dict(self, state):
        self._monitor.best, self.wait = state["best"], state["wait"]


class LRSchedule(Callback):
    """Set the learning rate before every update: a linear warm-up, then a scheduler.

    The rate for update ``t`` (``state.step``, 0-based, one per batch without accumulation)
    ramps linearly from ``warmup_begin_lr`` to the scheduler's first rate over
    ``warmup_steps`` updates, then follows ``scheduler(t - warmup_steps + 1)``: a scheduler
    is called as an MXNet optimizer calls its ``lr_scheduler``, with the number of the update
    about to be applied counted from 1, so moving a script's ``lr_scheduler=`` into
    ``LRSchedule`` changes no weight. The rate depends only on ``t``, so a resumed run
    follows the same curve. The optimizer must not have an ``lr_scheduler``.

    Parameters
    ----------
    scheduler : float or callable
        A constant rate, or a scheduler called with the update count (from 1): any of
        ``mx.lr_scheduler`` (``FactorScheduler``, ``MultiFactorScheduler``, ``PolyScheduler``,
        ``CosineScheduler``) or ``gluoncv.utils.LRScheduler`` / ``LRSequential``.
    warmup_steps : int, default 0
    warmup_begin_lr : float, default 0.0

    Example::

        cosine = mx.lr_scheduler.CosineScheduler(max_update=90 * steps_per_epoch, base_lr=0.1)
        LRSchedule(cosine, warmup_steps=5 * steps_per_epoch)
    """

    def __init__(self, scheduler, warmup_steps=0, warmup_begin_lr=0.0):
        warmup_steps = non_negative_int(warmup_steps, "warmup_steps")
        if isinstance(scheduler, numbers.Real):
            scheduler = finite_real(scheduler, "scheduler", "a constant learning rate", minimum=0.0)
        elif not callable(scheduler):
            raise TypeError(f"scheduler must be a learning rate or a callable of the update count "
                            f"(an mx.lr_scheduler or gluoncv.utils.LRScheduler), got {scheduler!r}.")
        self.scheduler = scheduler
        self.warmup_steps = warmup_steps
        self.warmup_begin_lr = finite_real(warmup_begin_lr, "warmup_begin_lr", minimum=0.0)
        self._target = self._scheduled(1)

    def _scheduled(self, num_update):
        if isinstance(self.scheduler, numbers.Real):
            return float(self.scheduler)
        return float(self.scheduler(num_update))

    def learning_rate(self, step):
        """The learning rate of update ``step`` (0-based: the scheduler gets ``step + 1`` after
        the warm-up, as an optimizer's ``num_update``)."""
        if step < self.warmup_steps:
            ramp = (self._target - self.warmup_begin_lr) / self.warmup_steps
            return self.warmup_begin_lr + ramp * step
        return self._scheduled(step - self.warmup_steps + 1)

    def _apply(self, state):
        state.trainer.set_learning_rate(self.learning_rate(state.step))

    def on_train_begin(self, state):
        if state.trainer.optimizer.lr_scheduler is not None:
            raise ValueError("The optimizer already has an lr_scheduler; give the scheduler either "
                             "to the optimizer or to LRSchedule, not both.")
        self._apply(state)

    def on_resume(self, state):
        self._apply(state)

    def on_epoch_begin(self, state):
        self._apply(state)

    def on_batch_end(self, state):
        self._apply(state)


class HistoryLogger(Callback):
    """Write the history (one row per epoch) to a CSV or JSON file after every epoch.

    The format follows the suffix: ``.csv`` or ``.json``. The file is replaced atomically.
    A value missing for an epoch (NaN, e.g. before validation was added on resuming) is
    ``nan`` in CSV and ``null`` in JSON, which strict JSON readers accept.

    Example::

        HistoryLogger("runs/cnn/history.csv")
    """

    main_process_only = True

    def __init__(self, path):
        path = os.fspath(path)
        self.format = os.path.splitext(path)[1].lower().lstrip(".")
        if self.format not in ("csv", "json"):
            raise ValueError(f"HistoryLogger writes .csv or .json files, got {path!r}.")
        self.path = path
        self._rows = None

    def _write(self, history):
        rows = len(history.get("epoch", ()))
        if rows == self._rows and os.path.exists(self.path):
            return
        self._rows = rows
        if self.format == "json":
            text = json.dumps({key: [None if isinstance(v, float) and not math.isfinite(v) else v
                                     for v in values] for key, values in history.items()},
                              indent=1, allow_nan=False)
        else:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(list(history))
            writer.writerows(zip(*history.values()))
            text = buf.getvalue()
        atomic_text(self.path, text)

    def on_train_begin(self, state):
        _writable_file(self.path, "HistoryLogger")

    def on_epoch_end(self, state):
        self._write(state.history)

    def on_train_end(self, state):
        self._write(state.history)


class PlotCurves(Callback):
    """Plot the training curves to a PNG as epochs end (matplotlib, no display needed).

    One panel per quantity: the loss and each metric, on the training batches and on the
    held-out data (``val_data``: the history's ``val_`` keys, labelled ``held_out``); one
    panel for the held-out values that have no training twin (a detector's mAP and AP per
    class); and the learning rate. Losses are drawn on a log scale (when all positive), so a
    small gap between training and held-out loss stays visible late in training. The
    learning rate is drawn per batch (as set before the next update: a warm-up shows), with
    the history's value at each epoch's end as a marker; a resumed run draws its batches
    from the resume on.

    Parameters
    ----------
    path : str
        The PNG file, replaced atomically after an epoch and when training ends.
    held_out : str, default 'val'
        What the ``val_`` curves are called in the legend, e.g. ``'validation'`` (as the
        recipes, which hold the test set out of training) or ``'test'``.
    min_seconds : float, default 10.0
        After an epoch, the plot is drawn again only if this long has passed since training
        began or the last drawing (a drawing takes about a second of CPU); it is always drawn
        when training ends. 0 draws after every epoch.

    Attributes
    ----------
    learning_rates : list of (float, float)
        The learning rate after each batch of this process, at its position in epochs
        (``epoch - 1 + batch / batches``: 1.0 is the end of the first epoch).

    Example::

        PlotCurves("runs/cnn/curves.png", held_out="test")
    """

    main_process_only = True

    def __init__(self, path, held_out="val", min_seconds=10.0):
        if not isinstance(held_out, str) or not held_out:
            raise TypeError(f"held_out must be a non-empty str such as 'val' or 'test', got "
                            f"{held_out!r}.")
        self.min_seconds = finite_real(min_seconds, "min_seconds", "the seconds between drawings", minimum=0.0)
        self.path = os.fspath(path)
        self.held_out = held_out
        self._drawn_at = None    # time.monotonic() of training's start or the last drawing
        self._rows = None
        self.learning_rates = []
        self._epoch_lrs = []     # this epoch's (batch, learning rate)

    def _panels(self, history):
        """[(title, [(label, history key), ...])]: one panel per quantity, its training and
        held-out curves together; held-out values without a training twin (a detector's mAP
        and per-class AP) share one panel."""
        skip = {"epoch", "time", "samples_per_sec", "lr"}
        panels = [(key, [("train", key)] + ([(self.held_out, f"val_{key}")]
                                            if f"val_{key}" in history else []))
                  for key in history if key not in skip and not key.startswith("val_")]
        alone = [key for key in history if key.startswith("val_") and key[4:] not in history]
        if alone:
            panels.append((f"on the {self.held_out} data", [(key[4:], key) for key in alone]))
        return panels

    def _draw_new(self, history):
        """``draw``, unless ``history`` holds no new epoch since the last drawing and the file is there."""
        rows = len(history.get("epoch", ()))
        if rows == self._rows and os.path.exists(self.path):
            return
        self._rows, self._drawn_at = rows, time.monotonic()
        self.draw(history)

    def draw(self, history):
        """Draw ``history`` (a ``fit`` history) to ``path`` now."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        panels = self._panels(history)
        count = len(panels) + ("lr" in history)
        if not count:
            return
        fig = Figure(figsize=(4 * count, 3.2), tight_layout=True)
        FigureCanvasAgg(fig)
        first = next(iter(history.values()))
        epochs = history.get("epoch", list(range(1, len(first) + 1)))
        for i, (title, curves) in enumerate(panels):
            ax = fig.add_subplot(1, count, i + 1)
            for label, key in curves:
                ax.plot(epochs, history[key], marker="o", label=label)
            values = [v for _, key in curves for v in history[key] if not math.isnan(v)]
            if "loss" in title and values and min(values) > 0:
                ax.set_yscale("log")
                title += " (log scale)"
            self._finish(ax, title)
        if "lr" in history:
            ax = fig.add_subplot(1, count, count)
            if self.learning_rates:
                ax.plot(*zip(*self.learning_rates), label="per batch")
            ax.plot(epochs, history["lr"], marker="o", linestyle="none", label="epoch end")
            self._finish(ax, "learning rate")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        directory = os.path.dirname(os.path.abspath(self.path))
        atomic_write(directory, os.path.basename(self.path), lambda f: f.write(buf.getvalue()))

    @staticmethod
    def _finish(ax, title):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()

    def on_train_begin(self, state):
        _writable_file(self.path, "PlotCurves")
        self._drawn_at = time.monotonic()

    def on_epoch_begin(self, state):
        self._epoch_lrs = []

    def on_batch_end(self, state):
        self._epoch_lrs.append((state.batch, state.trainer.learning_rate))

    def on_epoch_end(self, state):
        batches = max(state.batch, 1)
        self.learning_rates += [(state.epoch + b / batches, lr) for b, lr in self._epoch_lrs]
        self._epoch_lrs = []
        if time.monotonic() - self._drawn_at >= self.min_seconds:
            self._draw_new(state.history)

    def on_train_end(self, state):
        self._draw_new(state.history)
