"""A snapshot on global batches, cut anew for another number of workers: where each worker is,
and what is refused (one process here; tests/distributed/test_resume_on_other_workers.py runs
real jobs of 1, 2 and 3 workers)."""
import os
import signal

import mxnet as mx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import Callback, ModelCheckpoint
from gluonkit.data import GlobalBatchSampler, global_loader
from gluonkit.train.reshard import global_position, global_sampler, reshard

SAMPLES, BATCH, MICRO = 100, 16, 4     # 7 global batches an epoch, 4 micro-batches of 4 in each


class Flat(gluon.data.Dataset):
    """The digits, flattened."""

    def __init__(self):
        self.data = gluonkit.data.digits()

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        x, y = self.data[i]
        return x.reshape(-1), y


class At(Callback):
    """After micro-batch ``batch`` of epoch ``epoch + 1`` (2 by default): send SIGTERM to this
    process, or save a checkpoint."""

    def __init__(self, batch, save_into=None, epoch=1):
        self.batch, self.save_into, self.epoch = batch, save_into, epoch

    def on_batch_end(self, state):
        if state.epoch != self.epoch or state.batch != self.batch:
            return
        if self.save_into is None:
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            gluonkit.Checkpoint(self.save_into).save(state.net, state.trainer, 1, fit=state.snapshot(), workers=1)


def _fit(callbacks, loader=None, epochs=2):
    mx.random.seed(0)
    net = gluon.nn.Dense(10, in_units=64)
    net.initialize()
    loader = loader or global_loader(Flat(), BATCH, MICRO, seed=0)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                               accumulate=global_sampler(loader).accumulate if global_sampler(loader) else 1)
    gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, loader, epochs=epochs, progress=False,
                 callbacks=callbacks)
    return net


def _snapshot(path):
    state = gluonkit.Checkpoint.saved_state(path)
    return state["fit"]


def test_one_process_on_global_batches_stops_between_updates_and_its_position_is_global(tmp_path):
    folder = str(tmp_path / "ckpt")
    with pytest.raises(SystemExit):   # SIGTERM after micro-batch 5: inside the second update's window of 4
        _fit([At(5), ModelCheckpoint(folder)])
    path = gluonkit.Checkpoint(folder).latest
    snap = _snapshot(path)
    assert (snap["epoch"], snap["batch"]) == (1, 8)   # the window closed: 2 updates of epoch 2 done
    plan = {"length": SAMPLES, "batch_size": BATCH, "micro_batch": MICRO, "seed": 0, "shuffle": True,
            "last_batch": "keep", "sizes": None, "interval": 1}
    assert snap["global"] == {"workers": 1, "updates": 2, "pending": 0, "plan": plan}
    earlier = {**snap, "global": {**snap["global"], "plan": {k: v for k, v in plan.items()
                                                             if k not in ("sizes", "interval")}}}
    for rank, own in enumerate((4, 2, 2)):   # micro-batch j of a global batch goes to worker j % 3
        sampler = GlobalBatchSampler(SAMPLES, BATCH, MICRO, rank, 3, seed=0)
        mine = reshard(snap, 1, sampler, 3, path)
        assert (mine["batch"], mine["batch_samples"], mine["batch_size"]) == (own, own * MICRO, MICRO)
        assert reshard(earlier, 1, sampler, 3, path)["batch"] == own   # a plan saved before it held sizes
    sized = GlobalBatchSampler(SAMPLES, BATCH, MICRO, 0, 3, seed=0, sizes=[32, 48])
    with pytest.raises(gluonkit.CheckpointError, match=r"of sizes=None, and this run's have sizes=\[\[32, 32\], "
                                                       r"\[48, 48\]\]"):
        reshard(snap, 1, sized, 3, path)
        assert mine["settings"]["accumulate"] == sampler.accumulate and mine["global"]["workers"] == 3
        assert mine["step"] == snap["step"] == 7 + 2


def test_what_another_number_of_workers_cannot_continue_is_refused_naming_why(tmp_path):
    mid_window = str(tmp_path / "window")
    _fit([At(3, save_into=mid_window)])
    path = gluonkit.Checkpoint(mid_window).latest
    snap = _snapshot(path)
    two = GlobalBatchSampler(SAMPLES, BATCH, MICRO, 0, 2, seed=0)
    with pytest.raises(gluonkit.CheckpointError, match=r"was saved by a job of 1 worker\(s\) and this one has 2: it "
                       r"was saved in the middle of an update \(3 micro-batch\(es\) accumulated and not yet "
                       r"applied.*resume with 1 worker\(s\), or from a checkpoint between updates"):
        reshard(snap, 1, two, 2, path)
    between = {**snap, "batch": 4, "global": {**snap["global"], "updates": 1, "pending": 0}}
    coarser = GlobalBatchSampler(SAMPLES, BATCH, 8, 0, 2, seed=0)
    with pytest.raises(gluonkit.CheckpointError, match=r"in the middle of epoch 2 on global batches of "
                       r"micro_batch=4, and this run's have micro_batch=8, so the rest of the epoch"):
        reshard(between, 1, coarser, 2, path)
    at_the_end = {**between, "epoch": 2, "batch": 0, "global": {**between["global"], "updates": 0}}
    assert reshard(at_the_end, 1, coarser, 2, path)["settings"]["accumulate"] == 1   # may change there
    with pytest.raises(gluonkit.CheckpointError, match=r"this run's train_data is not on global batches"):
        reshard(between, 1, None, 2, path)

    shards = str(tmp_path / "shards")
    _fit([ModelCheckpoint(shards)], loader=gluon.data.DataLoader(Flat(), batch_size=BATCH), epochs=1)
    path = gluonkit.Checkpoint(shards).latest
    with pytest.raises(gluonkit.CheckpointError, match=r"it was not trained on global batches .* resume with 1 "
                       r"worker\(s\), or start without resuming\.$"):
        reshard(_snapshot(path), 1, two, 2, path)


