"""The state of a ``fit`` run: position, history, running tally, and what resuming needs."""
import mxnet as mx
import numpy as np

from .metrics import MetricFeeder, metric_values
from .resume import Resumer

__all__ = ["FitState", "Tally"]


class Tally:
    """The running loss and metrics of an epoch, kept without making the devices wait.

    Reading a result on the host waits until the device has computed it; reading each batch's
    loss that way cost ``fit`` ~12% of the throughput of a small network on two devices. So
    losses are summed on the device, and so are counts given as NDArrays (a ``batch_fn``'s
    positive anchors or valid pixels), all read only when asked for. Each batch costs one
    operator per device (its float32 sum); the sums are added up in float64 when the tally
    settles. Metrics,
    which need the outputs on the host, get them ``METRIC_BATCHES`` batches at a time (which
    bounds the outputs held) or when read. ``settle`` counts every batch. The mean 'loss' is
    the sum of the losses over the sum of the counts. With ``class_axis`` set (labels that the
    loss picks from that axis of the outputs), the labels are checked against the outputs'
    classes at each settle, reduced on the device with the losses.
    """

    METRIC_BATCHES = 16

    def __init__(self, metrics, outputs_optional=False):
        self.metrics = metrics
        self.outputs_optional = outputs_optional   # batches without outputs skip the metrics
        self._metrics_fed = False
        self._feeder = MetricFeeder(metrics)
        self.grad_norms = []       # the trainer's global_norm after each update of the epoch
        self._samples = 0          # counts given as numbers
        self._count = None         # counts given as NDArrays: float64 (1,) on their context
        self._loss = None          # float64 NDArray of shape (1,) on the first loss's context
        self._loss_parts = []      # float32 (1,) sums of the batches since the last settle
        self._restored = 0.0       # a loss sum from a checkpoint: where ``_loss`` starts
        self._queued = []          # (labels, outputs) not yet given to the metrics
        self.class_axis = None     # fit's loss picks labels from this axis of the outputs: checked
        self._labels = []          # (labels, classes) per device since the last settle

    @property
    def loss_sum(self):
        """float: Sum of the losses added so far (waits for the last batch)."""
        self._fold_losses()
        return self._restored if self._loss is None else float(self._loss.asscalar())

    @loss_sum.setter
    def loss_sum(self, value):
        self._loss, self._loss_parts, self._restored = None, [], float(value)

    @property
    def samples(self):
        """Sum of the counts added so far (waits for the last batch if counts are NDArrays)."""
        return self._samples if self._count is None else self._samples + float(self._count.asscalar())

    @samples.setter
    def samples(self, value):
        self._samples, self._count = value, None

    def reset(self):
        self.samples, self.loss_sum, self._queued, self.grad_norms = 0, 0.0, [], []
        self._metrics_fed = False
        for metric in self.metrics:
            metric.reset()

    def add(self, labels, outputs, losses, count):
        """Add a batch normalized by ``count`` (``losses`` is None when no loss is tallied)."""
        if isinstance(count, mx.nd.NDArray):
            count = count.astype("float64").reshape((1,))
            if self._count is None:
                self._count = count.copy()
            else:
                self._count += count.as_in_context(self._count.context)
        else:
            self._samples += count
        if self.class_axis is not None:   # flat views: no operator until the settle
            self._labels += [(y if y.ndim == 1 else y.reshape((-1,)), out.shape[self.class_axis])
                             for y, out in zip(labels, outputs)]
        for value in losses or ():
            # float16 sums overflow from 65504 on, float64 ones cannot be concatenated with the rest
            self._loss_parts.append(value.sum() if value.dtype == np.float32 else value.astype("float32").sum())
        if self.metrics and not (self.outputs_optional and outputs is None and labels is None):
            if not self._queued:
                self._feeder.check(labels, outputs)
            self._metrics_fed = True
            self._queued.append((labels, outputs))
            if len(self._queued) >= self.METRIC_BATCHES:
                self.settle()

    def settle(self):
        """Give the queued batches to the metrics and wait for the last batch's loss."""
        queued, self._queued = self._queued, []
        for labels, outputs in queued:
            self._feeder.update(labels, outputs)
        ends = self._label_ends()   # pushed first: computed by the time the losses are
        self._fold_losses()
        for pending in (self._loss, self._count):
            if pending is not None:
                pending.wait_to_read()
        self._check_labels(ends)

    def _label_ends(self):
        """The smallest and largest label since the last settle, and the classes of the outputs
        (an NDArray per device, not yet read, and an int); None if no labels are checked."""
        held, self._labels = self._labels, []
        if not held:
            return None
        by_device = {}
        for labels, _ in held:
            by_device.setdefault(labels.context, []).append(labels)
        ends = []
        for parts in by_device.values():
            flat = mx.nd.concat(*[p.astype(parts[0].dtype, copy=False) for p in parts], dim=0)
            ends.append(mx.nd.concat(flat.min(), flat.max(), dim=0))
        return ends, min(count for _, count in held)

    def _check_labels(self, ends):
        """ValueError if a label is no class of the outputs (MXNet's pick would clip it to one
        silently); ``ends`` from ``_label_ends``."""
        if ends is None:
            return
        ends, classes = ends
        ends = np.array([e.asnumpy() for e in ends], dtype=np.float64)
        low, high = ends[:, 0].min(), ends[:, 1].max()
        if not (low >= 0 and high < classes):
            label = low if not low >= 0 else high
            raise ValueError(f"fit: a label {label:g} reached the loss, but the outputs have "
                             f"{classes} classes along axis {self.class_axis} (labels 0..{classes - 1}), "
                             "and MXNet's pick would clip it to a class silently; relabel the data "
                             f"0..{classes - 1}, or give the network's output one unit per class.")

    def _fold_losses(self):
        """Add the batches' loss sums to the float64 total, in a few operators for them all."""
        parts, self._loss_parts = self._loss_parts, []
        if not parts:
            return
        if self._loss is None:
            self._loss = mx.nd.array([self._restored], ctx=parts[0].context, dtype="float64")
        ctx = self._loss.context
        parts = [p.as_in_context(ctx) for p in parts]
        self._loss += mx.nd.concat(*parts, dim=0).astype("float64").sum()

    def values(self, loss=True):
        """dict: the mean 'loss' (if ``loss``), 'grad_norm' (if any) and each metric."""
        self.settle()
        logs = {"loss": self.loss_sum / (self.samples or 1)} if loss else {}
        if self.grad_norms:
            logs["grad_norm"] = sum(self.grad_norms) / len(self.grad_norms)
        if self._metrics_fed or not self.outputs_optional:
            for metric in self.metrics:
                logs.update(metric_values(metric))
        return logs


