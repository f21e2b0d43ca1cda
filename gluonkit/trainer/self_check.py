"""``check_accumulation``: does accumulating micro-batches update a network like one large batch?

Users run it on their own network, loss and one batch: the batch is stepped once as a whole
with plain ``gluon.Trainer`` (the loss summed and divided by its count, or by each head's
count) and once split into uneven micro-batches over the given devices with
``gluonkit.Trainer``; the report gives, per parameter, the largest difference between the
two updated values, and names what is known to differ (BatchNorm, Dropout).
"""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from ..names import first_names
from ..params import select
from ..validate import context_list, positive_int
from .trainer import Trainer

__all__ = ["AccumulationReport", "check_accumulation"]

_DEFAULT_OPTIMIZER = {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}


class AccumulationReport:
    """What ``check_accumulation`` found.

    Attributes
    ----------
    differences : dict
        Parameter name -> the largest absolute difference between its value after the
        accumulated update and after the large-batch update.
    updates : dict
        Parameter name -> the largest absolute change the large-batch update made (the scale
        the differences compare with).
    batchnorm : tuple of str
        The parameters of BatchNorm layers: those normalize each micro-batch (and each
        device's share) by its own statistics, so with them every parameter before them
        differs too (docs/trainer.md, "BatchNorm and accumulation").
    dropout : bool
        Whether the network has Dropout, whose random masks differ between the two runs.
    """

    def __init__(self, differences, updates, batchnorm, dropout, sizes):
        self.differences, self.updates = differences, updates
        self.batchnorm, self.dropout, self.sizes = batchnorm, dropout, sizes

    @property
    def largest(self):
        """float: The largest difference over every parameter."""
        return max(self.differences.values(), default=0.0)

    def __str__(self):
        width = max((len(name) for name in self.differences), default=9)
        lines = [f"micro-batches of {', '.join(map(str, self.sizes))} samples against one batch of "
                 f"{sum(self.sizes)}",
                 f"{'parameter':<{width}}  {'difference':>10}  {'update':>10}"]
        for name, difference in self.differences.items():
            note = "  BatchNorm: normalizes each micro-batch by its own statistics" if name in self.batchnorm else ""
            lines.append(f"{name:<{width}}  {difference:10.3g}  {self.updates[name]:10.3g}{note}")
        if self.batchnorm:
            lines.append("The network has BatchNorm, the known exception: the parameters its gradient passes through differ too; "
                         "freeze it (gluonkit.nn.freeze_batchnorm) for an exact check.")
        if self.dropout:
            lines.append("The network has Dropout: its random masks differ between the two runs.")
        lines.append(f"largest difference: {self.largest:.3g}")
        return "\n".join(lines)


def _uneven_sizes(n, parts):
    """``parts`` sizes >= 1 adding up to ``n``, growing from the first (1, 2, 3, ... in proportion)."""
    weights = np.arange(1, parts + 1, dtype="float64")
    sizes = np.maximum(1, np.floor(weights / weights.sum() * n)).astype(int)
    sizes[-1] = n - sizes[:-1].sum()
    return [int(s) for s in sizes]


def _as_arrays(batch):
    arrays = list(batch) if isinstance(batch, (list, tuple)) else [batch]
    arrays = [a if isinstance(a, mx.nd.NDArray) else mx.nd.array(a) for a in arrays]
    lengths = {a.shape[0] for a in arrays}
    if len(lengths) != 1:
        raise ValueError(f"check_accumulation splits the batch's arrays along their first axis, but their "
                         f"lengths differ ({sorted(lengths)}); give arrays of one sample per row.")
    return arrays, lengths.pop()


def _loss(result, counts):
    """The large-batch loss: the losses summed, divided by ``counts`` (a number, or by head)."""
    if isinstance(result, dict):
        terms = [result[h].sum() / counts[h] for h in result if counts[h] > 0]
        return mx.nd.add_n(*terms) if len(terms) > 1 else terms[0]
    return result.sum() / counts


def _known_exceptions(net, names):
    """``(batchnorm parameter names, has dropout)``."""
    found = {"batchnorm": [], "dropout": False}

    def visit(block):
        if isinstance(block, (gluon.nn.BatchNorm, gluon.contrib.nn.SyncBatchNorm)):
            found["batchnorm"] += [p for p in block.collect_params().values()]
        found["dropout"] = found["dropout"] or isinstance(block, gluon.nn.Dropout)

    net.apply(visit)
    batchnorm = {id(p) for p in found["batchnorm"]}
    return tuple(name for name, p in names.items() if id(p) in batchnorm), found["dropout"]


