"""The state of a ``fit`` run: the loop's working ``Run`` and the ``FitState`` view callbacks get."""
from .resume import Resumer
from .tally import Tally

__all__ = ["FitState", "Run", "position_text"]


class Run:
    """What one ``fit`` call works with between batches: the loop reads and writes it.

    Callbacks and a ``batch_fn`` get its read-only view, ``view`` (a ``FitState``); the
    generators, samplers and snapshots are the ``resumer``'s.
    """

    def __init__(self, net, loss, trainer, ctx, epochs, callbacks, metrics, outputs_optional=False):
        self.net, self.loss, self.trainer, self.ctx, self.epochs = net, loss, trainer, ctx, epochs
        self.loss_graph = loss        # fit runs a built-in gluon loss as a cached graph instead
        self.every_device = False     # SyncBatchNorm layers: every batch must reach every device
        self.train_data = None        # snapshots carry its sampler's state
        self.stops_between_updates = False   # one process on global batches: a signal stops after the update
        self.batch_fn = self.eval_fn = self.dtype = None
        self.batch_fn_keywords = {}   # {'state': view} for a batch_fn that takes it
        self.epoch = self.batch = self.step = 0
        self.history = {}
        self.epoch_logs = {}          # the last epoch's row
        self.stop_training = False
        self.interrupted = None
        self.resumed = None           # the position a restore continued from
        self.is_main_process = getattr(trainer, "rank", 0) == 0
        # several workers stop together, agreeing through the trainer's updates
        self.workers = getattr(trainer, "num_workers", 1) if hasattr(trainer, "request_stop") else 1
        self.callbacks = callbacks
        self.tally = Tally(metrics, outputs_optional)
        self.head_tally = None        # the losses by head, with fit's head_counts (a HeadTally)
        self.phase = "idle"           # 'train' inside an epoch, 'end' at on_epoch_end
        self.resumer = Resumer()      # generator and sampler states, snapshots, the replay of an epoch
        self.view = FitState(self)

    @property
    def logs(self):
        """The running loss and metrics inside an epoch, else the last epoch's row."""
        if self.phase == "train" and self.head_tally is not None and self.head_tally.counted:
            return {**self.head_tally.values(), **self.tally.values(loss=False)}
        if self.phase == "train" and self.tally.samples:
            return self.tally.values()
        return self.epoch_logs

    @property
    def position(self):
        """tuple: ``(epochs completed, batches done in the next epoch)``."""
        if self.phase == "train":
            return self.epoch, self.batch
        if self.resumer.pending is not None:
            return self.epoch, self.resumer.pending["batch"]
        return self.epoch + (self.phase == "end"), 0

    @property
    def epoch_updates(self):
        """int: Updates applied in the epoch of ``position`` (0 at an epoch's end)."""
        if self.phase == "train" or self.resumer.pending is not None:
            return self.resumer.updates_done(self)
        return 0

    def snapshot(self):
        """See ``FitState.snapshot``."""
        return self.resumer.snapshot(self, self.tally, self.callbacks)

    def restore(self, saved):
        """See ``FitState.restore``."""
        self.epoch, self.step, self.history = self.resumer.restore(self, saved)
        self.resumed = self.position

    @property
    def continues_epoch(self):
        """bool: The next epoch is one a restored snapshot stopped in the middle of: it began
        before the stop, so it does not begin again."""
        return self.resumer.pending is not None

    def apply_callback_states(self):
        """Give the callbacks the states a restored snapshot holds for them."""
        self.resumer.load_callback_states(self.callbacks)

    def begin_epoch(self):
        """Reset the epoch's sums, or take them from a mid-epoch snapshot.

        Returns the epoch's batches (an iterator, after those done when resuming in mid-epoch)
        and the trainer's ``nonfinite_skips`` when the epoch began.
        """
        self.phase = "train"
        if self.resumer.pending is not None:
            self.batch = self.resumer.pending["batch"]
        else:
            self.batch = 0
            self.tally.reset()
        batches = self.resumer.begin_epoch(self, self.tally)
        return batches, self.resumer.skips_at_start


