"""Exact mid-epoch resume of one's own training loop (GluonCV train_cifar10.py's loop) with
gluonkit.Epochs and a Checkpoint."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import gluonkit
from conftest import params_of

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def loop(directory, save_at=None, stop=False, resume=False, epochs=3, last_batch="keep"):
    """train_cifar10.py's loop body, around gluonkit.Epochs, saving a checkpoint after batch
    ``save_at`` (and stopping there if ``stop``); returns the weights and losses."""
    np.random.seed(5 if resume else 0)        # a resumed process's own seeds must not matter
    mx.random.seed(5 if resume else 1)
    rng = np.random.RandomState(3)
    data = gluon.data.ArrayDataset(rng.rand(60, 10).astype("float32"), rng.randint(0, 4, 60).astype("float32"))
    train_data = gluon.data.DataLoader(data, batch_size=8, shuffle=True, last_batch=last_batch)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu", in_units=10), gluon.nn.Dropout(0.3), gluon.nn.Dense(4, in_units=16))
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4})
    ckpt = gluonkit.Checkpoint(directory)
    epochs_loop = gluonkit.Epochs(train_data, epochs=epochs)
    if resume:
        epochs_loop.load_state_dict(ckpt.load(net, trainer)["loop"])
    losses = []
    for epoch in epochs_loop:
        for data, label in epochs_loop.batches():
            with autograd.record():
                loss = LOSS(net(data), label)
            loss.backward()
            trainer.step(data.shape[0])
            losses.append(float(loss.mean().asscalar()))
            if (epoch, epochs_loop.batch) == save_at:
                ckpt.save(net, trainer, epoch, loop=epochs_loop.state_dict())
                if stop:
                    return params_of(net), losses
    return params_of(net), losses


@pytest.mark.parametrize("last_batch,stop_at", [   # 60 samples: 8 batches of 8 (keep) or 7 (rollover)
    ("keep", (1, 3)), ("rollover", (1, 3)), ("keep", (2, 1)), ("rollover", (2, 1)), ("keep", (0, 8)),
    ("rollover", (0, 7))], ids=["mid", "mid-rollover", "third-epoch", "third-epoch-rollover", "epoch-end",
                                "epoch-end-rollover"])
def test_own_loop_stopped_mid_epoch_resumes_bit_for_bit(tmp_path, stop_at, last_batch):
    """Dropout draws from MXNet's generator, whose state cannot be saved: the state reseeds
    it, and the run never stopped saves at the same batch (as periodic saves do)."""
    straight, straight_losses = loop(tmp_path / "straight", save_at=stop_at, last_batch=last_batch)
    _, first = loop(tmp_path, save_at=stop_at, stop=True, last_batch=last_batch)
    resumed, rest = loop(tmp_path, resume=True, last_batch=last_batch)
    assert first + rest == straight_losses
    for name, value in straight.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_a_loader_of_another_batch_size_is_refused():
    rng = np.random.RandomState(3)
    data = gluon.data.ArrayDataset(rng.rand(60, 10).astype("float32"), rng.randint(0, 4, 60).astype("float32"))
    first = gluonkit.Epochs(gluon.data.DataLoader(data, batch_size=8, shuffle=True), epochs=3)
    next(iter(first))
    for _, _ in zip(range(3), first.batches()):
        pass
    other = gluonkit.Epochs(gluon.data.DataLoader(data, batch_size=6, shuffle=True), epochs=3)
    other.load_state_dict(first.state_dict())
    next(iter(other))
    with pytest.raises(gluonkit.CheckpointError, match="saved after 3 batches holding 24 samples.*hold 18"):
        list(other.batches())
    with pytest.raises(ValueError, match="what Epochs.state_dict"):
        other.load_state_dict({"epoch": "1"})


@pytest.mark.parametrize("epochs,error", [(-1, ValueError), (True, TypeError), (2.5, TypeError), ("3", TypeError)])
def test_epochs_must_be_a_count(epochs, error):
    with pytest.raises(error, match="epochs .* must be an integer >= 0"):
        gluonkit.Epochs([], epochs)
