"""What ``fit`` and ``evaluate`` do with a batch: check it, cast and split it over the devices,
and run the network and the loss on each part.

The checks name the batch and the fix (a batch that is not ``(data, label)``, a loss that
returns a mean, a network of several outputs where one is taken).
"""
import mxnet as mx
import numpy as np
from mxnet import gluon

from ..validate import context_list

__all__ = ["contexts", "unpack_batch", "input_dtype", "as_dtype", "LossGraph", "compiled_loss",
           "per_sample_losses", "single_output", "check_arrays", "per_device", "output_names",
           "check_hook"]


def contexts(ctx, net):
    """The devices to run on: ``ctx`` as a list, else those of the network's parameters."""
    if ctx is not None:
        return context_list(ctx)
    params = list(net.collect_params().values())
    if not params:
        return [mx.current_context()]
    try:
        return params[0].list_ctx()
    except RuntimeError as err:
        raise ValueError(f"The network is not initialized ({err}); call "
                         "net.initialize(ctx=...) before fit.") from err


def unpack_batch(batch, index, name):
    """``(data, label)`` of batch ``index`` of the loader ``name``; TypeError or ValueError
    naming the batch if it is not a pair of arrays of one batch size."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        kind = type(batch).__name__
        size = f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else ""
        raise TypeError(f"{name} must yield (data, label) pairs, but batch {index} is a {kind}{size}; "
                        "build it from gluon.data.ArrayDataset(data, label) or a dataset whose "
                        "samples are (data, label).")
    data, label = batch
    if not (hasattr(data, "shape") and hasattr(label, "shape")):
        raise TypeError(f"Batch {index} of {name} holds {type(data).__name__} and "
                        f"{type(label).__name__}; data and label must be NDArrays or numpy arrays.")
    if data.shape[0] != label.shape[0]:
        raise ValueError(f"Batch {index} of {name} has {data.shape[0]} samples of data but "
                         f"{label.shape[0]} labels; data and label must have the same batch size.")
    return data, label


def input_dtype(net):
    """The dtype of the network's first floating-point parameter (None if it has none)."""
    for param in net.collect_params().values():
        if param.dtype is not None and np.issubdtype(np.dtype(param.dtype), np.floating):
            return np.dtype(param.dtype)
    return None


def as_dtype(data, dtype):
    """Floating-point data of another precision than the network's, cast to the network's."""
    if dtype is None or not np.issubdtype(np.dtype(data.dtype), np.floating) or data.dtype == dtype:
        return data
    return data.astype(dtype)


class LossGraph(gluon.HybridBlock):
    """A loss of ``mxnet.gluon.loss`` run as one cached graph with static memory.

    Imperatively such a loss is a few operators, each a host round trip and a node for
    backward to visit; hybridized it is one. The caller's loss block is left as it was: it
    becomes this block's child only after this block is hybridized (``hybridize`` would pass
    to it), and is traced inside this block's graph.
    """

    def __init__(self, loss):
        super().__init__()
        self.hybridize(static_alloc=True)
        self.loss = loss

    def hybrid_forward(self, F, output, label):
        return self.loss(output, label)


def compiled_loss(loss):
    """A built-in gluon loss as a ``LossGraph``; any other loss (or None) as it is."""
    if loss is None or type(loss).__module__ != gluon.loss.__name__:
        return loss
    return LossGraph(loss)


def per_sample_losses(loss, outputs, ys):
    """``loss`` on each device's outputs; ValueError if it returns a mean, not one per sample."""
    losses = [loss(out, y) for out, y in zip(outputs, ys)]
    for y, value in zip(ys, losses):
        if value.ndim == 0 or value.shape[0] != y.shape[0]:
            raise ValueError(f"loss returned shape {value.shape} for {y.shape[0]} samples; it must "
                             "return one value per sample (gluon.loss losses do), not a mean.")
    return losses


def single_output(out, several=False):
    """The network's output with a 1-tuple unwrapped (a ``Branches`` with one head returns
    one); several outputs are a TypeError unless ``several`` (metrics that take fields)."""
    if not isinstance(out, (tuple, list)) or several and len(out) != 1:
        return out
    if len(out) != 1:
        raise TypeError(f"the network returned {len(out)} outputs, and fit's loss takes one; train "
                        "a network of several outputs with a batch_fn (docs/fit.md), or one of "
                        "a Branches network's heads through net.route(name).")
    return out[0]


def check_arrays(value, what, index, fn="batch_fn"):
    """``value`` that the hook ``fn`` returned for batch ``index`` as a list of NDArrays, one
    per device; TypeError naming it otherwise."""
    items = per_device(value)
    if not isinstance(items, (list, tuple)) or not items or not all(
            isinstance(v, mx.nd.NDArray) for v in items):
        raise TypeError(f"{fn} returned {what} {value!r} for batch {index}; return a non-empty "
                        "list of NDArrays, one per device.")
    return list(items)


def per_device(value):
    """Outputs or labels as a list over the devices: a bare NDArray is one device's."""
    return [value] if isinstance(value, mx.nd.NDArray) else value


def output_names(net):
    """The names of the network's outputs in order (a ``Branches`` network's heads), or None."""
    names = getattr(net, "names", None)
    return names if isinstance(names, tuple) and all(isinstance(n, str) for n in names) else None


def check_hook(fn, name):
    """TypeError if the hook ``name`` (``batch_fn``, ``eval_fn``) is neither a function nor None."""
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be a function of (net, batch, ctx_list) or None, got {fn!r}.")