class FitState:
    """What ``fit`` is doing, as every callback hook (and a ``batch_fn`` that asks) sees it.

    A read-only view of the run, except ``stop_training``; ``restore`` continues from a
    checkpoint.

    Attributes
    ----------
    net, loss, trainer, ctx, train_data : the objects ``fit`` was given (``ctx`` a list of
        Context).
    epochs : int
        Number of epochs to reach.
    epoch : int
        Index of the current epoch (0-based, at ``on_epoch_end`` too); after the last one, the
        number completed. The history's 'epoch', the epoch lines and the checkpoint names
        count from 1: the epoch that just ended is ``state.epoch + 1`` there.
    batch : int
        Batches done in the current epoch (this worker's own).
    step : int
        Optimizer updates applied so far (one per ``accumulate`` batches).
    epoch_updates : int
        Updates applied in the epoch of ``position`` (0 at an epoch's end): the same on every
        worker, and on global batches on any number of workers.
    logs : dict
        During an epoch: running 'loss' and metrics (reading them waits for the last batch);
        at ``on_epoch_end``: the epoch's row.
    history : dict of list
        One entry per completed epoch for each key of the rows.
    stop_training : bool
        Set it in a callback to stop after the current epoch.
    interrupted : signal.Signals or None
        The signal (SIGINT, SIGTERM) that asked training to stop, if any.
    resumed : tuple or None
        ``(epochs completed, batches done in the next epoch)`` where this run continued from a
        checkpoint (``restore``), else None.
    is_main_process : bool
        False on the workers of rank > 0 in distributed training: they neither log nor write.
    position : tuple
        ``(epochs completed, batches done in the next epoch)``.
    """

    def __init__(self, run):
        self._run = run

    net = property(lambda self: self._run.net)
    loss = property(lambda self: self._run.loss)
    trainer = property(lambda self: self._run.trainer)
    ctx = property(lambda self: self._run.ctx)
    train_data = property(lambda self: self._run.train_data)
    epochs = property(lambda self: self._run.epochs)
    epoch = property(lambda self: self._run.epoch)
    batch = property(lambda self: self._run.batch)
    step = property(lambda self: self._run.step)
    history = property(lambda self: self._run.history)
    interrupted = property(lambda self: self._run.interrupted)
    resumed = property(lambda self: self._run.resumed)
    is_main_process = property(lambda self: self._run.is_main_process)
    logs = property(lambda self: self._run.logs)
    position = property(lambda self: self._run.position)
    epoch_updates = property(lambda self: self._run.epoch_updates)

    @property
    def stop_training(self):
        return self._run.stop_training

    @stop_training.setter
    def stop_training(self, value):
        self._run.stop_training = bool(value)

    def snapshot(self):
        """Everything ``restore`` needs to continue exactly from here: JSON values and arrays.

        It holds the position, history, callbacks' states, the loader's sampler state when
        the loader has one (gluonkit's ``bucket_loader`` and ``multiscale_loader``, gluon's
        ``last_batch='rollover'``) and the settings (``accumulate``, devices). In mid-epoch
        it also holds the epoch's sums (loss, counts, each metric's sums) and the samples of
        the batches done, and it reseeds MXNet's generator (whose state cannot be read) and
        keeps the seed: this run and a run resumed from the snapshot continue with the same
        MXNet random stream.

        Example::

            ckpt.save(state.net, state.trainer, state.position[0], fit=state.snapshot())
        """
        return self._run.snapshot()

    def restore(self, saved):
        """Continue from what ``Checkpoint.load`` returned (a ``snapshot`` under 'fit').

        A checkpoint saved without a snapshot resumes at the start of the epoch after its
        ``epoch``. A mid-epoch snapshot taken with another ``accumulate`` or other devices is
        refused (``ValueError`` naming both); at an epoch's end they may change (a warning
        names them). A loader whose first batches hold other numbers of samples than the
        interrupted run's is refused when the epoch resumes.
        """
        self._run.restore(saved)


def position_text(state):
    """Where ``state`` (a ``FitState``) is, in units that are the same on every worker:
    '1 epoch(s) and 2 update(s)', and the batches of the next update accumulated, if any."""
    steps = state.trainer.pending[0] if hasattr(state.trainer, "pending") else 0
    return (f"{state.position[0]} epoch(s) and {state.epoch_updates} update(s)"
            + (f" (and {steps} batch(es) of the next update)" if steps else ""))
