"""The validation loss of a run whose training step is a batch_fn (GluonCV's mixup script).

``train_mixup_cifar10.py`` trains with dense (mixed) labels and
``SoftmaxCrossEntropyLoss(sparse_label=False)``; its validation labels are class indices.
"""
import logging

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import params_of
from gluonkit.callbacks import EarlyStopping

CLASSES = 4


def data(n, seed):
    rng = np.random.RandomState(seed)
    return gluon.data.ArrayDataset(rng.rand(n, 10).astype("float32"),
                                   rng.randint(0, CLASSES, n).astype("float32"))


def make_net():
    mx.random.seed(1)
    net = gluon.nn.Dense(CLASSES, in_units=10)
    net.initialize(mx.init.Xavier())
    return net


def mixup_step(net, batch, ctx_list):
    """train_mixup_cifar10.py's step: mix the batch with itself reversed, dense labels."""
    x, y = batch
    lam = np.random.beta(1.0, 1.0)
    mixed = lam * x + (1 - lam) * x[::-1]
    onehot = mx.nd.one_hot(y, CLASSES)
    label = lam * onehot + (1 - lam) * onehot[::-1]
    out = net(mixed)
    return [MIXUP_LOSS(out, label)], x.shape[0], [out], [label]


MIXUP_LOSS = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)
VAL_LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def val_step(net, batch, ctx_list):
    """Validation with class indices, scored by the sparse loss."""
    x, y = batch
    out = net(x)
    return [out], [y], [VAL_LOSS(out, y)]


def trainer_of(net):
    return gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})


def test_a_loss_that_cannot_take_the_validation_labels_fails_before_training():
    net = make_net()
    before = params_of(net)
    calls = []

    def step(net, batch, ctx_list):
        calls.append(1)
        return mixup_step(net, batch, ctx_list)

    with pytest.raises(ValueError) as err:
        gluonkit.fit(net, MIXUP_LOSS, trainer_of(net), gluon.data.DataLoader(data(32, 0), batch_size=8),
                     epochs=1, batch_fn=step, val_data=gluon.data.DataLoader(data(16, 1), batch_size=8),
                     progress=False)
    message = str(err.value)
    assert "\n" not in message and "MXNetError" not in message and "Cannot reshape" not in message
    assert "labels of shape [(8,)] with outputs of shape [(8, 4)]" in message
    assert "eval_fn that returns (outputs, labels, losses)" in message
    assert calls == []                                   # nothing trained
    for name, value in params_of(net).items():
        np.testing.assert_array_equal(value, before[name])


def test_eval_fn_returns_the_validation_loss():
    np.random.seed(0)
    net = make_net()
    val = gluon.data.DataLoader(data(20, 1), batch_size=8)      # 8 + 8 + 4 samples
    history = gluonkit.fit(net, MIXUP_LOSS, trainer_of(net), gluon.data.DataLoader(data(32, 0), batch_size=8),
                           epochs=2, batch_fn=mixup_step, eval_fn=val_step, val_data=val,
                           callbacks=[EarlyStopping("val_loss", patience=5)], progress=False)
    # the last epoch's val_loss: the mean per-sample cross-entropy, by NumPy
    x, y = (np.stack(field) for field in zip(*data(20, 1)))
    logits = net(mx.nd.array(x)).asnumpy().astype("float64")
    log_p = logits - logits.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    expected = -log_p[np.arange(20), y.astype(int)].mean()
    assert history["val_loss"][-1] == pytest.approx(expected, rel=1e-5)
    assert gluonkit.evaluate(net, val, metrics=None, eval_fn=val_step)["loss"] == \
        pytest.approx(expected, rel=1e-5)


def test_without_a_validation_loss_fit_says_so_before_training(caplog):
    net = make_net()
    with caplog.at_level(logging.INFO, logger="gluonkit"):
        history = gluonkit.fit(net, None, trainer_of(net), gluon.data.DataLoader(data(32, 0), batch_size=8),
                               epochs=1, batch_fn=mixup_step,
                               val_data=gluon.data.DataLoader(data(16, 1), batch_size=8), progress=False)
    assert "val_loss" not in history
    said = [r.getMessage() for r in caplog.records if "no val_loss" in r.getMessage()]
    assert len(said) == 1 and "return (outputs, labels, losses) from eval_fn" in said[0]


def test_early_stopping_on_a_validation_loss_that_will_not_come_fails_before_training():
    net = make_net()
    before = params_of(net)
    with pytest.raises(ValueError, match=r"^EarlyStopping monitors 'val_loss', but this run has no validation "
                                         r"loss: loss is None and there is no eval_fn; return"):
        gluonkit.fit(net, None, trainer_of(net), gluon.data.DataLoader(data(32, 0), batch_size=8), epochs=1,
                     batch_fn=mixup_step, val_data=gluon.data.DataLoader(data(16, 1), batch_size=8),
                     callbacks=[EarlyStopping("val_loss")], progress=False)
    for name, value in params_of(net).items():
        np.testing.assert_array_equal(value, before[name])


def test_eval_fn_losses_must_be_one_per_sample():
    net = make_net()

    def mean_loss(net, batch, ctx_list):
        out, label, loss = val_step(net, batch, ctx_list)
        return out, label, [loss[0].mean()]

    with pytest.raises(ValueError, match="returned 1 losses for batch 0 of 8 samples; return one loss per sample"):
        gluonkit.evaluate(net, gluon.data.DataLoader(data(16, 1), batch_size=8), eval_fn=mean_loss)