@settings(max_examples=60, deadline=None)
@given(length=st.integers(8, 80), batch=st.integers(2, 24), micro=st.integers(1, 12), saved_by=st.integers(1, 4),
       workers=st.integers(1, 4), data=st.data())
def test_the_new_workers_shares_of_the_updates_done_hold_those_updates_samples_once(length, batch, micro, saved_by,
                                                                                     workers, data):
    micro = min(micro, batch)
    if -(-batch // micro) < max(saved_by, workers):
        return
    saver = GlobalBatchSampler(length, batch, micro, 0, saved_by, seed=3)
    updates = data.draw(st.integers(1, saver.updates_per_epoch))
    snap = {"epoch": 0, "batch": 1, "settings": {"accumulate": saver.accumulate, "devices": ["cpu(0)"]},
            "global": global_position(saver, updates, 0, saved_by)}
    taken = []
    for rank in range(workers):
        sampler = GlobalBatchSampler(length, batch, micro, rank, workers, seed=3)
        mine = reshard(snap, saved_by, sampler, workers, "ckpt")
        yielded = list(iter(sampler))[:mine["batch"]]   # what the resumed worker skips
        assert sum(map(len, yielded)) == mine["batch_samples"]
        taken += [i for b in yielded for i in b]
    assert sorted(taken) == sorted(saver.order(0)[:min(updates * batch, length)].tolist())


def test_the_stop_and_resume_lines_count_updates_not_a_workers_micro_batches(tmp_path, caplog):
    caplog.set_level("INFO", logger="gluonkit")
    folder = str(tmp_path / "ckpt")
    with pytest.raises(SystemExit):   # SIGTERM after micro-batch 5: it stops after 8, the second update
        _fit([At(5), ModelCheckpoint(folder)])
    assert "training stopped by SIGTERM after 1 epoch(s) and 2 update(s)." in caplog.text
    path = gluonkit.Checkpoint(folder).latest
    _fit([ModelCheckpoint(folder, resume=True)])
    assert f"Resumed from {path}: 1 epoch(s) and 2 update(s) done." in caplog.text
    # 3 workers would each resume 2 updates, in 4, 2 and 2 of their own micro-batches
    snap = _snapshot(path)
    assert [reshard(snap, 1, GlobalBatchSampler(SAMPLES, BATCH, MICRO, rank, 3, seed=0), 3, path)["updates"]
            for rank in range(3)] == [2, 2, 2]


def test_global_batches_cut_otherwise_in_mid_epoch_name_the_checkpoint_of_the_epochs_end_to_resume(tmp_path):
    folder = str(tmp_path / "ckpt")
    with pytest.raises(SystemExit):
        _fit([At(5), ModelCheckpoint(folder)])
    epoch_end, stop = gluonkit.Checkpoint(folder).paths
    coarser = GlobalBatchSampler(SAMPLES, BATCH, 8, 0, 2, seed=0)
    with pytest.raises(gluonkit.CheckpointError) as refused:
        reshard(_snapshot(stop), 1, coarser, 2, stop)
    assert str(refused.value).endswith(
        f"so the rest of the epoch would not be the one interrupted; resume with 1 worker(s), or from the end of "
        f"an epoch: move {stop} out of {folder}, and the same resume goes on from {epoch_end}.")
    os.rename(stop, str(tmp_path / "aside.ckpt"))   # as the message says: the epoch's end resumes on 2
    assert gluonkit.Checkpoint(folder).latest == epoch_end
    assert reshard(_snapshot(epoch_end), 1, coarser, 2, epoch_end)["batch"] == 0

    first = str(tmp_path / "first")
    with pytest.raises(SystemExit):   # stopped in epoch 1: no epoch's end to go back to
        _fit([At(5, epoch=0), ModelCheckpoint(first)])
    stop = gluonkit.Checkpoint(first).latest
    with pytest.raises(gluonkit.CheckpointError, match=r"resume with 1 worker\(s\), or start without resuming "
                       r"\(no checkpoint of an epoch's end precedes it\)\.$"):
        reshard(_snapshot(stop), 1, coarser, 2, stop)
