"""Frozen BatchNorm: normalize with the running statistics, in training too, with exact gradients.

With one or two images per device, batch statistics are noise; detection and segmentation
networks fine-tuned that way keep their BatchNorm layers on the running statistics. Wrapping
the forward in ``autograd.predict_mode()`` is not the way: in MXNet 1.9.1 the input gradient
of a BatchNorm computed in prediction mode is wrong (0.55 off the analytic
gamma / sqrt(var + eps) on a 4-channel layer). The operator's own ``use_global_stats=True``
gives the exact gradient; ``freeze_batchnorm`` sets it on every BatchNorm layer of a block.

``declare_norm_init`` gives the normalization parameters of layers built as a symbol graph
(a ``SymbolBlock``, e.g. GluonCV's SSD feature expander) the initializers Gluon's own layers
declare; without it ``initialize()`` fills their running variance with the default
initializer's random values, negative for half of them.
"""
from mxnet import gluon
from mxnet.gluon.nn.basic_layers import _BatchNorm

from ..names import select

__all__ = ["freeze_batchnorm", "check_sync_batchnorm", "declare_norm_init"]

# MXNet's symbolic rule (``Initializer.__call__`` on a name without ``__init__``), which Gluon
# bypasses: it hands every parameter without ``init`` to the default initializer
_NORM_INIT = {"gamma": "ones", "beta": "zeros", "running_mean": "zeros", "moving_mean": "zeros",
              "running_var": "ones", "moving_var": "ones"}


def _batchnorms(block):
    """(structural name, layer) of every BatchNorm-type layer (SyncBatchNorm too) in ``block``."""
    layers = []
    block.apply(lambda b: layers.append(b) if isinstance(b, _BatchNorm) else None)
    names = {param: name for name, param in select(block).items()}
    return [(names[layer.gamma].rpartition(".")[0], layer) for layer in layers]


def _drop_cached_graph(block):
    # no public route: hybridize() would also reset the block's own flags
    if isinstance(block, gluon.HybridBlock):
        block._clear_cached_op()


def freeze_batchnorm(block, affine=False):
    """Make every BatchNorm layer of ``block`` normalize with its running statistics.

    The layers get ``use_global_stats=True``: their running mean and variance are used in
    training as in prediction, and kept (MXNet blends them with themselves, a float32
    rounding at most), and the input gradient is exact. Cached
    graphs of ``block`` and of the blocks in it (routes of a ``Branches`` and the graphs of a
    ``ShapeCache`` too) are dropped, so the change takes effect at the next forward. A block
    does not know the blocks that contain it: after ``freeze_batchnorm(net.features)`` on a
    hybridized ``net`` that has run, call ``net.hybridize()`` again (or freeze through
    ``net``) so that ``net``'s own graph is rebuilt too.

    Parameters
    ----------
    block : Block
    affine : bool, default False
        Also freeze the layers' gamma and beta (``grad_req='null'``); by default they train.

    Returns
    -------
    list of str
        The structural names of the layers frozen ('' for ``block`` itself).

    Example::

        >>> net = gluoncv.model_zoo.get_model('resnet18_v1b', pretrained=False)
        >>> len(freeze_batchnorm(net))
        20
    """
    if not isinstance(block, gluon.Block):
        raise TypeError(f"freeze_batchnorm takes a gluon Block, got {type(block).__name__}.")
    layers = _batchnorms(block)
    for _, layer in layers:
        layer._kwargs["use_global_stats"] = True
        if affine:
            for param in (layer.gamma, layer.beta):
                param.grad_req = "null"
    block.apply(_drop_cached_graph)
    return [name for name, _ in layers]


def check_sync_batchnorm(block, ctx):
    """Refuse the SyncBatchNorm layers of ``block`` that would hang training over ``ctx``.

    A SyncBatchNorm layer that computes batch statistics (not frozen) waits in its forward
    pass until ``num_devices`` devices have arrived. So it hangs when ``num_devices`` is not
    the number of devices trained on, and, in MXNet 1.9.1, on several CPU devices as soon as
    other layers surround it. Frozen layers (``freeze_batchnorm``) do not synchronize.

    Parameters
    ----------
    block : Block
    ctx : list of Context
        The devices each batch is split over.

    Returns
    -------
    bool
        True if ``block`` has SyncBatchNorm layers that synchronize: every batch must then
        give every device a slice.

    Raises
    ------
    ValueError
        If a layer's ``num_devices`` is not ``len(ctx)``, or ``ctx`` holds several CPU devices.
    """
    syncing = [(name, layer._kwargs["ndev"]) for name, layer in _batchnorms(block)
               if isinstance(layer, gluon.contrib.nn.SyncBatchNorm)
               and not layer._kwargs["use_global_stats"]]
    if not syncing:
        return False
    wrong = [f"{name or 'the block'} (num_devices={ndev})" for name, ndev in syncing if ndev != len(ctx)]
    if wrong:
        raise ValueError(f"SyncBatchNorm layer(s) {', '.join(wrong)} wait for that many devices, but "
                         f"training runs on {len(ctx)} ({ctx}): the forward pass would hang. Build "
                         f"them with num_devices={len(ctx)} (GluonCV: norm_kwargs={{'num_devices': "
                         f"{len(ctx)}}}).")
    if len(ctx) > 1 and any(c.device_type == "cpu" for c in ctx):
        raise ValueError(f"SyncBatchNorm layer(s) {', '.join(name or 'the block' for name, _ in syncing)} "
                         f"cannot train on several CPU devices ({ctx}): MXNet 1.9.1 hangs in their "
                         "forward or backward pass there. Use them on GPUs; on CPU devices use "
                         "BatchNorm, or freeze them with gluonkit.nn.freeze_batchnorm(net).")
    return True


def declare_norm_init(block):
    """Give ``block``'s normalization parameters that declare no initializer Gluon's defaults.

    Gluon's layers declare theirs (BatchNorm: gamma ones, beta zeros, running mean zeros,
    running variance ones), and ``initialize(init)`` keeps them. The parameters of a layer
    built as a symbol graph (``SymbolBlock``; GluonCV's SSD extra layers, ``FeatureExpander``)
    declare none, so ``initialize`` fills them with ``init`` (by default ``Uniform(0.07)``):
    a negative running variance that MXNet survives by chance and onnxruntime turns into NaN.
    This gives every parameter without ``init`` whose name ends in
    gamma, beta, running_mean / moving_mean or running_var / moving_var the initializer
    MXNet's symbolic rule gives such names (ones, zeros, zeros, ones). Call it before
    ``initialize``.

    Parameters
    ----------
    block : Block

    Returns
    -------
    list of str
        The names of the parameters given an initializer.

    Example::

        >>> net = gluoncv.model_zoo.get_model('ssd_300_mobilenet0.25_custom', classes=['a'],
        ...                                   pretrained_base=False)
        >>> len(declare_norm_init(net))
        32
        >>> net.initialize()
    """
    if not isinstance(block, gluon.Block):
        raise TypeError(f"declare_norm_init takes a gluon Block, got {type(block).__name__}.")
    declared = []
    for name, param in block.collect_params().items():
        suffix = next((s for s in _NORM_INIT if name.endswith("_" + s)), None)
        if suffix and param.init is None:
            param.init = _NORM_INIT[suffix]
            declared.append(name)
    return declared
