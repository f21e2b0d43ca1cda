"""One public address per name: messages send users to ``gluonkit.callbacks``."""
import importlib
import re

import pytest
from mxnet import gluon, nd

import gluonkit


def test_a_wrong_callback_is_sent_to_the_public_module_whose_class_it_names():
    net = gluon.nn.Dense(2)
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    data = [(nd.ones((2, 3)), nd.zeros((2,)))]
    with pytest.raises(TypeError, match=r"subclass gluonkit\.callbacks\.Callback\.") as err:
        gluonkit.fit(net, gluon.loss.L2Loss(), trainer, data, epochs=1, callbacks=[print],
                     progress=False)
    module, name = re.search(r"subclass (\S+)\.(\w+)\.$", str(err.value)).groups()
    assert getattr(importlib.import_module(module), name) is gluonkit.callbacks.Callback
