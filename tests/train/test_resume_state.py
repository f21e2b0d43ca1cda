"""Every piece of state a resume needs is captured: each compared with the uninterrupted run."""
import json
import os

import mxnet as mx
import numpy as np
import pytest
from gluoncv.utils.metrics.segmentation import SegmentationMetric
from mxnet import autograd, gluon

import gluonkit
from conftest import params_of
from gluonkit.callbacks import Callback, ModelCheckpoint
from gluonkit.train.checkpoint import Checkpoint, CheckpointError
from gluonkit.train.loop import fit
from gluonkit.train.resume import BatchSizeError
from gluonkit.trainer import Trainer
from small_classifier import assert_same, batches, train
from test_checkpoint_resume import LOADERS, StopAt, assert_same_copies, conv_net, copies_of, cropped, images

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()
TWO = [mx.cpu(0), mx.cpu(1)]


class SaveAt(Callback):
    """Save a checkpoint (with the fit snapshot) after batch ``batch`` of epoch ``epoch``, go on."""

    def __init__(self, directory, epoch, batch):
        self.checkpoint, self.at = Checkpoint(directory), (epoch, batch)

    def on_batch_end(self, state):
        if (state.epoch, state.batch) == self.at:
            self.checkpoint.save(state.net, state.trainer, state.position[0], fit=state.snapshot())


def run(directory, epochs, ctx, *, kind="rollover", resume=False, callbacks=(), accumulate=1,
        batch_size=6, metrics="acc", **trainer_args):
    np.random.seed(0)
    net = conv_net(ctx, seed=5 if resume else 1, batchnorm=True)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.3, "momentum": 0.9},
                      accumulate=accumulate, **trainer_args)
    loader = gluon.data.DataLoader(images(), batch_size=batch_size, shuffle=True, last_batch=kind,
                                   batchify_fn=cropped) \
        if kind in ("rollover", "keep") else LOADERS[kind](images())
    cbs = list(callbacks) + ([ModelCheckpoint(directory, resume=resume)] if directory else [])
    history = fit(net, LOSS, trainer, loader, epochs=epochs, ctx=ctx, metrics=metrics, callbacks=cbs,
                  progress=False)
    return net, history


def test_batchnorm_statistics_per_device_after_a_stop_inside_the_first_window(tmp_path):
    """gluon's kvstore set-up copies device 0's statistics to all devices at the first update:
    a resume (or a save) inside the first window must not set it up earlier."""
    straight, history = run(None, 2, TWO, accumulate=4)
    stats = copies_of(straight)["1.running_mean"]
    assert not np.array_equal(stats[0], stats[1])
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, 2, TWO, accumulate=4, callbacks=[StopAt(0, 2)])
    resumed, resumed_history = run(tmp_path, 2, TWO, accumulate=4, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))
    assert resumed_history["loss"] == history["loss"]


@pytest.mark.parametrize("at", [(0, 2), (1, 3)])
def test_saving_inside_a_window_does_not_change_the_run(tmp_path, at):
    straight, history = run(None, 2, TWO, accumulate=4)
    saved, saved_history = run(None, 2, TWO, accumulate=4, callbacks=[SaveAt(tmp_path, *at)])
    assert_same_copies(copies_of(saved), copies_of(straight))
    assert saved_history["loss"] == history["loss"]
    resumed, resumed_history = run(tmp_path, 2, TWO, accumulate=4, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))


def test_a_mid_epoch_resume_keeps_the_gradient_norms_of_the_updates_before_it(tmp_path):
    # clipping keeps each norm on the device until the tally settles; the snapshot needs them all
    straight, history = run(None, 2, TWO, clip_global_norm=0.5)
    run(None, 1, TWO, clip_global_norm=0.5, callbacks=[SaveAt(tmp_path, 0, 3)])
    _, resumed_history = run(tmp_path, 2, TWO, clip_global_norm=0.5, resume=True)
    assert len(history["grad_norm"]) == 2
    assert resumed_history["grad_norm"] == history["grad_norm"]


def test_a_resume_after_the_first_update_keeps_each_device_statistics(tmp_path):
    straight, _ = run(None, 2, TWO, accumulate=2)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, 2, TWO, accumulate=2, callbacks=[StopAt(0, 5)])
    resumed, _ = run(tmp_path, 2, TWO, accumulate=2, resume=True)
    assert_same_copies(copies_of(resumed), copies_of(straight))


