"""The network a benchmark trains: a GluonCV model-zoo name, ``module:callable``, or an export.

A network is described by a spec (a JSON-serializable dict, the same in every process):

- ``{"source": "zoo", "name": "resnet18_v1b", "args": {...}}``: ``gluoncv.model_zoo.get_model``
  with ``pretrained=False`` and ``classes``;
- ``{"source": "callable", "name": "mypkg.nets:two_branch_cnn", "args": {...}}``: the callable
  called with ``args`` (and ``classes=`` when it takes that keyword and ``args`` does not set
  it), returning a ``gluon.Block``;
- ``{"source": "exported", "symbol": "net-symbol.json", "params": "net-0000.params"}``: the
  export as a ``gluon.SymbolBlock`` (its weights from ``params``, or initialized without one).

:func:`probe` builds the network once and runs a forward pass on two samples, so that a
network, an input shape or a class count that cannot work is refused before anything is
measured.
"""
import importlib
import inspect
import os

__all__ = ["LOSSES", "network_spec", "build_network", "initialize", "label_shape", "probe", "NetworkError"]

#: --loss: the Gluon loss, and what the labels are ('classes': one index per sample;
#: 'output': an array of the output's shape)
LOSSES = {"softmax": ("SoftmaxCrossEntropyLoss", "classes"),
          "l2": ("L2Loss", "output"),
          "sigmoid": ("SigmoidBinaryCrossEntropyLoss", "output")}
_SYMBOL_SUFFIX = "-symbol.json"


class NetworkError(ValueError):
    """A network that cannot be built or run on the given inputs (the message names the option)."""


def network_spec(net, params=None, net_args=None):
    """The spec of ``--net NET`` (with ``--params`` and ``--net-args``, a dict); NetworkError
    when ``net`` is none of the three forms."""
    args = dict(net_args or {})
    if net.endswith(_SYMBOL_SUFFIX):
        if net_args:
            raise NetworkError(f"--net-args does not apply to an exported network ({net}).")
        for path, option in ((net, "--net"), (params, "--params")):
            if path is not None and not os.path.isfile(path):
                raise NetworkError(f"{option} {path}: no such file.")
        return {"source": "exported", "symbol": os.path.abspath(net),
                "params": os.path.abspath(params) if params else None}
    if params is not None:
        raise NetworkError(f"--params applies to an exported network (--net NAME{_SYMBOL_SUFFIX}), "
                           f"not to --net {net}.")
    if ":" in net:
        return {"source": "callable", "name": net, "args": args}
    from gluoncv.model_zoo import get_model_list

    if net.lower() not in get_model_list():
        raise NetworkError(f"--net {net}: not a GluonCV model-zoo name (gluoncv.model_zoo."
                           f"get_model_list()), a module:callable, or a file ending in {_SYMBOL_SUFFIX}.")
    return {"source": "zoo", "name": net.lower(), "args": args}


def _callable(name):
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise NetworkError(f"--net {name}: cannot import {module_name!r} ({err}); put its folder on "
                           "PYTHONPATH or run from it.") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise NetworkError(f"--net {name}: {module_name} has no callable {attribute!r}.")
    return function


def _takes(function, keyword):
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return keyword in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _exported(spec):
    import mxnet as mx
    from mxnet import gluon

    symbol = mx.sym.load(spec["symbol"])
    saved = set()
    if spec["params"]:
        saved = {key.split(":", 1)[-1] for key in mx.nd.load(spec["params"])}
    arguments = symbol.list_inputs()
    if saved:
        inputs = [name for name in arguments if name not in saved]
    else:   # what Block.export names the inputs: data, or data0, data1, ...
        inputs = [name for name in arguments if name == "data" or (name[:4] == "data" and name[4:].isdigit())]
    block = gluon.SymbolBlock(symbol, [mx.sym.var(name) for name in inputs])
    if spec["params"]:
        block.collect_params().load(spec["params"], ctx=mx.cpu(), allow_missing=False, ignore_extra=True)
    return block


def build_network(spec, classes):
    """The network of ``spec`` (not initialized, except an export's loaded weights)."""
    from mxnet import gluon

    if spec["source"] == "zoo":
        from gluoncv.model_zoo import get_model

        return get_model(spec["name"], pretrained=False, **dict({"classes": classes}, **spec["args"]))
    if spec["source"] == "exported":
        return _exported(spec)
    function = _callable(spec["name"])
    args = dict(spec["args"])
    if "classes" not in args and _takes(function, "classes"):
        args["classes"] = classes
    try:
        net = function(**args)
    except TypeError as err:
        raise NetworkError(f"--net {spec['name']} refused --net-args {args}: {err}") from None
    if not isinstance(net, gluon.Block):
        raise NetworkError(f"--net {spec['name']} returned a {type(net).__name__}, not a gluon.Block.")
    return net


def initialize(net, spec, ctx):
    """Initialize ``net`` on the contexts ``ctx`` (Xavier), or move an export's loaded weights there."""
    import mxnet as mx

    if spec["source"] == "exported" and spec["params"]:
        net.collect_params().reset_ctx(ctx)
        return
    if spec["source"] == "exported":   # an export's parameters carry no initializer of their own
        for name, param in net.collect_params().items():
            if name.endswith(("gamma", "var")):
                param.init = mx.init.One()
            elif name.endswith(("beta", "bias", "mean")):
                param.init = mx.init.Zero()
    net.initialize(mx.init.Xavier(), ctx=ctx)


def label_shape(loss, output_shape):
    """The shape of one sample's label for ``loss`` (a key of LOSSES)."""
    return [] if LOSSES[loss][1] == "classes" else list(output_shape[1:])


def probe(spec, input_shapes, classes, loss):
    """Build the network on the CPU and run two samples through it; return the shape of one
    sample's label and whether the network is a HybridBlock. NetworkError (naming the option
    to change) when it cannot train so."""
    import mxnet as mx
    from mxnet import gluon

    net = build_network(spec, classes)
    initialize(net, spec, [mx.cpu()])
    inputs = [mx.nd.zeros([2] + list(shape)) for shape in input_shapes]
    shapes = " ".join(",".join(map(str, s)) for s in input_shapes)
    try:
        output = net(*inputs)
        mx.nd.waitall()
    except (mx.MXNetError, ValueError, TypeError, AssertionError, IndexError) as err:
        kind = type(err).__name__
        raise NetworkError(f"--input-shape {shapes}: the network's forward pass fails on {len(inputs)} "
                           f"input(s) of these shapes ({kind}); give one --input-shape C,H,W per input "
                           "of the network.") from None
    if not isinstance(output, mx.nd.NDArray):
        raise NetworkError(f"--net: the network returns {type(output).__name__} of "
                           f"{len(output) if isinstance(output, (list, tuple)) else 1} outputs; "
                           "gluonkit-bench trains networks of one output.")
    if LOSSES[loss][1] == "classes" and (output.ndim != 2 or output.shape[1] != classes):
        raise NetworkError(f"--classes {classes}: the network's output has shape {output.shape[1:]} per "
                           f"sample, not ({classes},); pass --classes {output.shape[1]}"
                           if output.ndim == 2 else
                           f"--loss {loss} needs an output of (batch, classes); this network's is "
                           f"{output.shape}: use --loss l2.")
    return label_shape(loss, output.shape), isinstance(net, gluon.HybridBlock)