class FitState:
    """What ``fit`` is doing; every callback hook receives it.

    Attributes
    ----------
    net, loss, trainer, ctx, train_data : the objects ``fit`` was given (``ctx`` a list of
        Context).
    epochs : int
        Number of epochs to reach.
    epoch : int
        Index of the current epoch (0-based); after the last one, the number completed.
    batch : int
        Batches done in the current epoch.
    step : int
        Optimizer updates applied so far (one per ``accumulate`` batches).
    logs : dict
        During an epoch: running 'loss' and metrics (reading them waits for the last batch);
        at ``on_epoch_end``: the epoch's row.
    history : dict of list
        One entry per completed epoch for each key of the rows.
    stop_training : bool
        Set it in a callback to stop after the current epoch.
    interrupted : signal.Signals or None
        The signal (SIGINT, SIGTERM) that asked training to stop, if any.
    is_main_process : bool
        False on the workers of rank > 0 in distributed training: they neither log nor write.
    """

    def __init__(self, net, loss, trainer, ctx, epochs, callbacks, metrics, outputs_optional=False):
        self.net, self.loss, self.trainer, self.ctx = net, loss, trainer, ctx
        self._loss_graph = loss       # fit runs a built-in gluon loss as a cached graph instead
        self._every_device = False    # SyncBatchNorm layers: every batch must reach every device
        self.train_data = None        # fit sets it; snapshots carry its sampler's state
        self.epochs = epochs
        self.epoch = self.batch = self.step = 0
        self.history = {}
        self._logs = {}
        self.stop_training = False
        self.interrupted = None
        self.is_main_process = getattr(trainer, "rank", 0) == 0
        self._callbacks = callbacks
        self._tally = Tally(metrics, outputs_optional)
        self._phase = "idle"          # 'train' inside an epoch, 'end' at on_epoch_end
        self._resumer = Resumer()     # generator and sampler states, snapshots, the replay of an epoch

    @property
    def logs(self):
        if self._phase == "train" and self._tally.samples:
            return self._tally.values()
        return self._logs

    @property
    def position(self):
        """tuple: ``(epochs completed, batches done in the next epoch)``."""
        if self._phase == "train":
            return self.epoch, self.batch
        if self._resumer.pending is not None:
            return self.epoch, self._resumer.pending["batch"]
        return self.epoch + (self._phase == "end"), 0

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
        return self._resumer.snapshot(self, self._tally, self._callbacks)

    def restore(self, saved):
        """Continue from what ``Checkpoint.load`` returned (a ``snapshot`` under 'fit').

        A checkpoint saved without a snapshot resumes at the start of the epoch after its
        ``epoch``. A mid-epoch snapshot taken with another ``accumulate`` or other devices is
        refused (``ValueError`` naming both); at an epoch's end they may change (a warning
        names them). A loader whose first batches hold other numbers of samples than the
        interrupted run's is refused when the epoch resumes.
        """
        self.epoch, self.step, self.history = self._resumer.restore(self, saved)

    def _apply_callback_states(self):
        self._resumer.load_callback_states(self._callbacks)

    def _begin_epoch(self):
        """Reset the epoch's sums, or take them from a mid-epoch snapshot.

        Returns the epoch's batches (an iterator, after those done when resuming in mid-epoch)
        and the trainer's ``nonfinite_skips`` when the epoch began.
        """
        self._phase = "train"
        if self._resumer.pending is not None:
            self.batch = self._resumer.pending["batch"]
        else:
            self.batch = 0
            self._tally.reset()
        batches = self._resumer.begin_epoch(self, self._tally)
        return batches, self._resumer.skips_at_start
