"""Metrics for fit and evaluate: made from names, fed class indices, and fed several fields.

Two rules decide what a metric's ``update`` receives, for every device's outputs and labels:

- An accuracy-type metric (``Accuracy``, ``TopKAccuracy``, ``F1``, ``MCC``) given labels of
  the predictions' shape (one-hot or soft labels, as with
  ``SoftmaxCrossEntropyLoss(sparse_label=False)``) gets their argmax: MXNet's own metrics
  would compare the int-cast scores with the one-hot entries and report a wrong accuracy.
- A metric whose ``update`` takes more than (labels, preds), such as GluonCV's
  ``VOC07MApMetric.update(pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels,
  gt_difficults=None)``, gets ``update(*outputs, *labels)`` once per device, as GluonCV's
  ``train_faster_rcnn.py`` feeds it: each device's outputs and labels are tuples of arrays
  (the devices may hold different numbers of objects).
"""
import copy
import difflib
import inspect

import mxnet as mx

__all__ = ["make_metrics", "MetricFeeder", "metric_values", "OutputMetric"]

_CLASS_METRICS = (mx.metric.Accuracy, mx.metric.TopKAccuracy, mx.metric.F1, mx.metric.MCC)


def make_metrics(metrics, names=None):
    """Fresh metric objects from names ('acc', 'ce', ...) and/or metric instances.

    Any object with ``update``, ``get`` and ``reset`` (GluonCV's metrics) is accepted. Metrics
    per output, as Keras takes them, become ``OutputMetric`` objects: a dict ``{output:
    metrics}`` (an output named by its position, or by its key in each device's dict of
    outputs, or by its head's name in ``names``, a ``Branches`` network's ``names``) or a list
    with one list of metrics per output position.
    """
    if metrics is None:
        return []
    if isinstance(metrics, (list, tuple)) and metrics and all(isinstance(m, (list, tuple)) for m in metrics):
        metrics = dict(enumerate(metrics))
    if isinstance(metrics, dict):
        return [OutputMetric(metric, output, names) for output, spec in metrics.items()
                for metric in make_metrics(spec)]
    if isinstance(metrics, (str, mx.metric.EvalMetric)) or _is_metric(metrics):
        metrics = [metrics]
    if not isinstance(metrics, (list, tuple)):
        raise TypeError(f"metrics must be a metric name, an mx.metric.EvalMetric or a list of them, "
                        f"got {metrics!r}; e.g. metrics='acc' or metrics=['acc', 'ce'].")
    made = []
    for metric in metrics:
        if isinstance(metric, str):
            made.append(_from_name(metric))
        elif _is_metric(metric):
            made.append(_fresh(metric))
        else:
            raise TypeError(f"metrics must hold metric names or mx.metric.EvalMetric objects, "
                            f"got {metric!r}.")
        if isinstance(made[-1], mx.metric.Loss):
            raise ValueError(f"metric {metric!r} is an mx.metric.Loss, which averages what it is "
                             "given, and metrics are given the network's outputs; the mean loss is "
                             "the history's 'loss' already (evaluate(..., loss=...)): drop it.")
    return made


def _from_name(name):
    """``mx.metric.create(name)``; ValueError for a name it does not know (with the closest
    one), or one whose metric needs arguments (``'top_k_accuracy'``, ``'perplexity'``)."""
    known = sorted(mx.registry.get_registry(mx.metric.EvalMetric))
    if name.lower() not in known:
        close = difflib.get_close_matches(name.lower(), known, n=1)
        raise ValueError(f"Unknown metric {name!r}" + (f"; did you mean {close[0]!r}?" if close else ".")
                         + " Use a name mx.metric.create knows ('acc', 'ce', 'f1', 'mae', 'mse', "
                         "'rmse', ...) or an mx.metric.EvalMetric instance.")
    try:
        return mx.metric.create(name)
    except Exception as err:   # its constructor needs arguments: mxnet asserts or TypeError
        raise ValueError(f"metric {name!r} cannot be made from its name alone "
                         f"({type(err).__name__}: {err}); pass an instance with its arguments, "
                         "e.g. mx.metric.TopKAccuracy(top_k=5) or "
                         "mx.metric.Perplexity(ignore_label=None).") from err