def check_accumulation(net, loss_fn, batch, ctx_list=None, accumulate=3, count_fn=None, optimizer="sgd",
                       optimizer_params=None):
    """Compare one accumulated update with the large-batch update, per parameter.

    ``batch`` is split into ``accumulate`` micro-batches of uneven sizes, each split over
    ``ctx_list`` (unevenly where it does not divide), and stepped with ``gluonkit.Trainer``;
    the same batch is stepped whole on the first device with ``gluon.Trainer``, the loss summed
    and divided by the batch's count. The network is left as it was (its values, contexts and
    ``grad_req``).

    Parameters
    ----------
    net : Block
        Initialized (run once on a batch, for deferred shapes).
    loss_fn : callable
        ``loss_fn(net, *arrays)`` on a slice of the batch (on one device): the per-sample
        losses (an NDArray of one value per sample, not averaged), or a dict of them by head.
    batch : NDArray, numpy array, or tuple of them
        One sample per row in every array (data and labels).
    ctx_list : list of Context, default [cpu(0), cpu(1)]
    accumulate : int, default 3
        Micro-batches; the batch needs at least that many samples.
    count_fn : callable, optional
        ``count_fn(*arrays) -> {head: count}`` for losses by head (required with them); by
        default the count is the number of samples.
    optimizer, optimizer_params :
        As for ``gluon.Trainer``; by default SGD with momentum and weight decay.

    Returns
    -------
    AccumulationReport
        ``print(report)`` gives the table; ``report.largest`` the largest difference.

    Example::

        report = gluonkit.check_accumulation(net, lambda net, x, y: loss_fn(net(x), y), (x, y))
        print(report)
    """
    ctx_list = context_list([mx.cpu(0), mx.cpu(1)] if ctx_list is None else ctx_list, "ctx_list")
    accumulate = positive_int(accumulate, "accumulate", "micro-batches")
    arrays, n = _as_arrays(batch)
    if n < accumulate:
        raise ValueError(f"check_accumulation needs at least accumulate={accumulate} samples to split, the "
                         f"batch has {n}; give a larger batch or a smaller accumulate.")
    names = first_names(select(net))
    waiting = [name for name, p in names.items() if p._data is None]
    if waiting:
        raise ValueError(f"check_accumulation needs an initialized network; {', '.join(waiting)} wait for "
                         "deferred initialization: run the network once on a batch first.")
    if optimizer_params is None and optimizer == "sgd":
        optimizer_params = dict(_DEFAULT_OPTIMIZER)
    original_ctx = next(iter(names.values())).list_ctx()
    original = {name: p.data(original_ctx[0]).copy() for name, p in names.items()}
    grad_reqs = {name: p.grad_req for name, p in names.items()}
    sizes = _uneven_sizes(n, accumulate)
    try:
        _move(names, ctx_list[:1])
        reference = _large_batch(net, names, loss_fn, arrays, count_fn, optimizer, optimizer_params)
        _restore(names, original, grad_reqs)
        _move(names, ctx_list)
        _accumulated(net, loss_fn, arrays, sizes, ctx_list, count_fn, optimizer, optimizer_params)
        accumulated = {name: p.data(ctx_list[0]).asnumpy() for name, p in names.items()}
    finally:
        _move(names, original_ctx)
        _restore(names, original, grad_reqs)
    start = {name: value.asnumpy() for name, value in original.items()}
    differences = {name: float(np.abs(accumulated[name] - reference[name]).max(initial=0)) for name in names}
    updates = {name: float(np.abs(reference[name] - start[name]).max(initial=0)) for name in names}
    batchnorm, dropout = _known_exceptions(net, names)
    return AccumulationReport(differences, updates, batchnorm, dropout, sizes)


def _counts(arrays, count_fn):
    return count_fn(*arrays) if count_fn is not None else arrays[0].shape[0]


def _large_batch(net, names, loss_fn, arrays, count_fn, optimizer, optimizer_params):
    """The values after one plain ``gluon.Trainer`` step on the whole batch, by name."""
    ctx = next(iter(names.values())).list_ctx()[0]
    trainer = gluon.Trainer(list(names.values()), optimizer, optimizer_params, kvstore=None)
    arrays = [a.as_in_context(ctx) for a in arrays]
    with autograd.record():
        result = loss_fn(net, *arrays)
        if isinstance(result, dict) and count_fn is None:
            raise ValueError("loss_fn returned losses by head; give count_fn(*arrays) -> {head: count} too.")
        loss = _loss(result, _counts(arrays, count_fn))
    loss.backward()
    trainer.step(1, ignore_stale_grad=True)
    return {name: p.data(ctx).asnumpy() for name, p in names.items()}


def _accumulated(net, loss_fn, arrays, sizes, ctx_list, count_fn, optimizer, optimizer_params):
    """One ``gluonkit.Trainer`` update over uneven micro-batches split over ``ctx_list``."""
    trainer = Trainer(net, optimizer, optimizer_params, accumulate=len(sizes))
    bounds = np.cumsum([0] + sizes)
    micro = [[a[int(lo):int(hi)] for a in arrays] for lo, hi in zip(bounds[:-1], bounds[1:])]
    by_head = count_fn is not None
    if by_head:
        counts = [count_fn(*part) for part in micro]
        trainer.begin_window({h: sum(c[h] for c in counts) for h in counts[0]})
    for part in micro:
        shares = [idx for idx in np.array_split(np.arange(part[0].shape[0]), len(ctx_list)) if len(idx)]
        with autograd.record():
            losses = []
            for idx, ctx in zip(shares, ctx_list):
                piece = [a[int(idx[0]):int(idx[-1]) + 1].as_in_context(ctx) for a in part]
                result = loss_fn(net, *piece)
                losses.append(trainer.weigh_losses(result) if by_head else result)
        autograd.backward(losses)
        trainer.step(count_fn(*part) if by_head else part[0].shape[0], ignore_stale_grad=True)


def _move(names, ctx_list):
    for param in names.values():
        param.reset_ctx(ctx_list)


def _restore(names, values, grad_reqs):
    for name, param in names.items():
        param.set_data(values[name])
        param.grad_req = grad_reqs[name]
