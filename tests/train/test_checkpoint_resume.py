"""Exact resumption through fit: gluonkit's samplers, gluon's rollover of the last batch,
BatchNorm statistics per device, mid-epoch saves."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluonkit.data import bucket_loader, multiscale_loader
from gluonkit.params import select
from gluonkit.callbacks import Callback, ModelCheckpoint
from gluonkit.train.checkpoint import Checkpoint
from gluonkit.train.loop import fit
from gluonkit.trainer import Trainer

from conftest import StopAt

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def images(n=40, seed=3):
    """Single-channel images of 6 to 13 pixels a side, labelled by their mean brightness."""
    rng = np.random.RandomState(seed)
    samples = []
    for _ in range(n):
        image = rng.rand(1, rng.randint(6, 14), rng.randint(6, 14)).astype("float32")
        samples.append((image, np.int32(image.mean() * 6) % 3))
    return gluon.data.SimpleDataset(samples)


def conv_net(ctx, seed, batchnorm=False, dropout=0.0):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=1, padding=1))
    if batchnorm:
        net.add(gluon.nn.BatchNorm(in_channels=4))
    net.add(gluon.nn.Activation("relu"), gluon.nn.GlobalAvgPool2D(), gluon.nn.Flatten())
    if dropout:
        net.add(gluon.nn.Dropout(dropout))
    net.add(gluon.nn.Dense(3, in_units=4))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def copies_of(net):
    """Every parameter's value on every device."""
    return {k: [d.asnumpy() for d in p.list_data()] for k, p in select(net).items()}


def assert_same_copies(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert len(a[k]) == len(b[k]), k
        for i, (x, y) in enumerate(zip(a[k], b[k])):
            np.testing.assert_array_equal(x, y, err_msg=f"{k} on device {i}")


def cropped(samples):
    """A batch of the images' top-left 6x6 pixels (for gluon's own DataLoader)."""
    return (mx.nd.array(np.stack([x[:, :6, :6] for x, _ in samples])),
            mx.nd.array([y for _, y in samples]))


LOADERS = {
    "bucket": lambda data: bucket_loader(data, batch_size=6, buckets=3, mode="resize", seed=0),
    "multiscale": lambda data: multiscale_loader(data, batch_size=6, sizes=[8, 10, 12], seed=0),
    "bucket-rollover": lambda data: bucket_loader(data, batch_size=6, buckets=3, mode="resize", seed=0,
                                                  last_batch="rollover"),
    "multiscale-rollover": lambda data: multiscale_loader(data, batch_size=6, sizes=[8, 10, 12], seed=0,
                                                          last_batch="rollover"),
    # 40 samples in batches of 6: the 4 left over start the next epoch, 2 the one after
    "rollover": lambda data: gluon.data.DataLoader(data, batch_size=6, shuffle=True,
                                                   last_batch="rollover", batchify_fn=cropped),
}




def run(directory, epochs, kind, ctx, *, resume=False, callbacks=(), seed=1, **net_args):
    np.random.seed(0)             # gluon's shuffle draws from NumPy (a resume restores its state)
    net = conv_net(ctx, seed=5 if resume else seed, **net_args)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.3, "momentum": 0.9})
    cbs = list(callbacks) + ([ModelCheckpoint(directory, resume=resume)] if directory else [])
    history = fit(net, LOSS, trainer, LOADERS[kind](images()), epochs=epochs, ctx=ctx,
                  metrics="acc", callbacks=cbs, progress=False)
    return net, history


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_one_epoch_then_resume_equals_two_straight(tmp_path, kind):
    """The sampler's epoch is saved: resuming replays epoch 2's order and sizes, not epoch 1's."""
    ctx = [mx.cpu()]
    straight, history = run(None, 2, kind, ctx)
    run(tmp_path, 1, kind, ctx)
    resumed, resumed_history = run(tmp_path, 2, kind, ctx, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))
    assert resumed_history["loss"] == history["loss"]


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_stop_mid_epoch_then_resume_equals_straight(tmp_path, kind):
    ctx = [mx.cpu()]
    straight, history = run(None, 3, kind, ctx)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, 3, kind, ctx, callbacks=[StopAt(1, 3)])
    resumed, resumed_history = run(tmp_path, 3, kind, ctx, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))
    assert resumed_history["loss"] == history["loss"]


def test_batchnorm_statistics_of_each_device_are_restored_on_it(tmp_path):
    ctx = [mx.cpu(0), mx.cpu(1)]
    straight, history = run(None, 2, "bucket", ctx, batchnorm=True)
    stats = copies_of(straight)["1.running_mean"]
    assert not np.array_equal(stats[0], stats[1])     # each device saw other samples
    first, _ = run(tmp_path, 1, "bucket", ctx, batchnorm=True)
    fresh = conv_net(ctx, seed=7, batchnorm=True)
    Checkpoint(tmp_path).load(fresh)
    assert_same_copies(copies_of(fresh), copies_of(first))
    resumed, resumed_history = run(tmp_path, 2, "bucket", ctx, batchnorm=True, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))
    assert resumed_history["loss"] == history["loss"]


def test_a_stop_inside_an_accumulation_window_says_the_updates_and_the_batches_of_the_next(tmp_path, caplog):
    caplog.set_level("INFO", logger="gluonkit")
    loader = gluon.data.DataLoader(images(), batch_size=4, batchify_fn=cropped)

    def three_batches_an_update(callbacks):
        net = conv_net([mx.cpu()], seed=1)
        trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=3)
        fit(net, LOSS, trainer, loader, epochs=2, callbacks=callbacks, progress=False)

    with pytest.raises(KeyboardInterrupt, match=r"^training stopped by SIGINT after 1 epoch\(s\) and 1 update\(s\) "
                                                r"\(and 2 batch\(es\) of the next update\)$"):
        three_batches_an_update([StopAt(1, 5), ModelCheckpoint(tmp_path)])   # batch 5 of 10 in epoch 2
    path = Checkpoint(tmp_path).latest
    three_batches_an_update([ModelCheckpoint(tmp_path, resume=True)])
    assert (f"Resumed from {path}: 1 epoch(s) and 1 update(s) (and 2 batch(es) of the next update) done."
            in caplog.text)


class SaveAt(Callback):
    """Save a mid-epoch checkpoint at batch ``batch`` of epoch ``epoch`` and go on training."""

    def __init__(self, checkpoint, epoch, batch):
        self.checkpoint, self.at = checkpoint, (epoch, batch)

    def on_batch_end(self, state):
        if (state.epoch, state.batch) == self.at:
            self.checkpoint.save(state.net, state.trainer, state.position[0], fit=state.snapshot())


def test_mid_epoch_save_with_dropout_resumes_exactly(tmp_path):
    """The snapshot reseeds MXNet and keeps the seed: the dropout masks after it match."""
    ctx = [mx.cpu()]
    np.random.seed(0)
    ckpt = Checkpoint(tmp_path)
    straight, history = run(None, 2, "bucket", ctx, dropout=0.5, callbacks=[SaveAt(ckpt, 1, 2)])
    np.random.seed(99)
    resumed, resumed_history = run(tmp_path, 2, "bucket", ctx, dropout=0.5, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))
    assert resumed_history["loss"] == history["loss"]
