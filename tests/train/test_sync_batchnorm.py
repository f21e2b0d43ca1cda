"""fit refuses SyncBatchNorm set-ups that would hang, before changing anything, and trains the
frozen layers (which do not synchronize) like frozen BatchNorm."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon.contrib.nn import SyncBatchNorm

import gluonkit
from conftest import TWO_CPUS, params_of
from gluonkit.nn import check_sync_batchnorm, freeze_batchnorm
from gluonkit.train import loop


def conv_net(norm, ctx, seed=0):
    """Conv -> norm -> ReLU -> Dense: the layout that hangs MXNet 1.9.1's SyncBatchNorm on CPUs."""
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=1), norm, gluon.nn.Activation("relu"),
            gluon.nn.Dense(3, in_units=4 * 6 * 6))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def loader(samples=8, batch=4):
    rng = np.random.RandomState(0)
    x = rng.uniform(size=(samples, 1, 8, 8)).astype("float32")
    y = rng.randint(0, 3, samples).astype("float32")
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=batch)


def fit(net, ctx, data=None):
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    return gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, data or loader(),
                        epochs=1, ctx=ctx, progress=False)


@pytest.mark.parametrize("num_devices, ctx", [(2, [mx.cpu(0)]), (1, TWO_CPUS), (3, [mx.gpu(0), mx.gpu(1)])])
def test_num_devices_other_than_the_devices_trained_on_is_refused(num_devices, ctx):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3), SyncBatchNorm(num_devices=num_devices))
    with pytest.raises(ValueError, match=rf"num_devices={num_devices}\).*num_devices={len(ctx)}"):
        check_sync_batchnorm(net, ctx)


def test_fit_refuses_several_cpu_devices_and_changes_nothing():
    net = conv_net(SyncBatchNorm(in_channels=4, num_devices=2), TWO_CPUS)
    before = params_of(net)
    with pytest.raises(ValueError, match="several CPU devices.*freeze_batchnorm"):
        fit(net, TWO_CPUS)
    for name, value in params_of(net).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_synchronizing_layers_on_gpus_and_one_cpu_pass_and_frozen_or_plain_ones_are_ignored():
    syncing = gluon.nn.HybridSequential()
    syncing.add(gluon.nn.Conv2D(4, 3), SyncBatchNorm(num_devices=2))
    assert check_sync_batchnorm(syncing, [mx.gpu(0), mx.gpu(1)]) is True
    single = gluon.nn.HybridSequential()
    single.add(SyncBatchNorm(num_devices=1))
    assert check_sync_batchnorm(single, [mx.cpu(0)]) is True
    freeze_batchnorm(syncing)
    assert check_sync_batchnorm(syncing, TWO_CPUS) is False
    plain = gluon.nn.HybridSequential()
    plain.add(gluon.nn.BatchNorm())
    assert check_sync_batchnorm(plain, TWO_CPUS) is False


def test_frozen_sync_batchnorm_trains_on_two_cpu_devices_like_frozen_batchnorm():
    sync = conv_net(SyncBatchNorm(in_channels=4, num_devices=2), TWO_CPUS)
    plain = conv_net(gluon.nn.BatchNorm(in_channels=4), TWO_CPUS)
    for net in (sync, plain):
        net[1].running_mean.set_data(mx.nd.array([0.1, -0.2, 0.3, 0.0]))
        net[1].running_var.set_data(mx.nd.array([0.5, 2.0, 1.0, 1.5]))
        freeze_batchnorm(net)
    start = params_of(plain)
    fit(sync, TWO_CPUS)
    fit(plain, TWO_CPUS)
    trained = params_of(plain)
    assert not np.allclose(trained["0.weight"], start["0.weight"])   # the convolution trained
    for name, value in params_of(sync).items():
        np.testing.assert_allclose(value, trained[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_batch_that_misses_a_device_is_refused_before_its_forward(monkeypatch):
    # on GPUs the check passes; a batch of one sample for two devices would then hang
    monkeypatch.setattr(loop, "check_sync_batchnorm", lambda net, ctx: True)
    net = conv_net(gluon.nn.BatchNorm(in_channels=4), TWO_CPUS)
    before = params_of(net)
    with pytest.raises(ValueError, match=r"batch 0 of epoch 1 has 1 sample\(s\) for 2 devices.*last_batch"):
        fit(net, TWO_CPUS, loader(samples=1, batch=1))
    for name, value in params_of(net).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