def _fresh(metric):
    """A copy with no results, for one of train and val (a metric holding a lock, as GluonCV's
    SegmentationMetric does, cannot be deep-copied: it is copied shallowly and reset)."""
    try:
        return copy.deepcopy(metric)
    except TypeError:
        fresh = copy.copy(metric)
        fresh.reset()
        return fresh


def _is_metric(obj):
    return all(callable(getattr(obj, name, None)) for name in ("update", "get", "reset"))


def _update_arity(metric):
    """(required, most) positional arguments of ``metric.update``."""
    params = [p for p in inspect.signature(metric.update).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is p.empty for p in params)
    return required, len(params)


def _fields(parts, what):
    """Per-device tuples of arrays -> one list per field (field i: every device's i-th array)."""
    rows = [tuple(p) if isinstance(p, (tuple, list)) else (p,) for p in parts]
    if len({len(r) for r in rows}) > 1:
        raise ValueError(f"the devices' {what} hold different numbers of arrays "
                         f"({[len(r) for r in rows]}); return the same fields from every device.")
    return [list(field) for field in zip(*rows)]


class MetricFeeder:
    """Feeds metrics the (labels, outputs) of a batch following the module's two rules."""

    def __init__(self, metrics):
        self.metrics = metrics
        self._arity = [_update_arity(m) for m in metrics]

    def check(self, labels, outputs):
        """Raise at once if a metric cannot take these outputs and labels."""
        if labels is None or outputs is None:
            raise ValueError("metrics need outputs and labels, but none were given; return "
                             "(losses, count, outputs, labels) from batch_fn, pass val_data (and an "
                             "eval_fn) to measure them on validation only, or pass metrics=None.")
        for metric, (required, most) in zip(self.metrics, self._arity):
            if most > 2:
                given = len(_fields(outputs, "outputs")) + len(_fields(labels, "labels"))
                if not required <= given <= most:
                    raise TypeError(
                        f"{type(metric).__name__}.update takes {required} to {most} arrays but "
                        f"the outputs and labels give {given}; return outputs and labels as "
                        f"tuples whose fields, in order, are update's arguments.")

    def update(self, labels, outputs):
        """Update every metric with one batch (lists over devices)."""
        for metric, (_, most) in zip(self.metrics, self._arity):
            if isinstance(metric, OutputMetric):   # feeds its own metric, by these rules
                metric.update(labels, outputs)
                continue
            if most > 2:
                for device_outputs, device_labels in zip(outputs, labels):
                    _update_fields(metric, device_outputs, device_labels)
                continue
            if isinstance(metric, _CLASS_METRICS):
                args = ([_class_indices(y, p) for y, p in zip(labels, outputs)], outputs)
            else:
                args = (labels, outputs)
            try:
                metric.update(*args)
            except (AssertionError, ValueError, IndexError) as err:   # mxnet's metrics assert
                raise ValueError(
                    f"{type(metric).__name__} cannot take labels of shape {_shapes(labels)} with "
                    f"outputs of shape {_shapes(outputs)} ({type(err).__name__}: {err}); pass a "
                    "metric made for these labels (mx.metric's CrossEntropy, F1 and MCC take "
                    "class indices, F1 and MCC two classes) or metrics=None.") from err


