"""The running loss and metrics of an epoch, kept without making the devices wait."""
import mxnet as mx
import numpy as np

from .metrics import MetricFeeder, metric_values

__all__ = ["Tally"]


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
        self._norms = []           # the trainer's global_norm after each update of the epoch
        self._norms_unread = []    # (index in _norms, NDArray) of the norms still on the device
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
    def grad_norms(self):
        """list of float: The gradient norm of each update of the epoch (reading them waits for
        those still on the device, all in one wait)."""
        self._read_norms()
        return self._norms

    @grad_norms.setter
    def grad_norms(self, values):
        self._norms, self._norms_unread = list(values), []

    def add_norm(self, norm):
        """Add an update's gradient norm: a float, or a one-element NDArray not read yet."""
        if isinstance(norm, mx.nd.NDArray):
            self._norms_unread.append((len(self._norms), norm))
        self._norms.append(norm)

    def _read_norms(self):
        if self._norms_unread:
            unread, self._norms_unread = self._norms_unread, []
            values = mx.nd.concat(*(n.reshape((1,)).astype("float64", copy=False).as_in_context(mx.cpu())
                                    for _, n in unread), dim=0).asnumpy().tolist()
            for (index, _), value in zip(unread, values):
                self._norms[index] = value

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
            count = count.astype("float64", copy=False).reshape((1,))
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
        self._read_norms()
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
