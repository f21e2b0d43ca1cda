"""fit and evaluate on gluonkit.nn.Branches networks, whose forward returns a tuple of heads."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

import gluonkit
from conftest import params_of
from gluonkit.nn import Branches

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


class Heads(Branches):
    def __init__(self, heads, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = nn.HybridSequential()
            self.trunk.add(nn.Dense(8, activation="relu", in_units=5))
            for name in heads:
                self.add(name, nn.Dense(4, in_units=8))


def make(heads=("digit",)):
    mx.random.seed(3)
    net = Heads(heads)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def loader():
    rng = np.random.RandomState(0)
    data = gluon.data.ArrayDataset(rng.rand(32, 5).astype("float32"), rng.randint(0, 4, 32).astype("float32"))
    return gluon.data.DataLoader(data, batch_size=8)


def sgd(net):
    return gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})


def test_a_one_head_branches_network_trains_like_its_route():
    net, ref = make(), make()
    history = gluonkit.fit(net, LOSS, sgd(net), loader(), epochs=2, val_data=loader(), metrics="acc",
                           progress=False)
    ref_history = gluonkit.fit(ref.route("digit"), LOSS, sgd(ref), loader(), epochs=2, val_data=loader(),
                               metrics="acc", progress=False)
    assert history["loss"] == ref_history["loss"]
    assert history["val_accuracy"] == ref_history["val_accuracy"]
    for name, value in params_of(ref).items():
        np.testing.assert_array_equal(params_of(net)[name], value, err_msg=name)
    assert gluonkit.evaluate(net, loader(), loss=LOSS) == gluonkit.evaluate(ref.route("digit"), loader(), loss=LOSS)


@pytest.mark.parametrize("val_data", [None, loader()], ids=["train", "validation"])
def test_several_heads_without_a_batch_fn_fail_in_one_line(val_data):
    net = make(("digit", "parity"))
    with pytest.raises(TypeError, match=r"^the network returned 2 outputs, and fit's loss takes one; "
                                        r"train .* with a batch_fn .* net\.route\(name\)\.$"):
        gluonkit.fit(net, LOSS, sgd(net), loader(), epochs=1, val_data=val_data, progress=False)