class OutputMetric:
    """A metric of one output of a network with several (a head of a ``Branches``).

    ``update(labels, preds)`` takes, per device, the outputs and labels of all outputs, as
    tuples (by position) or dicts (by key), and gives ``metric`` this output's, by the rules
    of this module. A device whose dict lacks the output (a head that did not run on that
    batch) gives nothing. Results are named ``<output>_<name>``, e.g. ``digit_accuracy``.

    Parameters
    ----------
    metric : str or EvalMetric
    output : int or str
        The output's position, or its key in each device's dict of outputs, or a name in
        ``names``.
    names : sequence of str, optional
        The outputs' names in order (a ``Branches`` network's ``names``): a str ``output``
        in it also picks by position from tuples, and an int one is named by it.

    Example::

        fit(net, None, trainer, loader, epochs=5, batch_fn=step,
            metrics={"digit": "acc", "parity": ["acc", "f1"]})   # digit_accuracy, parity_f1, ...
    """

    def __init__(self, metric, output, names=None):
        made = make_metrics(metric)
        if len(made) != 1 or isinstance(output, bool) or not isinstance(output, (int, str)):
            raise TypeError(f"OutputMetric takes one metric and an output position (int) or name "
                            f"(str), got {metric!r} for {output!r}.")
        names = None if names is None else tuple(names)
        if isinstance(output, str) and names is not None and output not in names:
            raise ValueError(f"metrics for output {output!r}: the network's outputs are {list(names)}; "
                             "name one of them, or give its position.")
        if isinstance(output, int):
            self.position = output
            named = names is not None and -len(names) <= output < len(names)
            self.name = names[output] if named else f"output{output}"
        else:
            self.position = None if names is None else names.index(output)
            self.name = output
        self.metric, self.output = made[0], output
        self._feeder = MetricFeeder([self.metric])

    def _part(self, part):
        """This output's array(s) in one device's outputs or labels, None if it did not run."""
        if isinstance(part, dict):
            return part.get(self.output)
        if isinstance(part, (tuple, list)) and self.position is not None and -len(part) <= self.position < len(part):
            return part[self.position]
        raise TypeError(f"the metrics of output {self.output!r} need each device's outputs and labels "
                         f"as a tuple of the outputs (or a dict by name), got {type(part).__name__} "
                         f"{getattr(part, 'shape', '')}; return them so from batch_fn or eval_fn.")

    def update(self, labels, preds):
        """Update the metric with this output of every device that has it."""
        pairs = [(self._part(y), self._part(p)) for y, p in zip(labels, preds)]
        pairs = [(y, p) for y, p in pairs if y is not None and p is not None]
        if pairs:
            self._feeder.update(*map(list, zip(*pairs)))

    def reset(self):
        self.metric.reset()

    def get(self):
        """``(names, values)``, each name prefixed with the output's."""
        values = metric_values(self.metric)
        return [f"{self.name}_{key}" for key in values], list(values.values())


def _update_fields(metric, outputs, labels):
    """``metric.update(*outputs, *labels)`` of one device; a failure names the fields' shapes."""
    outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    labels = tuple(labels) if isinstance(labels, (tuple, list)) else (labels,)
    try:
        metric.update(*outputs, *labels)
    except (AssertionError, ValueError, IndexError) as err:
        raise ValueError(
            f"{type(metric).__name__}.update failed on a device's outputs of shape "
            f"{_shapes(outputs)} and labels of shape {_shapes(labels)} ({type(err).__name__}: "
            f"{err}); return from eval_fn (or batch_fn) per device the tuples whose fields, in "
            "order, are update's arguments.") from err


def metric_values(metric):
    """dict name -> value of a metric's results.

    ``get()`` gives (name, value) or (names, values) for MXNet's metrics; GluonCV's
    ``SegmentationMetric`` gives bare values (pixAcc, mIoU) and a name 'pixAcc & mIoU', whose
    parts then name them.
    """
    result = metric.get()
    names, values = result if len(result) == 2 else (None, result)
    if isinstance(names, str):
        return {names: values}
    if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
        return dict(zip(names, values))
    values = list(result)
    parts = str(getattr(metric, "name", type(metric).__name__)).split(" & ")
    if len(parts) != len(values):
        parts = [f"{parts[0]}_{i}" for i in range(len(values))]
    return dict(zip(parts, values))


def _shapes(parts):
    """The shapes of per-device arrays (or of tuples of them), for messages."""
    return [tuple(p.shape) if hasattr(p, "shape") else None if p is None else _shapes(p)
            for p in parts]


def _class_indices(label, pred):
    """The argmax of one-hot (dense) labels, which have the predictions' shape (two or more
    classes: a single score per sample is left as it is)."""
    shape = getattr(label, "shape", ())
    if len(shape) >= 2 and shape[1] > 1 and shape == getattr(pred, "shape", None):
        return label.argmax(axis=1)
    return label
