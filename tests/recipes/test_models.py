"""The recipes' networks: the shared small CNN, model-zoo names, pretrained weights."""
import mxnet as mx
import numpy as np
import pytest
from gluoncv import model_zoo

from gluonkit.recipes.models import build_model, check_model_name, small_cnn


def test_small_cnn_takes_any_size_and_channels():
    net = small_cnn(7)
    net.initialize()
    assert net(mx.nd.zeros((2, 3, 13, 9))).shape == (2, 7)


def test_model_names():
    assert check_model_name("cnn") == "cnn"
    assert check_model_name("cifar_resnet20_v1") == "cifar_resnet20_v1"
    with pytest.raises(ValueError, match="close: .*cifar_resnet20_v1"):
        check_model_name("cifar_resnet20")
    # a part of a zoo name suggests the names that contain it first, not a look-alike
    with pytest.raises(ValueError, match=r"\(close: cifar_resnet20_v1, cifar_resnet20_v2, "):
        check_model_name("resnet20")


def test_pretrained_file_gives_the_weights_and_a_new_output_layer(tmp_path):
    source = model_zoo.get_model("cifar_resnet20_v1", pretrained=False)
    source.initialize(mx.init.Xavier())
    source(mx.nd.zeros((1, 3, 32, 32)))
    source.save_parameters(str(tmp_path / "w.params"))
    net = build_model("cifar_resnet20_v1", 3, pretrained_file=str(tmp_path / "w.params"))
    net.collect_params().reset_ctx(mx.cpu())
    x = mx.nd.random.uniform(shape=(2, 3, 32, 32))
    assert net(x).shape == (2, 3)
    np.testing.assert_allclose(net.features(x).asnumpy(), source.features(x).asnumpy(), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(FileNotFoundError, match="--pretrained-file .*no such file"):
        build_model("cifar_resnet20_v1", 3, pretrained_file=str(tmp_path / "missing.params"))
    with pytest.raises(ValueError, match="'cnn' has no pretrained weights"):
        build_model("cnn", 3, pretrained=True)


def test_pretrained_weights_or_a_clear_message(tmp_path, monkeypatch):
    """Offline (as here) the message says what to do; online the weights arrive."""
    monkeypatch.setenv("MXNET_HOME", str(tmp_path))
    try:
        net = build_model("cifar_resnet20_v1", 3, pretrained=True)
    except RuntimeError as err:
        assert "weights of 'cifar_resnet20_v1' are not available" in str(err)
        assert "--pretrained-file PATH" in str(err) and str(tmp_path) in str(err)
    else:
        net.collect_params().reset_ctx(mx.cpu())
        assert net(mx.nd.zeros((1, 3, 32, 32))).shape == (1, 3)
