"""The networks the recipes train: the built-in small CNN, or a GluonCV model-zoo network."""
import contextlib
import difflib
import io
import os

from mxnet.base import MXNetError, data_dir
from mxnet.gluon import nn
from mxnet.initializer import Xavier

from gluonkit.nn import declare_norm_init
from gluonkit.recipes.common import OptionError

__all__ = ["small_cnn", "check_model_name", "build_model", "check_input_shape", "WeightsUnavailable"]


def _conv_bn_relu(channels):
    return [nn.Conv2D(channels, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu")]


def small_cnn(classes):
    """The built-in CNN: 3x3 conv/BN/ReLU stages, one max-pool, global pooling, a dense layer.

    It takes images of any size and number of channels. Example::

        >>> net = small_cnn(10)
        >>> net.initialize()
        >>> net(mx.nd.zeros((2, 1, 8, 8))).shape
        (2, 10)
    """
    net = nn.HybridSequential()
    net.add(*_conv_bn_relu(32), *_conv_bn_relu(32), nn.MaxPool2D(2, ceil_mode=True),
            *_conv_bn_relu(64), *_conv_bn_relu(64), nn.GlobalAvgPool2D(), nn.Dense(classes))
    return net


def check_model_name(name):
    """``name`` if it is ``'cnn'`` or a GluonCV model-zoo name, else ``ValueError`` with close names."""
    if name == "cnn":
        return name
    from gluoncv import model_zoo

    names = list(model_zoo.get_model_list())
    if name not in names:
        # the names that contain it first (resnet20 -> cifar_resnet20_v1), then the look-alikes
        close = sorted((n for n in names if name.lower() in n.lower()), key=len)[:5]
        close += [n for n in difflib.get_close_matches(name, names, n=5) if n not in close]
        close = close[:5]
        raise OptionError(f"--model {name!r} is neither 'cnn' nor a GluonCV model-zoo name"
                         + (f" (close: {', '.join(close)})" if close else "")
                         + ". List them with: python -c \"import gluoncv; "
                         "print(sorted(gluoncv.model_zoo.get_model_list()))\"")
    return name


class WeightsUnavailable(FileNotFoundError, RuntimeError):
    """Pretrained weights that are not on disk and could not be downloaded: a
    ``FileNotFoundError``, which the commands print as one line (and a ``RuntimeError``, as
    this error was before it had its own type)."""


def _pretrained(name, classes, pretrained_file):
    """A model-zoo network with its pretrained weights (from ``pretrained_file`` if given) and
    a new output layer of ``classes`` outputs."""
    from gluoncv import model_zoo

    if pretrained_file:
        if not os.path.isfile(pretrained_file):
            raise FileNotFoundError(f"--pretrained-file {pretrained_file}: no such file.")
        net = model_zoo.get_model(name, pretrained=False)
        try:
            net.load_parameters(pretrained_file, ignore_extra=True)
        except (MXNetError, AssertionError, ValueError):   # MXNet's own text names no fix
            raise OptionError(f"--pretrained-file {pretrained_file} does not hold the weights of "
                              f"{name!r} (its names or shapes differ); pass a .params file saved "
                              "from this network.") from None
    else:
        root = os.path.join(data_dir(), "models")      # ~/.mxnet/models, or $MXNET_HOME's
        try:
            net = model_zoo.get_model(name, pretrained=True, root=root)
        except (OSError, ValueError, AssertionError) as err:   # no network, or no weights published
            raise WeightsUnavailable(
                f"--pretrained: the weights of {name!r} are not available ({err}). They are "
                f"downloaded to {root} on first use; offline, pass --pretrained-file "
                "PATH (a .params file of this network), or train from scratch without "
                "--pretrained.") from err
    for attr in ("output", "fc"):
        if isinstance(getattr(net, attr, None), nn.Dense):
            with net.name_scope():
                output = nn.Dense(classes)
            output.initialize(Xavier())
            setattr(net, attr, output)
            return net
    raise OptionError(f"--pretrained: cannot find the output layer of {name!r} (no Dense "
                     "'output' or 'fc') to give it the dataset's classes.")


def check_input_shape(net, name, input_shape):
    """Raise ``OptionError`` naming the model ``name`` and the image size if ``net`` cannot
    take one sample of ``input_shape`` (C, H, W): a network whose layers shrink small images
    to nothing (Inception-v3 at 32x32). Symbolic shape inference: nothing is allocated or
    initialized; a network that is not a HybridBlock is not checked."""
    import mxnet as mx

    if not isinstance(net, nn.HybridBlock):
        return
    try:
        out = net(mx.sym.var("data"))
        out = out[0] if isinstance(out, (list, tuple)) else out
        with contextlib.redirect_stdout(io.StringIO()):   # MXNet prints its arguments on failure
            out.infer_shape(data=(1,) + tuple(input_shape))
    except (MXNetError, ValueError):   # MXNet's own text names no fix
        size = "x".join(map(str, input_shape[1:]))
        raise OptionError(f"--model {name} cannot take {size} images: its layers shrink them to "
                          "nothing; pass a larger --image-size (the size it was designed for, "
                          "e.g. 299 for inceptionv3, 224 for ImageNet networks) or another "
                          "--model.") from None


def build_model(name, classes, pretrained=False, pretrained_file=None):
    """The network ``name`` ('cnn' or a GluonCV model-zoo name) with ``classes`` outputs.

    With ``pretrained`` (or a ``pretrained_file``), a model-zoo network starts from its
    pretrained weights and only its new output layer is initialized. Normalization layers
    start from Gluon's defaults whatever initializer the network is given
    (``gluonkit.nn.declare_norm_init``).
    """
    check_model_name(name)
    if name == "cnn":
        if pretrained or pretrained_file:
            raise OptionError("--pretrained needs a GluonCV model-zoo --model; 'cnn' has no "
                             "pretrained weights.")
        return small_cnn(classes)
    if pretrained or pretrained_file:
        return _pretrained(name, classes, pretrained_file)
    from gluoncv import model_zoo

    net = model_zoo.get_model(name, pretrained=False, classes=classes)
    declare_norm_init(net)       # before the recipes' initialize(Xavier()): layers built as symbols
    return net
