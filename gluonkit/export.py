"""Export a trained network for inference in a process that never imports gluonkit.

:func:`export_model` writes three files beside each other::

    PREFIX-symbol.json     the graph (MXNet's symbol format)
    PREFIX-0000.params     its parameters ('arg:NAME' / 'aux:NAME', as HybridBlock.export)
    PREFIX.json            what the graph needs around it: input name and shape, the
                           preprocessing of an image file, and each output's class names

The first two load with ``gluon.SymbolBlock.imports(PREFIX + '-symbol.json', ['data'],
PREFIX + '-0000.params')`` or ``mx.mod.Module`` (no labels); ``gluonkit.predict`` reads all three.
"""
import json
import os

import mxnet as mx

from ._atomic import atomic_replace
from ._validate import is_int, non_negative_int
from .nn._views import flatten

__all__ = ["export_model", "read_metadata", "FORMAT"]

#: Version of the metadata file's layout.
FORMAT = 1
_DATA = "data"


def _saved(arrays, path):
    """A writer of ``arrays`` in MXNet's format (``mx.nd.save`` takes a path: the open file's).

    A failed write (a full disk) raises ``OSError`` naming ``path``.
    """
    def write(f):
        try:
            mx.nd.save(f.name, arrays)
        except mx.base.MXNetError as err:   # how mx.nd.save reports a failed write
            raise OSError(f"cannot write {path}: {str(err).strip().splitlines()[-1]}; check the "
                          "free space and permissions of its directory.") from None
    return write


def _outputs(outputs, count):
    """The ``outputs`` metadata: a list of ``{'name', 'classes'}``, one per network output."""
    if outputs is None:
        return [{"name": f"output{i}", "classes": None} for i in range(count)]
    if isinstance(outputs, dict):
        outputs = [{"name": str(name), "classes": None if classes is None else
                    [str(c) for c in classes]} for name, classes in outputs.items()]
    else:   # the class names of the single output
        outputs = [{"name": "class", "classes": [str(c) for c in outputs]}]
    if len(outputs) != count:
        raise ValueError(f"outputs names {len(outputs)} output(s) but the network has {count}; "
                         "pass one entry per output (a dict name -> class names).")
    return outputs


def export_model(net, prefix, input_shape, outputs=None, preprocessing=None, epoch=0, **extra):
    """Write ``net`` as a symbol, its parameters and a metadata file, for inference.

    Parameters
    ----------
    net : HybridBlock
        The trained network, initialized (hybridized or not; a ``ShapeCache`` too). Where a
        parameter has copies on several devices, the file holds their mean (BatchNorm running
        statistics differ per device; the weights are equal), as ``save_parameters`` does.
    prefix : str or path-like
        Path prefix of the files, e.g. ``'runs/classify/model'``.
    input_shape : tuple of int
        One sample's shape, e.g. ``(3, 224, 224)``: the network is run on a batch of one of
        it (a check that the export works) and it is stored for ``mx.mod.Module.bind``.
    outputs : list or dict, optional
        The class names of a single-output classifier (a list), or a dict output name ->
        class names (None for an output that is not a classification) in output order;
        nested outputs (nested ``Branches``) count in their flattened order.
    preprocessing : dict, optional
        How an image file becomes the input (stored as is; see ``gluonkit.predict``).
    epoch : int
        The number in the parameter file's name.
    **extra
        More JSON-serializable entries for the metadata file (e.g. ``task='detect'``).

    Returns
    -------
    dict
        The metadata written to ``PREFIX.json``, with the three file paths under 'files'.

    Example::

        >>> export_model(net, "out/model", (1, 8, 8), outputs=list("0123456789"))
    """
    if not isinstance(net, mx.gluon.HybridBlock):
        raise TypeError(f"export_model needs a HybridBlock (a graph can be traced from it), "
                        f"got {type(net).__name__}.")
    epoch = non_negative_int(epoch, "epoch")
    prefix = os.fspath(prefix)
    if not os.path.basename(prefix):
        raise ValueError(f"prefix {prefix!r} names a directory; pass a path prefix for the files, "
                         f"e.g. {os.path.join(prefix, 'model')!r}.")
    if not isinstance(input_shape, (tuple, list)) or not all(is_int(n) for n in input_shape):
        raise TypeError(f"input_shape must be one sample's shape as a tuple of ints, e.g. "
                        f"(3, 224, 224), got {input_shape!r}.")
    shape = tuple(int(n) for n in input_shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"input_shape must be one sample's shape of positive sizes, e.g. "
                         f"(3, 224, 224), got {input_shape!r}.")
    params = net.collect_params()
    ctx = params.list_ctx()[0] if params else mx.cpu()
    try:
        probe = net(mx.nd.zeros((1,) + shape, ctx=ctx))    # fails early on a wrong shape
    except mx.base.MXNetError as err:
        raise ValueError(f"the network cannot run on a sample of input_shape {shape} "
                         f"({str(err).strip().splitlines()[-1]}); pass the shape of one sample "
                         "it takes, without the batch axis.") from None
    count = len(flatten(probe))          # nested outputs (nested Branches) in order, as the graph
    metadata = {"format": FORMAT, "input": {"name": _DATA, "shape": list(shape)},
                "outputs": _outputs(outputs, count), "preprocessing": preprocessing, **extra}
    json.dumps(metadata)                                    # serializable, before any file is written

    symbol = net(mx.sym.var(_DATA))
    if isinstance(symbol, (list, tuple)):
        symbol = mx.sym.Group(flatten(symbol))
    aux_names = set(symbol.list_auxiliary_states())
    arg_names = set(symbol.list_arguments())
    arrays = {}
    for param in params.values():
        if param.name not in aux_names | arg_names:
            continue                                        # a parameter this graph does not use
        copies = param.list_data()
        mean = sum(c.as_in_context(mx.cpu()) for c in copies) / len(copies)
        arrays[("aux:" if param.name in aux_names else "arg:") + param.name] = mean
    missing = sorted(arg_names - {_DATA} - {k[4:] for k in arrays})
    if missing:
        raise ValueError(f"the traced graph has inputs other than {_DATA!r} that are not "
                         f"parameters: {missing}; export a network that takes one input.")

    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    files = {"symbol": f"{prefix}-symbol.json", "params": f"{prefix}-{epoch:04d}.params",
             "metadata": f"{prefix}.json"}
    names = metadata["files"] = {k: os.path.basename(v) for k, v in files.items()}
    text = {"symbol": symbol.tojson(), "metadata": json.dumps(metadata, indent=1) + "\n"}
    # all three written before any replaces its predecessor: never a mix of two exports
    atomic_replace(os.path.dirname(os.path.abspath(prefix)), {
        names["params"]: _saved(arrays, files["params"]),
        names["symbol"]: lambda f: f.write(text["symbol"].encode()),
        names["metadata"]: lambda f: f.write(text["metadata"].encode())})
    return dict(metadata, files=files)


def read_metadata(prefix):
    """The metadata that :func:`export_model` wrote to ``PREFIX.json`` (a dict)."""
    path = f"{prefix}.json"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist; pass the prefix given to export_model "
                                "(the path without -symbol.json), e.g. runs/classify/model.")
    with open(path) as f:
        metadata = json.load(f)
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path} has format {metadata.get('format')!r}; this gluonkit reads "
                         f"format {FORMAT}.")
    return metadata
