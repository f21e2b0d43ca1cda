"""gluonkit.check_accumulation: an accumulated update against the large batch's, per parameter."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon, nd
from numpy.testing import assert_array_equal

import gluonkit
from conftest import params_of
from test_trainer_heads import HEADS, ThreeHeads

CE = gluon.loss.SoftmaxCrossEntropyLoss()
RNG = np.random.RandomState(0)
X, Y, HAS_AUX = RNG.randn(20, 5).astype("float32"), RNG.randint(0, 4, 20), (RNG.rand(20) < 0.4) * 1.0


def _by_head(net, x, y, has_aux):
    outputs = dict(zip(HEADS, net(x)))
    return {"main": CE(outputs["main"], y), "aux": CE(outputs["aux"], y % 3) * has_aux}


def _head_counts(x, y, has_aux):
    return {"main": x.shape[0], "aux": float(has_aux.sum().asscalar())}


def _heads_net():
    net = ThreeHeads()
    net.initialize(mx.init.Xavier())
    return net


def test_counts_by_head_accumulate_like_the_large_batch_and_the_network_is_left_as_it_was():
    net = _heads_net()
    before = params_of(net)
    report = gluonkit.check_accumulation(net, _by_head, (X, Y, HAS_AUX), count_fn=_head_counts)
    assert report.largest < 1e-6 and report.sizes == [3, 6, 11]
    assert report.updates["trunk.0.weight"] > 1e-3   # the update moved the weights it compares
    assert report.batchnorm == () and not report.dropout
    assert "largest difference" in str(report)
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)
    assert net.trunk[0].weight.list_ctx() == [mx.cpu(0)] and net.trunk[0].weight.grad_req == "write"


def test_a_loss_averaged_per_micro_batch_is_found():
    # each slice's mean: the micro-batches weigh their samples unequally, unlike the large batch
    report = gluonkit.check_accumulation(_heads_net(), lambda net, x, y, m: CE(net(x)[0], y).mean(), (X, Y, HAS_AUX))
    assert report.largest > 1e-3


def _batchnorm_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8), gluon.nn.BatchNorm(), gluon.nn.Dense(3))
    net.initialize()
    net(nd.array(X))
    return net


def test_batchnorm_is_named_as_the_known_exception_and_frozen_it_is_exact():
    def loss_fn(net, x, y):
        return CE(net(x), y % 3)

    net = _batchnorm_net()
    report = gluonkit.check_accumulation(net, loss_fn, (X, Y))
    assert report.batchnorm == ("1.gamma", "1.beta", "1.running_mean", "1.running_var")
    assert report.differences["0.weight"] > 1e-3
    assert "BatchNorm, the known exception" in str(report)
    gluonkit.nn.freeze_batchnorm(net)
    assert gluonkit.check_accumulation(net, loss_fn, (X, Y)).largest < 1e-6


@pytest.mark.parametrize("call, error, message", [
    (lambda net: gluonkit.check_accumulation(net, _by_head, (X[:2], Y[:2], HAS_AUX[:2])), ValueError,
     r"at least accumulate=3 samples to split, the batch has 2"),
    (lambda net: gluonkit.check_accumulation(net, _by_head, (X, Y[:3], HAS_AUX)), ValueError,
     r"their lengths differ \(\[3, 20\]\)"),
    (lambda net: gluonkit.check_accumulation(net, _by_head, (X, Y, HAS_AUX)), ValueError,
     r"loss_fn returned losses by head; give count_fn"),
])
def test_bad_input_is_refused_and_the_network_is_left_as_it_was(call, error, message):
    net = _heads_net()
    before = params_of(net)
    with pytest.raises(error, match=message):
        call(net)
    for name, value in params_of(net).items():
        assert_array_equal(value, before[name], err_msg=name)


def test_a_network_waiting_for_deferred_initialization_is_refused():
    net = gluon.nn.Dense(3)
    net.initialize()
    with pytest.raises(ValueError, match=r"weight.* wait for deferred initialization: run the network once"):
        gluonkit.check_accumulation(net, lambda net, x, y: CE(net(x), y), (X, Y))