class Poison(gluon.data.Dataset):
    """``images()`` whose samples 3, 11 and 30 hold NaN: their batches' updates are skipped."""

    def __init__(self):
        self.samples = images()

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        x, y = self.samples[i]
        return (x * np.nan if i in (3, 11, 30) else x), y


def skipping_run(directory, epochs, *, resume=False, callbacks=()):
    np.random.seed(0)
    net = conv_net([mx.cpu()], seed=5 if resume else 1)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.3}, on_nonfinite="skip")
    loader = gluon.data.DataLoader(Poison(), batch_size=6, shuffle=True,
                                   batchify_fn=cropped)
    cbs = list(callbacks) + ([ModelCheckpoint(directory, resume=resume)] if directory else [])
    with pytest.warns(UserWarning, match="holds NaN or Inf"):
        history = fit(net, LOSS, trainer, loader, epochs=epochs, metrics="acc", callbacks=cbs,
                      progress=False)
    return net, history


@pytest.mark.filterwarnings("ignore:Skipped an update")
def test_nonfinite_skips_per_epoch_after_a_resume(tmp_path):
    straight, history = skipping_run(None, 3)
    assert sum(history["nonfinite_skips"]) >= 3
    with pytest.raises(KeyboardInterrupt):
        skipping_run(tmp_path, 3, callbacks=[StopAt(1, 5)])
    resumed, resumed_history = skipping_run(tmp_path, 3, resume=True)
    assert resumed_history["nonfinite_skips"] == history["nonfinite_skips"]
    assert_same(params_of(resumed), params_of(straight))


class Segmenter(gluon.nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.conv = gluon.nn.Conv2D(3, 3, padding=1, in_channels=1)

    def hybrid_forward(self, F, x):
        return self.conv(x)


def segmentation_run(directory, epochs, *, resume=False, callbacks=()):
    rng = np.random.RandomState(2)
    x = rng.rand(30, 1, 6, 6).astype("float32")
    y = np.minimum((x[:, 0] * 3).astype("float32"), 2)
    np.random.seed(0)
    mx.random.seed(5 if resume else 1)
    net = Segmenter()
    net.initialize(mx.init.Xavier())
    trainer = Trainer(net, "sgd", {"learning_rate": 0.5})
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=4, shuffle=True)
    cbs = list(callbacks) + ([ModelCheckpoint(directory, resume=resume)] if directory else [])
    history = fit(net, gluon.loss.SoftmaxCrossEntropyLoss(axis=1), trainer, loader, epochs=epochs,
                  metrics=SegmentationMetric(3), callbacks=cbs, progress=False)
    return net, history


def test_ctrl_c_with_a_segmentation_metric_saves_its_sums(tmp_path):
    """GluonCV's SegmentationMetric holds a lock (no copy, no pickle): its sums are saved."""
    straight, history = segmentation_run(None, 2)
    with pytest.raises(KeyboardInterrupt):
        segmentation_run(tmp_path, 2, callbacks=[StopAt(1, 4)])
    resumed, resumed_history = segmentation_run(tmp_path, 2, resume=True)
    assert_same(params_of(resumed), params_of(straight))
    for key in ("loss", "pixAcc", "mIoU"):
        assert resumed_history[key] == history[key], key


def test_a_metric_that_holds_metrics_resumes_in_mid_epoch(tmp_path):
    """CompositeEvalMetric keeps its metrics in a list: each one's sums come back into it."""
    def composite():
        return mx.metric.CompositeEvalMetric(["acc", mx.metric.TopKAccuracy(top_k=2)])
    straight, history = run(None, 2, [mx.cpu()], metrics=composite())
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, 2, [mx.cpu()], metrics=composite(), callbacks=[StopAt(1, 3)])
    resumed, resumed_history = run(tmp_path, 2, [mx.cpu()], metrics=composite(), resume=True)
    assert_same(params_of(resumed), params_of(straight))
    for key in ("loss", "accuracy", "top_k_accuracy_2"):
        assert resumed_history[key] == history[key], key
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "other", 2, [mx.cpu()], metrics=composite(), callbacks=[StopAt(1, 3)])
    with pytest.raises(CheckpointError, match="metric sums do not fit"):
        run(tmp_path / "other", 2, [mx.cpu()], resume=True,
            metrics=mx.metric.CompositeEvalMetric(["acc", mx.metric.MAE()]))


