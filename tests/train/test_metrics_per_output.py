"""Training and validation metrics apart, and metrics per output as Keras takes them."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

import gluonkit
from conftest import StopAt
from gluonkit.callbacks import ModelCheckpoint
from gluonkit.nn import Branches
from gluonkit.train.metrics import OutputMetric

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


class DigitParity(Branches):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.HybridSequential()
            self.trunk.add(nn.Dense(16, activation="relu", in_units=6))
            self.add("digit", nn.Dense(4, in_units=16))
            self.add("parity", nn.Dense(2, in_units=16))


def dataset(n, seed):
    rng = np.random.RandomState(seed)
    return gluon.data.ArrayDataset(rng.rand(n, 6).astype("float32"), rng.randint(0, 4, n).astype("float32"))


def make_net():
    mx.random.seed(2)
    net = DigitParity()
    net.initialize(mx.init.Xavier())
    return net


def two_heads(net, batch, ctx_list):
    """Both heads' losses; outputs and labels per device as tuples in the heads' order."""
    x, y = batch
    digit, parity = net(x)
    parity_label = y % 2
    return [LOSS(digit, y) + LOSS(parity, parity_label)], x.shape[0], [(digit, parity)], [(y, parity_label)]


def eval_heads(net, batch, ctx_list):
    x, y = batch
    return [net(x)], [(y, y % 2)]


def numpy_accuracies(net, data):
    x, y = (np.stack(field) for field in zip(*data))
    digit, parity = (out.asnumpy() for out in net(mx.nd.array(x)))
    return (digit.argmax(1) == y).mean(), (parity.argmax(1) == y % 2).mean()


def fit_heads(metrics, epochs=2, val_metrics=None, callbacks=(), seed=None):
    np.random.seed(0)
    net = make_net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.2, "momentum": 0.9})
    history = gluonkit.fit(net, None, trainer, gluon.data.DataLoader(dataset(48, 0), batch_size=8, shuffle=True),
                           epochs=epochs, batch_fn=two_heads, eval_fn=eval_heads, metrics=metrics,
                           val_metrics=val_metrics, val_data=gluon.data.DataLoader(dataset(20, 1), batch_size=8),
                           callbacks=callbacks, progress=False)
    return net, history


@pytest.mark.parametrize("metrics", [{"digit": "acc", "parity": ["acc"]}, [["acc"], ["acc"]], {0: "acc", 1: "acc"}],
                         ids=["by-name", "list-of-lists", "by-position"])
def test_metrics_per_head_of_a_branches_network(metrics):
    net, history = fit_heads(metrics)
    digit, parity = numpy_accuracies(net, dataset(20, 1))
    assert history["val_digit_accuracy"][-1] == pytest.approx(digit)
    assert history["val_parity_accuracy"][-1] == pytest.approx(parity)
    assert {"digit_accuracy", "parity_accuracy"} <= set(history)
    assert gluonkit.evaluate(net, gluon.data.DataLoader(dataset(20, 1), batch_size=8), metrics=metrics,
                             eval_fn=eval_heads) == {"digit_accuracy": digit, "parity_accuracy": parity}


def test_validation_metrics_apart_from_training_ones():
    """RMSE on the training batches, accuracy on validation only: no val_rmse."""
    _, history = fit_heads({"digit": "rmse"}, val_metrics={"digit": "acc", "parity": "acc"})
    assert "digit_rmse" in history and "val_digit_rmse" not in history
    assert "val_digit_accuracy" in history and "digit_accuracy" not in history
    _, history = fit_heads({"digit": "acc"}, val_metrics=[])
    assert "digit_accuracy" in history and not any(k.startswith("val_digit") for k in history)
    assert "val_loss" not in history


def test_metrics_alone_still_serve_both():
    net = gluon.nn.Dense(4, in_units=6)
    net.initialize()
    history = gluonkit.fit(net, LOSS, gluonkit.Trainer(net, "sgd"), gluon.data.DataLoader(dataset(16, 0), batch_size=8),
                           epochs=1, val_data=gluon.data.DataLoader(dataset(8, 1), batch_size=8), metrics="acc",
                           progress=False)
    assert {"accuracy", "val_accuracy"} <= set(history)


def test_dict_outputs_skip_a_head_that_did_not_run():
    """The multi-task recipe's style: per-device dicts, the auxiliary head on some batches only."""
    metric = OutputMetric("acc", "parity")
    metric.update([{"digit": mx.nd.array([1, 2])}], [{"digit": mx.nd.array([[0, 1, 0], [0, 0, 1]])}])
    assert np.isnan(metric.get()[1][0])                    # nothing counted yet
    metric.update([{"parity": mx.nd.array([1, 0])}], [{"parity": mx.nd.array([[0, 1], [0, 1]])}])
    assert metric.get() == (["parity_accuracy"], [0.5])


def test_per_output_metrics_resume_mid_epoch_exactly(tmp_path):
    metrics = {"digit": "acc", "parity": ["acc", "f1"]}
    _, straight = fit_heads(metrics, epochs=2)
    with pytest.raises(KeyboardInterrupt):
        fit_heads(metrics, epochs=2, callbacks=[StopAt(1, 3), ModelCheckpoint(tmp_path)])
    _, resumed = fit_heads(metrics, epochs=2, callbacks=[ModelCheckpoint(tmp_path, resume=True)])
    for key in ("loss", "digit_accuracy", "parity_accuracy", "parity_f1", "val_parity_accuracy"):
        assert resumed[key] == straight[key], key


def test_bad_per_output_metrics_fail_in_one_line():
    with pytest.raises(ValueError, match=r"output 'colour'.*outputs are \['digit', 'parity'\]"):
        fit_heads({"colour": "acc"})
    with pytest.raises(TypeError, match="one metric and an output position"):
        OutputMetric("acc", 1.5)


def test_per_output_metrics_on_a_single_output_say_what_to_return():
    net = gluon.nn.Dense(4, in_units=6)
    net.initialize()
    loader = gluon.data.DataLoader(dataset(16, 0), batch_size=8)
    with pytest.raises(TypeError, match=r"^the metrics of output 'digit' need each device's outputs and "
                                        r"labels as a tuple .* got NDArray \(8,\); return them so"):
        gluonkit.fit(net, LOSS, gluonkit.Trainer(net, "sgd"), loader, epochs=1, val_data=loader,
                     metrics={"digit": "acc"}, progress=False)
