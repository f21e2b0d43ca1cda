"""evaluate(): a network's metrics and mean loss over a loader, in prediction mode."""
import mxnet as mx

from ..split import split_and_load
from .batches import (as_dtype, check_arrays, check_hook, compiled_loss, contexts, input_dtype,
                      output_names, per_device, per_sample_losses, single_output, unpack_batch)
from .metrics import make_metrics
from .resume import batch_length
from .tally import Tally

__all__ = ["evaluate", "evaluate_batches"]


def _scored(loss, outputs, labels, index, name, per_sample):
    """``loss`` on one evaluation batch (None without a loss); a one-line ValueError naming
    the shapes where it cannot take them (instead of MXNet's reshape error)."""
    if loss is None:
        return None
    try:
        if per_sample:
            return per_sample_losses(loss, [single_output(out) for out in outputs], labels)
        return [loss(out, label) for out, label in zip(outputs, labels)]
    except mx.base.MXNetError:
        shapes = [getattr(a, "shape", type(a).__name__) for a in (*labels, *outputs)]
        raise ValueError(f"the loss cannot take batch {index} of {name}: labels of shape "
                         f"{shapes[:len(labels)]} with outputs of shape {shapes[len(labels):]}; pass "
                         "a loss that takes these labels, or an eval_fn that returns (outputs, "
                         "labels, losses).") from None


def _eval_batch(net, batch, index, ctx, loss, name, eval_fn, dtype):
    """(labels, outputs, losses or None, samples) of one evaluation batch."""
    if eval_fn is None:
        x, y = unpack_batch(batch, index, name)
        ys = split_and_load(y, ctx)
        outputs = [single_output(net(part), several=True) for part in split_and_load(as_dtype(x, dtype), ctx)]
        return ys, outputs, _scored(loss, outputs, ys, index, name, per_sample=True), x.shape[0]
    result = eval_fn(net, batch, ctx)
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise TypeError(f"eval_fn must return (outputs, labels) or (outputs, labels, losses), lists "
                        f"over the devices; got {type(result).__name__} for batch {index}.")
    outputs, ys, count = per_device(result[0]), per_device(result[1]), batch_length(batch)
    if len(result) == 2:
        return ys, outputs, _scored(loss, outputs, ys, index, name, per_sample=False), count
    losses = check_arrays(result[2], "losses", index, "eval_fn")
    if sum(value.size for value in losses) != count:
        raise ValueError(f"eval_fn returned {sum(v.size for v in losses)} losses for batch {index} of "
                         f"{count} samples; return one loss per sample on each device, not a mean.")
    return ys, outputs, losses, count


def evaluate_batches(net, data, ctx, metrics, loss, name, eval_fn=None):
    """The metrics (and 'loss', when there are losses) of ``net`` on every batch of the loader
    ``name``, on the devices ``ctx``; ValueError if it yields no batch."""
    tally = Tally(metrics)
    tally.reset()
    dtype, scored = input_dtype(net), None
    for index, batch in enumerate(data):
        ys, outputs, losses, count = _eval_batch(net, batch, index, ctx, loss, name, eval_fn, dtype)
        if scored is not None and scored != (losses is not None):
            raise TypeError(f"eval_fn returned losses for some batches of {name} only (not for batch "
                            f"{index}); return them for every batch or for none.")
        scored = losses is not None
        tally.add(ys, outputs, losses, count)
    logs = tally.values(loss=bool(scored))
    if not tally.samples:
        raise ValueError(f"{name} yielded no batches; pass a non-empty loader (a generator "
                         "is exhausted after one pass: use a gluon.data.DataLoader).")
    return logs


def evaluate(net, data, *, ctx=None, metrics="acc", loss=None, eval_fn=None):
    """Evaluate ``net`` on every batch of ``data`` (prediction mode, no gradients).

    Parameters
    ----------
    net : Block
    data : iterable of (data, label), or of any batch ``eval_fn`` takes
        E.g. a ``gluon.data.DataLoader``.
    ctx : Context or list of Context, optional
        Defaults to the contexts of the network's parameters.
    metrics : str, EvalMetric, list of them, or per output, default 'acc'
        Accuracy-type metrics see class indices also for one-hot labels; a metric whose
        ``update`` takes more fields (GluonCV's ``VOC07MApMetric``) gets
        ``update(*output_fields, *label_fields)`` (see ``gluonkit.train.metrics``). Per
        output, as Keras takes them: ``{output: metrics}`` (a position, a key of each
        device's dict of outputs, or a ``Branches`` head's name) or a list of lists, one per
        output position; results are named ``<output>_<metric>``.
    loss : gluon.loss.Loss, optional
        Also report the mean per-sample loss under 'loss'.
    eval_fn : callable, optional
        ``eval_fn(net, batch, ctx_list) -> (outputs, labels[, losses])``, lists with one entry
        per device (an array, or a tuple of arrays; a bare array is one device's), for batches
        that are not (data, label). ``losses``, one loss per sample on each device, give
        'loss' (their mean) instead of ``loss``.

    Returns
    -------
    dict
        Metric name -> value, e.g. ``{'accuracy': 0.97}``.

    Example::

        >>> evaluate(net, test_loader)["accuracy"]
        0.9721
    """
    check_hook(eval_fn, "eval_fn")
    return evaluate_batches(net, data, contexts(ctx, net), make_metrics(metrics, output_names(net)), compiled_loss(loss),
                     "data", eval_fn)
