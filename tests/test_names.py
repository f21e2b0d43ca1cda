"""gluonkit.names against the names save_parameters writes and hand-written expectations."""
import pytest
from mxnet import gluon, nd
from mxnet.gluon import nn

import gluonkit
from gluonkit.names import brief_names, first_names, select, shape_fits


class _Encoded(gluon.HybridBlock):
    """A three-layer encoder under the attribute ``encoder``, then a head: 8 parameters."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.HybridSequential()
        self.encoder.add(nn.Dense(6, in_units=4, activation="tanh"),
                         nn.Dense(6, in_units=6, activation="tanh"), nn.Dense(3, in_units=6))
        self.head = nn.Dense(2, in_units=3)

    def hybrid_forward(self, F, x):
        return self.head(self.encoder(x))


def test_select_uses_the_names_save_parameters_writes(tmp_path):
    net = _Encoded()
    net.initialize()
    net.save_parameters(str(tmp_path / "net.params"))
    assert list(select(net)) == list(nd.load(str(tmp_path / "net.params")))
    assert list(select(net, r"^encoder\.\d\.weight$")) == [
        "encoder.0.weight", "encoder.1.weight", "encoder.2.weight"]
    assert list(select(net.encoder, "bias")) == ["0.bias", "1.bias", "2.bias"]
    with pytest.raises(ValueError, match=r"'nothing' matches none of the 8.*'encoder.0.weight'"):
        select(net, "nothing")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        select(net, "(")
    with pytest.raises(TypeError, match="gluon.Block"):
        select(net.collect_params())
    assert select(nn.HybridSequential()) == {}


def test_params_keeps_select_and_first_names_as_its_public_names():
    assert gluonkit.params.select is select and gluonkit.params.first_names is first_names
    assert {"select", "first_names"} <= set(gluonkit.params.__all__)


def test_brief_names_and_shape_fits():
    assert brief_names(["b", "a"]) == "'b', 'a'"
    assert brief_names([f"p{i}" for i in range(10)], limit=3) == "'p0', 'p1', 'p2' and 7 more"
    assert shape_fits(None, (3, 4))
    assert shape_fits((0, 4), (3, 4))
    assert not shape_fits((2, 4), (3, 4))
    assert not shape_fits((4,), (4, 1))


def test_first_names_keeps_a_shared_parameter_once_under_its_first_name():
    shared = nn.Dense(3, in_units=3)
    net = nn.HybridSequential()
    net.add(shared, nn.Dense(2, in_units=3), shared)
    net.initialize()
    names = select(net)
    assert set(names) == {"0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"}
    assert first_names(names) == {"0.weight": shared.weight, "0.bias": shared.bias,
                                  "1.weight": net[1].weight, "1.bias": net[1].bias}
    trainer = gluonkit.Trainer(net, "sgd")   # the Trainer, fit and checkpoints name it so too
    assert set(trainer.params) == {"0.weight", "0.bias", "1.weight", "1.bias"}
