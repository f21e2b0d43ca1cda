"""The best model as the .params file scripts and load_parameters use."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import params_of
from gluonkit.callbacks import ModelCheckpoint

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def make_net(seed=1):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu", in_units=64), gluon.nn.Dense(10, in_units=16))
    net.initialize(mx.init.Xavier())
    return net


def flat(train):
    digits = gluonkit.data.digits(train)
    return gluon.data.ArrayDataset(np.stack([x.reshape(-1) for x, _ in digits]),
                                   np.array([y for _, y in digits], dtype="float32"))


def test_save_best_params_holds_the_best_epoch_for_load_parameters(tmp_path):
    np.random.seed(0)
    net = make_net()
    val = gluon.data.DataLoader(flat(False), batch_size=128)
    # a rate high enough that validation accuracy does not rise every epoch
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.5, "momentum": 0.9})
    history = gluonkit.fit(net, LOSS, trainer, gluon.data.DataLoader(flat(True), batch_size=64, shuffle=True),
                           epochs=5, val_data=val, metrics="acc", progress=False,
                           callbacks=[ModelCheckpoint(tmp_path / "ckpt", monitor="val_accuracy",
                                                      save_best_params=tmp_path / "best.params")])
    best_epoch = int(np.argmax(history["val_accuracy"]))
    assert best_epoch != len(history["epoch"]) - 1, "the test needs a best epoch before the last"
    loaded = make_net(seed=9)
    loaded.load_parameters(str(tmp_path / "best.params"))
    from_ckpt = make_net(seed=8)
    gluonkit.Checkpoint(tmp_path / "ckpt").load(from_ckpt, best=True)
    for name, value in params_of(from_ckpt).items():
        np.testing.assert_array_equal(params_of(loaded)[name], value, err_msg=name)
    assert gluonkit.evaluate(loaded, val)["accuracy"] == history["val_accuracy"][best_epoch]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.params", "ckpt"]   # no scratch file left


def test_save_best_params_needs_a_monitor(tmp_path):
    with pytest.raises(ValueError, match=r"save_best_params='.*best.params' needs monitor="):
        ModelCheckpoint(tmp_path, save_best_params=tmp_path / "best.params")


def test_params_files_average_per_device_batchnorm_statistics_where_checkpoints_keep_each(tmp_path):
    """As docs/checkpoints.md says of save_best_params and save_parameters."""
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=3), gluon.nn.BatchNorm(in_channels=4))
    net.initialize(ctx=ctx)
    for i, c in enumerate(ctx):   # each device normalizes its own batch: its own statistics
        with mx.autograd.record():
            out = net(mx.nd.array(np.random.RandomState(i).rand(5, 3) * (i + 1), ctx=c))
        out.backward()
    copies = [d.asnumpy() for d in net[1].running_mean.list_data()]
    assert not np.array_equal(copies[0], copies[1])
    net.save_parameters(str(tmp_path / "net.params"))
    gluonkit.Checkpoint(tmp_path / "ckpt").save(net, None, epoch=0)
    twin = gluon.nn.HybridSequential()
    twin.add(gluon.nn.Dense(4, in_units=3), gluon.nn.BatchNorm(in_channels=4))
    twin.initialize(ctx=ctx)
    twin.load_parameters(str(tmp_path / "net.params"), ctx=ctx)
    for d in twin[1].running_mean.list_data():
        np.testing.assert_allclose(d.asnumpy(), (copies[0] + copies[1]) / 2, rtol=1e-6)
    gluonkit.Checkpoint(tmp_path / "ckpt").load(twin)
    for d, want in zip(twin[1].running_mean.list_data(), copies):
        np.testing.assert_array_equal(d.asnumpy(), want)