@pytest.mark.parametrize("change, message", [
    ({"batch_size": 3}, r"saved after 3 batches of 6 samples \(18 in all\), but the batches of "
                        r"train_data hold 3 \(9 in its first 3\); resume with batches of 6 samples, "
                        r"the interrupted run's batch size"),
    ({"accumulate": 3}, r"middle of epoch 2: the checkpoint was saved with accumulate=1 on \['cpu\(0\)'\]; "
                        r"this run has accumulate=3 on \['cpu\(0\)'\]"),
    ({"ctx": TWO}, r"saved with accumulate=1 on \['cpu\(0\)'\]; this run has accumulate=1 on "
                   r"\['cpu\(0\)', 'cpu\(1\)'\]"),
])
def test_a_mid_epoch_resume_under_other_settings_is_refused(tmp_path, change, message):
    """Without the check, 3 batches of 3 were skipped where 3 of 6 had been trained."""
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, 2, [mx.cpu()], kind="keep", callbacks=[StopAt(1, 3)])
    saved = sorted(os.listdir(tmp_path))
    settings = {"accumulate": 1, "batch_size": 6, "ctx": [mx.cpu()], **change}
    ctx = settings.pop("ctx")
    with pytest.raises(CheckpointError, match=message):
        run(tmp_path, 2, ctx, kind="keep", resume=True, **settings)
    assert sorted(os.listdir(tmp_path)) == saved


def test_a_rollover_larger_than_a_batch_is_refused(tmp_path):
    run(tmp_path, 1, [mx.cpu()])
    with pytest.raises(BatchSizeError, match=r"sampler state does not fit .*carries 4 samples into the next epoch from "
                                        r"batches of 6 but a batch of this loader holds 3; resume with batches of 6 "
                                        r"samples, the interrupted run's batch size") as refused:
        run(tmp_path, 2, [mx.cpu()], resume=True, batch_size=3)
    assert (refused.value.saved, refused.value.given) == (6, 3)


def test_a_mid_epoch_refusal_names_both_batch_sizes(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, 2, [mx.cpu()], kind="keep", callbacks=[StopAt(1, 3)])
    for size in (4, 12):
        with pytest.raises(BatchSizeError) as refused:
            run(tmp_path, 2, [mx.cpu()], kind="keep", resume=True, batch_size=size)
        assert isinstance(refused.value, CheckpointError)
        assert (refused.value.saved, refused.value.given) == (6, size)
    _, history = run(tmp_path, 2, [mx.cpu()], kind="keep", resume=True, batch_size=6)
    assert len(history["loss"]) == 2


def test_an_epoch_end_resume_under_other_settings_continues_with_them(tmp_path, caplog):
    run(tmp_path, 1, [mx.cpu()])
    with caplog.at_level("WARNING", logger="gluonkit"):
        _, history = run(tmp_path, 2, [mx.cpu()], resume=True, accumulate=2)
    assert "accumulate=1 on ['cpu(0)']; this run has accumulate=2" in caplog.text
    assert len(history["loss"]) == 2


def twin(ctx, seed):
    """A network built in the same process as another: Gluon names it dense2_, dense3_, ..."""
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_state_loads_into_a_twin_whose_names_differ_by_gluon_prefixes(ctx_list, optimizer):
    data = batches([6, 5, 7, 4, 6])
    net = twin(ctx_list, 1)
    trainer = Trainer(net.collect_params(), optimizer, {"learning_rate": 0.05}, accumulate=2)
    train(net, trainer, data[:3], ctx_list)
    state = trainer.state_dict()
    at_save = {name: p.data().asnumpy() for name, p in gluonkit.params.select(net).items()}
    train(net, trainer, data[3:], ctx_list)

    other = twin(ctx_list, 2)
    assert set(other.collect_params()) != set(net.collect_params())
    for name, p in gluonkit.params.select(other).items():
        p.set_data(mx.nd.array(at_save[name]))
    other_trainer = Trainer(other.collect_params(), optimizer, {"learning_rate": 0.05}, accumulate=2)
    other_trainer.load_state_dict(state)
    train(other, other_trainer, data[3:], ctx_list)
    assert_same(params_of(other), params_of(net))


