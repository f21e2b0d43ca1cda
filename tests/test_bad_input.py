"""A catalogue of bad input across the public API.

Each case asserts the exception type, that the message names the offending value, and that
it says what to do instead; none may surface MXNet's own C++ error text.
"""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd

import gluonkit
from gluonkit import ops
from gluonkit.launch import launch
from gluonkit import params as gparams
from gluonkit.nn import Branches

from gluonkit.recipes.models import build_model


def _net():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    return net


def _trainer(**kwargs):
    return gluonkit.Trainer(_net().collect_params(), "sgd", {"learning_rate": 0.1}, **kwargs)


def _recorded_head():
    x = nd.ones(3)
    x.attach_grad()
    with autograd.record():
        y = x * 2
    return y


@gluonkit.autograd.custom_op
def _scale(x, *, factor=1.0):
    return x * factor


@_scale.backward
def _scale_backward(dy, x, *, factor=1.0):
    return dy * factor


def _fit(train_data, epochs=1):
    net = _net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd")
    return gluonkit.fit(net, gluon.loss.L2Loss(), trainer, train_data, epochs=epochs, progress=False)


def _loader():
    data = gluon.data.ArrayDataset(np.ones((4, 4), "float32"), np.ones((4, 3), "float32"))
    return gluon.data.DataLoader(data, batch_size=2)


def _branches():
    net = Branches()
    net.add("digit", gluon.nn.Dense(10))
    net.add("parity", gluon.nn.Dense(2))
    return net


def _file(tmp_path, name, write):
    path = os.path.join(tmp_path, name)
    write(path)
    return path


def _text_file(path):
    with open(path, "w") as f:
        f.write("not parameters")


def _existing_file(tmp_path):
    path = os.path.join(tmp_path, "taken")
    _text_file(path)
    return path


def _conv_file(path):
    other = gluon.nn.HybridSequential()
    other.add(gluon.nn.Conv2D(2, 3, in_channels=1))
    other.initialize()
    other.save_parameters(path)