def test_a_state_of_another_network_is_still_refused():
    ctx = [mx.cpu()]
    net = twin(ctx, 1)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    train(net, trainer, batches([4]), ctx)
    mx.random.seed(1)
    wider = gluon.nn.HybridSequential()
    wider.add(gluon.nn.Dense(9, in_units=4, activation="relu"), gluon.nn.Dense(3, in_units=9))
    wider.initialize(ctx=ctx)
    convs = gluon.nn.HybridSequential()
    convs.add(gluon.nn.Conv2D(8, 1, in_channels=4), gluon.nn.Dense(3, in_units=8))
    convs.initialize(ctx=ctx)
    for other in (wider, convs):
        with pytest.raises(ValueError, match="trainer of 4 parameters .* but this trainer has 4"):
            Trainer(other.collect_params(), "sgd", {"learning_rate": 0.05}).load_state_dict(trainer.state_dict())


def json_or_arrays(value, where="state"):
    if isinstance(value, dict):
        assert all(isinstance(k, str) for k in value), where
        for k, v in value.items():
            json_or_arrays(v, f"{where}[{k!r}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            json_or_arrays(v, f"{where}[{i}]")
    else:
        assert value is None or type(value) in (bool, int, float, str, np.ndarray), (where, type(value))


def test_state_dict_holds_json_values_and_arrays_only():
    ctx = TWO
    net = twin(ctx, 1)
    scheduler = mx.lr_scheduler.MultiFactorScheduler([2, 4], factor=0.5, base_lr=0.1)
    trainer = Trainer(net, "adam", {"lr_scheduler": scheduler, "multi_precision": False}, accumulate=2,
                      on_nonfinite="skip")
    train(net, trainer, batches([5, 6, 4]), ctx)
    state = trainer.state_dict()
    json_or_arrays(state)
    assert state["optimizer"]["lr_scheduler"]["type"] == "MultiFactorScheduler"


def test_a_learning_rate_scheduler_resumes_exactly():
    ctx = [mx.cpu()]
    data = batches([5, 6, 4, 3, 7, 5, 6, 4])

    def build(seed):
        net = twin(ctx, seed)
        scheduler = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.2)
        return net, Trainer(net, "sgd", {"lr_scheduler": scheduler, "momentum": 0.9})

    net, trainer = build(1)
    train(net, trainer, data[:5], ctx)
    state = trainer.state_dict()
    at_save = params_of(net)
    train(net, trainer, data[5:], ctx)
    other, other_trainer = build(2)
    for name, p in gluonkit.params.select(other).items():
        p.set_data(mx.nd.array(at_save[name]))
    other_trainer.load_state_dict(state)
    train(other, other_trainer, data[5:], ctx)
    assert_same(params_of(other), params_of(net))
    assert other_trainer.learning_rate == trainer.learning_rate


class Halving:
    """A scheduler holding an object: it cannot be stored as JSON."""

    def __init__(self):
        self.base_lr = 0.1
        self.table = object()

    def __call__(self, num_update):
        return self.base_lr


def test_a_scheduler_that_cannot_be_stored_is_refused_by_name():
    net = twin([mx.cpu()], 1)
    trainer = Trainer(net, "sgd", {"lr_scheduler": Halving()})
    with pytest.raises(ValueError, match=r"lr_scheduler \(Halving\) holds 'table', a object, .*LRSchedule"):
        trainer.state_dict()


def test_a_scheduler_of_another_type_is_refused():
    net = twin([mx.cpu()], 1)
    trainer = Trainer(net, "sgd", {"lr_scheduler": mx.lr_scheduler.FactorScheduler(step=2, base_lr=0.1)})
    with pytest.raises(ValueError, match="saved with lr_scheduler FactorScheduler but the trainer's optimizer "
                                         "has None"):
        Trainer(twin([mx.cpu()], 1), "sgd").load_state_dict(trainer.state_dict())


def test_reading_the_state_does_not_set_up_the_kvstore():
    """Two trainers, one whose state is read inside its first window: same statistics per device."""
    results = []
    for read in (False, True):
        np.random.seed(0)
        net = conv_net(TWO, seed=1, batchnorm=True)
        trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.3}, accumulate=3)
        for i, (x, y) in enumerate(gluon.data.DataLoader(images(), batch_size=6,
                                                         batchify_fn=cropped)):
            xs, ys = gluonkit.split_and_load(x, TWO), gluonkit.split_and_load(y, TWO)
            with autograd.record():
                losses = [LOSS(net(a), b) for a, b in zip(xs, ys)]
            autograd.backward(losses)
            trainer.step(x.shape[0])
            if read and i == 1:
                json.dumps(trainer.state_dict()["pending"])
        results.append(copies_of(net))
    assert_same_copies(results[1], results[0])