# (id, call taking tmp_path, exception type, fragment naming the value, fragment naming the fix)
CASES = [
    ("empty batch", lambda t: gluonkit.split_and_load(np.zeros((0, 3)), [mx.cpu(0)]),
     ValueError, "(0, 3)", "skip empty batches"),
    ("duplicate contexts", lambda t: gluonkit.split_and_load(nd.ones((4, 2)), [mx.cpu(0), mx.cpu(0)]),
     ValueError, "[cpu(0), cpu(0)]", "list each device once"),
    ("empty context list", lambda t: gluonkit.split_and_load(nd.ones((4, 2)), []),
     ValueError, "ctx_list is empty", "pass at least one context"),
    ("context given as a string", lambda t: gluonkit.split_and_load(nd.ones((4, 2)), ["gpu0"]),
     TypeError, "'gpu0'", "use mx.cpu(i) or mx.gpu(i)"),
    ("batch axis out of range", lambda t: gluonkit.split_and_load(nd.ones((4, 2)), [mx.cpu(0)], batch_axis=3),
     ValueError, "batch_axis=3", "(4, 2)"),
    ("data as a list", lambda t: gluonkit.split_and_load([[1, 2]], [mx.cpu(0)]),
     TypeError, "list", "NDArray or a numpy array"),
    ("accumulate=0", lambda t: _trainer(accumulate=0),
     ValueError, "got 0", "use 1 to update on every step"),
    ("negative batch size", lambda t: _trainer().step(-1),
     ValueError, "got -1", "the number of samples"),
    ("NaN batch size", lambda t: _trainer().step(float("nan")),
     ValueError, "got nan", "finite number >= 0"),
    ("step before any backward", lambda t: _trainer().step(4),
     RuntimeError, "no backward() ran", "Call loss.backward() inside autograd.record()"),
    ("NaN learning rate", lambda t: gluonkit.Trainer(_net().collect_params(), "sgd", {"learning_rate": float("nan")}),
     ValueError, "got nan", "finite number >= 0"),
    ("negative learning rate later", lambda t: _trainer().set_learning_rate(-0.5),
     ValueError, "got -0.5", "finite number >= 0"),
    ("unknown non-finite policy", lambda t: _trainer(on_nonfinite="warn"),
     ValueError, "'warn'", "one of 'ignore', 'skip', 'raise'"),
    ("asynchronous kvstore", lambda t: _trainer(kvstore="dist_async"),
     ValueError, "'dist_async'", "needs 'dist_sync'"),
    ("head gradient of the wrong shape", lambda t: gluonkit.autograd.backward({"y": _recorded_head()},
                                                                             {"y": nd.ones(2)}),
     ValueError, "has shape (2,) but the head has shape (3,)", "pass a gradient of the head's shape"),
    ("head gradient of the wrong dtype", lambda t: gluonkit.autograd.backward(
        {"y": _recorded_head()}, {"y": nd.ones(3, dtype="float64")}),
     TypeError, "dtype float64", "cast it with .astype('float32')"),
    ("head gradient for no head", lambda t: gluonkit.autograd.backward({"y": _recorded_head()}, {"z": nd.ones(3)}),
     KeyError, "['z']", "the heads are ['y']"),
    ("custom_op unknown keyword", lambda t: _scale(nd.ones(2), facto=2.0),
     TypeError, "'facto'", "its keywords are ['factor']"),
    ("custom_op array keyword", lambda t: _scale(nd.ones(2), factor=nd.ones(1)),
     TypeError, "'factor'", "pass it positionally"),
    ("custom_op keyword that cannot be serialized", lambda t: _scale(nd.ones(2), factor={"a": 1}),
     TypeError, "{'a': 1}", "pass int, float, bool, str, None"),
    ("route that does not exist", lambda t: _branches().route("colour"),
     KeyError, "'colour'", "the branches are ('digit', 'parity')"),
    ("route with no names", lambda t: _branches().route(),
     ValueError, "route()", "needs at least one branch name"),
    ("duplicate branch name", lambda t: _branches().add("digit", gluon.nn.Dense(3)),
     ValueError, "'digit' already exists", "give each branch its own name"),
    ("branch name that is not an identifier", lambda t: _branches().add("2nd", gluon.nn.Dense(3)),
     ValueError, "'2nd'", "use a Python identifier"),
    ("branch that is not a HybridBlock", lambda t: _branches().add("aux", gluon.nn.Block()),
     TypeError, "got Block", "wrap plain layers in a mxnet.gluon.nn.HybridSequential"),
    ("select pattern that matches nothing", lambda t: gparams.select(_net(), "backbone"),
     ValueError, "'backbone'", "'weight', 'bias'"),
    ("load_into a missing file", lambda t: gparams.load_into(_net(), os.path.join(t, "missing.params")),
     FileNotFoundError, "missing.params", "check the path"),
    ("load_into a file that is not a parameter file", lambda t: gparams.load_into(
        _net(), _file(t, "notes.params", _text_file)),
     ValueError, "notes.params", "write one with block.save_parameters"),
    ("load_into a file from an unrelated network", lambda t: gparams.load_into(
        _net(), _file(t, "conv.params", _conv_file)),
     ValueError, "(2, 1, 3, 3)", "load a file saved by a network that contains this block"),
    ("top-k with k=0", lambda t: ops.topk_threshold(nd.ones((2, 3)), k=0),
     ValueError, "k=0", "use 1 <= k <= 3"),
    ("top-k with k beyond the axis", lambda t: ops.keep_topk(nd.ones((2, 3)), k=4),
     ValueError, "k=4", "use 1 <= k <= 3"),
    ("pick out of range", lambda t: ops.pick(nd.ones((2, 3)), nd.array([3, 0])),
     IndexError, "index 3", "use integers in [-3, 2]"),
    ("threshold that does not broadcast", lambda t: ops.threshold_mask(nd.ones((2, 3)), nd.ones((3, 2))),
     ValueError, "(3, 2)", "reshape it to (2, 1)"),
    ("threshold given as a string", lambda t: ops.threshold_mask(nd.ones((2, 3)), "0.5"),
     TypeError, "'0.5'", "pass an NDArray, a number"),
    ("threshold None", lambda t: ops.threshold_mask(nd.ones((2, 3)), None),
     TypeError, "got None", "pass a number such as 0.5"),
    ("pick with string indices", lambda t: ops.pick(nd.ones((2, 3)), ["a", "b"]),
     TypeError, "['a', 'b']", "pass an NDArray, a number"),
    ("pick with keepdims=1", lambda t: ops.pick(nd.ones((2, 3)), [0, 1], keepdims=1),
     TypeError, "got 1", "True or False"),
    ("load_into with ctx as a string", lambda t: gparams.load_into(
        gluon.nn.Dense(3, in_units=4), _file(t, "dense.params", _net().save_parameters), ctx="cpu"),
     TypeError, "'cpu'", "pass mx.cpu()"),
    ("load_into a directory", lambda t: gparams.load_into(_net(), t),
     IsADirectoryError, "is a directory", "pass the parameter file in it"),
    ("custom_op name of a live operator", lambda t: gluonkit.autograd.custom_op(
        name=_scale.op_type)(lambda x: x),
     ValueError, "'gluonkit.test_bad_input._scale' is taken", "give each its own name"),
    ("backward of an unrecorded head", lambda t: gluonkit.autograd.backward([nd.ones(3)]),
     RuntimeError, "heads[0] is not in a recorded graph", "with autograd.record()"),
    ("ShapeCache keeping no graph", lambda t: gluonkit.nn.ShapeCache(gluon.nn.Dense(2), max_shapes=0),
     ValueError, "got 0", "positive integer"),
    ("launch with no workers", lambda t: launch(["true"], num_workers=0),
     ValueError, "got 0", "positive integer"),
    ("ssh launch without a host file", lambda t: launch(["true"], 2, launcher="ssh"),
     ValueError, "launcher='ssh'", "needs --hostfile"),
    ("fit with a negative epoch count", lambda t: _fit(_loader(), epochs=-1),
     ValueError, "got -1", "the number of epochs to reach"),
    ("fit with a loader that yields nothing", lambda t: _fit([]),
     ValueError, "yielded no batches", "pass a non-empty loader"),
    ("data and label of different lengths", lambda t: _fit([(nd.ones((4, 4)), nd.ones((3, 3)))]),
     ValueError, "4 samples of data but 3 labels", "must have the same batch size"),
    ("checkpoint directory that is a file", lambda t: gluonkit.Checkpoint(_existing_file(t)),
     NotADirectoryError, "taken", "pass the path of a directory"),
    ("checkpoint keeping none", lambda t: gluonkit.Checkpoint(t, keep=0),
     ValueError, "got 0", "positive integer"),
    ("gluoncv model name that does not exist", lambda t: build_model("resnet_nonexistent", 10),
     ValueError, "'resnet_nonexistent'", "gluoncv.model_zoo.get_model_list()"),
]


@pytest.mark.parametrize("call,error,value,fix", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_named_with_its_fix(tmp_path, call, error, value, fix):
    with pytest.raises(error) as info:
        call(str(tmp_path))
    message = str(info.value)
    assert value in message, message
    assert fix in message, message
    assert "Check failed" not in message and "Stack trace" not in message, message


def test_catalogue_size():
    assert len(CASES) >= 30
