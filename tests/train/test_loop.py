"""fit(): equals hand-written Gluon loops, resumes exactly (also after SIGINT/SIGTERM), checks input."""
import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from conftest import params_of
from gluonkit.callbacks import Callback, ModelCheckpoint
from gluonkit.train.evaluate import evaluate
from gluonkit.train.loop import fit
from gluonkit.train.tally import Tally
from gluonkit.trainer import Trainer

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()
TIMING = ("time", "samples_per_sec")


def make_data(n=48, seed=3):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 6).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32") + (x[:, 2] > 1).astype("int32")
    return x, y


def make_net(ctx, dropout=0.0, hybridize=False, seed=1):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, in_units=6, activation="relu"))
    if dropout:
        net.add(gluon.nn.Dropout(dropout))
    net.add(gluon.nn.Dense(3, in_units=16))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    if hybridize:
        net.hybridize()
    return net


def sgd(net, trainer_cls=Trainer, **kwargs):
    return trainer_cls(net.collect_params(), "sgd",
                       {"learning_rate": 0.2, "momentum": 0.9, "wd": 1e-3}, **kwargs)


def loader(x, y, batch_size=8, shuffle=False):
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=batch_size,
                                 shuffle=shuffle, last_batch="keep")


def assert_params(a, b, exact=True):
    for k in a:
        if exact:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


def without_timing(history):
    return {k: v for k, v in history.items() if k not in TIMING}


class RunningLogs(Callback):
    def __init__(self):
        self.seen, self.at_epoch_begin = [], []

    def on_epoch_begin(self, state):
        self.at_epoch_begin.append(dict(state.logs))

    def on_batch_end(self, state):
        self.seen.append((state.logs["loss"], state.logs["accuracy"]))


@pytest.mark.parametrize("read_logs", [True, False], ids=["logs-read", "metrics-grouped"])
def test_fit_equals_a_hand_written_gluon_loop(ctx_list, hybridize, read_logs, monkeypatch):
    monkeypatch.setattr(Tally, "METRIC_BATCHES", 4)   # 6 batches per epoch: a group and a rest
    x, y = make_data()
    np.random.seed(11)
    net = make_net(ctx_list, hybridize=hybridize)
    running = RunningLogs()
    history = fit(net, LOSS, sgd(net), loader(x, y, shuffle=True), epochs=3, ctx=ctx_list,
                  val_data=loader(x[:20], y[:20]), metrics="acc",
                  callbacks=[running] if read_logs else [], progress=False)

    np.random.seed(11)
    ref = make_net(ctx_list, hybridize=hybridize)
    trainer = sgd(ref, gluon.Trainer)
    losses, accs, running_ref = [], [], []
    for _ in range(3):
        total, correct, seen = 0.0, 0, 0
        for xb, yb in loader(x, y, shuffle=True):
            xs = gluon.utils.split_and_load(xb, ctx_list)
            ys = gluon.utils.split_and_load(yb, ctx_list)
            with autograd.record():
                outs = [ref(a) for a in xs]
                ls = [LOSS(o, b) for o, b in zip(outs, ys)]
            for value in ls:
                value.backward()
            trainer.step(xb.shape[0])
            total += sum(v.sum().asscalar() for v in ls)
            correct += sum(int((o.argmax(axis=1).astype("int32") == b).sum().asscalar())
                           for o, b in zip(outs, ys))
            seen += xb.shape[0]
            running_ref.append((total / seen, correct / seen))
        losses.append(total / len(x))
        accs.append(correct / len(x))
    assert_params(params_of(net), params_of(ref))
    np.testing.assert_allclose(history["loss"], losses, rtol=1e-5)
    np.testing.assert_allclose(history["accuracy"], accs)
    if read_logs:   # callbacks see every batch counted, the one just trained included
        np.testing.assert_allclose(running.seen, running_ref, rtol=1e-5)
        # and, when an epoch begins, the row of the one before
        assert running.at_epoch_begin[0] == {}
        assert [row["epoch"] for row in running.at_epoch_begin[1:]] == [1, 2]
        assert running.at_epoch_begin[2]["val_accuracy"] == history["val_accuracy"][1]
    predicted = ref(mx.nd.array(x[:20], ctx=ctx_list[0])).argmax(axis=1).asnumpy()
    assert history["val_accuracy"][-1] == pytest.approx(np.mean(predicted == y[:20]))
    assert history["epoch"] == [1, 2, 3]
    assert history["lr"] == [0.2] * 3
    assert set(history) == {"epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr",
                            "samples_per_sec", "time"}
    assert all(v > 0 for v in history["samples_per_sec"] + history["time"])


def test_accumulation_and_uneven_windows_equal_big_batches(ctx_list):
    x, y = make_data(36)          # batches 8 8 8 8 4 -> windows of 16, 16 and 4 (flushed)
    net = make_net(ctx_list)
    history = fit(net, LOSS, sgd(net, accumulate=2), loader(x, y, batch_size=8), epochs=2,
                  ctx=ctx_list, progress=False)

    ref = make_net([mx.cpu()])
    trainer = sgd(ref, gluon.Trainer)
    losses = []
    for _ in range(2):
        total = 0.0
        for begin, end in [(0, 16), (16, 32), (32, 36)]:
            with autograd.record():
                value = LOSS(ref(mx.nd.array(x[begin:end])), mx.nd.array(y[begin:end]))
            value.backward()
            trainer.step(end - begin)
            total += value.sum().asscalar()
        losses.append(total / len(x))
    assert_params(params_of(net), params_of(ref), exact=False)
    np.testing.assert_allclose(history["loss"], losses, rtol=1e-5)


class StopAt(Callback):
    """Send ``sig`` to this process after batch ``batch`` of epoch ``epoch`` (0-based)."""

    def __init__(self, epoch, batch, sig):
        self.at, self.sig = (epoch, batch), sig

    def on_batch_end(self, state):
        if (state.epoch, state.batch) == self.at:
            os.kill(os.getpid(), self.sig)


def run(tmp_path, name, epochs, ctx, dropout=0.0, accumulate=1, callbacks=(), resume=False):
    x, y = make_data(44)
    net = make_net(ctx, dropout=dropout, seed=5 if resume else 1)
    cbs = list(callbacks)
    if name:
        cbs.append(ModelCheckpoint(tmp_path / name, resume=resume))
    history = fit(net, LOSS, sgd(net, accumulate=accumulate), loader(x, y, shuffle=True),
                  epochs=epochs, ctx=ctx, metrics="acc", callbacks=cbs, progress=False)
    return params_of(net), history


def test_resume_after_two_epochs_equals_four_straight_with_dropout(tmp_path, ctx_list):
    np.random.seed(0)
    straight, history = run(tmp_path, "a", 4, ctx_list, dropout=0.3)
    np.random.seed(0)
    plain, plain_history = run(tmp_path, None, 4, ctx_list, dropout=0.3)
    assert_params(plain, straight)          # checkpointing does not change training
    np.random.seed(0)
    run(tmp_path, "b", 2, ctx_list, dropout=0.3)
    np.random.seed(123)                     # the checkpoint restores the generators
    resumed, resumed_history = run(tmp_path, "b", 4, ctx_list, dropout=0.3, resume=True)
    assert_params(resumed, straight)
    assert without_timing(resumed_history) == without_timing(history) == without_timing(plain_history)


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt),
                                         (signal.SIGTERM, SystemExit)])
def test_signal_mid_epoch_saves_and_resumes_exactly(tmp_path, ctx_list, sig, raised, monkeypatch):
    monkeypatch.setattr(Tally, "METRIC_BATCHES", 2)   # the stop comes with a batch still queued
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    np.random.seed(0)
    straight, history = run(tmp_path, "a", 3, ctx_list, accumulate=2)
    np.random.seed(0)
    with pytest.raises(raised) as info:     # batch 3 of epoch 2: mid-window
        run(tmp_path, "b", 3, ctx_list, accumulate=2, callbacks=[StopAt(1, 3, sig)])
    if raised is SystemExit:
        assert info.value.code == 128 + signal.SIGTERM
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert len(os.listdir(tmp_path / "b")) == 2             # after epoch 1, and at the stop
    resumed, resumed_history = run(tmp_path, "b", 3, ctx_list, accumulate=2, resume=True)
    assert_params(resumed, straight)
    assert resumed_history["loss"] == history["loss"]
    assert resumed_history["accuracy"] == history["accuracy"]


CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np, mxnet as mx
    sys.path[:0] = [{tests!r}, {tests!r} + "/.."]
    from test_loop import make_data, make_net, sgd, loader, params_of, LOSS
    from gluonkit.callbacks import Callback, ModelCheckpoint
    from gluonkit.train.loop import fit

    class WaitForSignal(Callback):
        def on_batch_end(self, state):
            if (state.epoch, state.batch) == (1, 2):
                print("READY", flush=True)
                deadline = time.time() + 60
                while state.interrupted is None and time.time() < deadline:
                    time.sleep(0.01)

    out, mode = sys.argv[1], sys.argv[2]
    np.random.seed(0)
    x, y = make_data(44)
    net = make_net([mx.cpu()], seed=1 if mode != "resume" else 9)
    callbacks = [ModelCheckpoint(out + "/ckpt", resume=mode == "resume")]
    if mode == "stop":
        callbacks.append(WaitForSignal())
    fit(net, LOSS, sgd(net, accumulate=2), loader(x, y, shuffle=True), epochs=4,
        callbacks=callbacks, progress=False)
    np.savez(out + "/params.npz", **params_of(net))
""")


def test_sigterm_to_a_training_subprocess_then_resume(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=os.path.dirname(os.path.abspath(__file__))))

    def child(out, mode):
        return subprocess.run([sys.executable, str(script), str(out), mode], capture_output=True,
                              text=True, timeout=90)

    straight = child(tmp_path / "straight", "straight")
    assert straight.returncode == 0, straight.stderr
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "stopped"), "stop"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        timer = threading.Timer(90, proc.kill)
        timer.start()
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        timer.cancel()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM received" in err
    assert not (tmp_path / "stopped" / "params.npz").exists()
    resumed = child(tmp_path / "stopped", "resume")
    assert resumed.returncode == 0, resumed.stderr
    a = np.load(tmp_path / "straight" / "params.npz")
    b = np.load(tmp_path / "stopped" / "params.npz")
    assert a.files == b.files
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_fit_traces_a_builtin_loss_once_and_runs_other_losses_as_they_are(monkeypatch):
    """A loss of mxnet.gluon.loss runs as a cached graph (traced once, not called per batch),
    the caller's loss block untouched; a custom loss that cannot be hybridized still works."""
    from gluonkit.train.batches import LossGraph

    traced = []
    original = LossGraph.hybrid_forward
    monkeypatch.setattr(LossGraph, "hybrid_forward",
                        lambda self, F, *args: traced.append(F) or original(self, F, *args))
    x, y = make_data()
    net = make_net(mx.cpu())
    fit(net, LOSS, sgd(net), loader(x, y), epochs=2, progress=False)
    assert traced == [mx.sym]   # 12 batches of one shape: one trace
    assert not LOSS._active     # the caller's loss is not hybridized behind its back

    class HostLoss(gluon.loss.Loss):   # reads a value on the host: not hybridizable
        def __init__(self):
            super().__init__(weight=None, batch_axis=0)

        def hybrid_forward(self, F, pred, label):
            scale = float(pred.max().asscalar() > -1e9)
            return LOSS(pred, label) * scale

    net = make_net(mx.cpu())
    history = fit(net, HostLoss(), sgd(net), loader(x, y), epochs=1, progress=False)
    ref = make_net(mx.cpu())
    reference = fit(ref, LOSS, sgd(ref), loader(x, y), epochs=1, progress=False)
    assert_params(params_of(net), params_of(ref))
    np.testing.assert_allclose(history["loss"], reference["loss"], rtol=1e-6)


def test_signal_handlers_are_restored_and_fit_runs_off_the_main_thread():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    x, y = make_data(16)
    net = make_net([mx.cpu()])
    result = {}
    worker = threading.Thread(target=lambda: result.update(
        fit(net, LOSS, sgd(net), loader(x, y), epochs=1, progress=False)))
    worker.start()
    worker.join(60)
    assert result["epoch"] == [1]
    fit(net, LOSS, sgd(net), loader(x, y), epochs=1, progress=False)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_progress_bar_and_log_summary(capsys, caplog):
    x, y = make_data(16)
    net = make_net([mx.cpu()])
    with caplog.at_level(logging.INFO, logger="gluonkit"):
        fit(net, LOSS, sgd(net), loader(x, y), epochs=2, metrics="acc", progress=True)
    err = capsys.readouterr().err
    assert "epoch 2/2" in err and "samples/s" in err and "accuracy=" in err
    lines = [r.getMessage() for r in caplog.records if r.name == "gluonkit"]
    assert len(lines) == 2 and lines[1].startswith("epoch 2/2: loss ")
    fit(net, LOSS, sgd(net), loader(x, y), epochs=1, progress=False)
    assert capsys.readouterr().err == ""


def test_metric_names_and_objects():
    x, y = make_data(24)
    net = make_net([mx.cpu()])
    history = fit(net, LOSS, sgd(net), loader(x, y), epochs=1, val_data=loader(x, y),
                  metrics=["acc", mx.metric.TopKAccuracy(2)], progress=False)
    assert {"accuracy", "top_k_accuracy_2", "val_accuracy", "val_top_k_accuracy_2"} <= set(history)
    scores = net(mx.nd.array(x)).asnumpy()
    top2 = np.argsort(-scores, axis=1)[:, :2]
    assert history["val_top_k_accuracy_2"][0] == pytest.approx(np.mean((top2 == y[:, None]).any(1)))
    assert evaluate(net, loader(x, y))["accuracy"] == pytest.approx(np.mean(scores.argmax(1) == y))
    assert evaluate(net, loader(x, y), loss=LOSS)["loss"] == pytest.approx(history["val_loss"][0])


def test_input_errors():
    x, y = make_data(16)
    net = make_net([mx.cpu()])
    trainer = sgd(net)
    data = loader(x, y)
    for epochs, error in ((-1, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(error, match=r"epochs .*must be an integer >= 0"):
            fit(net, LOSS, trainer, data, epochs=epochs, progress=False)
    with pytest.raises(ValueError, match="train_data yielded no batches in epoch 1"):
        fit(net, LOSS, trainer, [], epochs=1, progress=False)
    once = ((mx.nd.array(x[i:i + 8]), mx.nd.array(y[i:i + 8])) for i in (0, 8))
    with pytest.raises(ValueError, match="no batches in epoch 2.*generator"):
        fit(net, LOSS, trainer, once, epochs=2, progress=False)
    with pytest.raises(TypeError, match=r"\(data, label\) pairs, but batch 0 is a NDArray"):
        fit(net, LOSS, trainer, [mx.nd.array(x)], epochs=1, progress=False)
    with pytest.raises(TypeError, match="batch 0 is a tuple of length 3"):
        fit(net, LOSS, trainer, [(x, y, y)], epochs=1, progress=False)
    with pytest.raises(TypeError, match="holds list and list; data and label must be NDArrays"):
        fit(net, LOSS, trainer, [([1, 2], [0, 1])], epochs=1, progress=False)
    with pytest.raises(ValueError, match="16 samples of data but 4 labels"):
        fit(net, LOSS, trainer, [(x, y[:4])], epochs=1, progress=False)
    with pytest.raises(ValueError, match="val_data yielded no batches"):
        fit(net, LOSS, trainer, data, epochs=1, val_data=[], progress=False)
    with pytest.raises(ValueError, match="one value per sample"):
        fit(net, lambda out, label: LOSS(out, label).mean(), trainer, data, epochs=1,
            progress=False)
    with pytest.raises(ValueError, match="Unknown metric 'acuracy'"):
        fit(net, LOSS, trainer, data, epochs=1, metrics="acuracy", progress=False)
    with pytest.raises(TypeError, match="Callback instances"):
        fit(net, LOSS, trainer, data, epochs=1, callbacks=[print], progress=False)
    with pytest.raises(TypeError, match="trainer must be a gluon.Trainer"):
        fit(net, LOSS, "sgd", data, epochs=1, progress=False)


def test_fit_reports_updates_skipped_for_nonfinite_gradients():
    """A batch with a NaN label is dropped whole: the result equals training without it."""
    rng = np.random.RandomState(3)
    x, y = rng.randn(12, 4).astype("float32"), rng.randn(12, 3).astype("float32")
    poisoned = y.copy()
    poisoned[5, 1] = np.nan

    def train(data, label):
        net = mx.gluon.nn.Dense(3, in_units=4)
        net.initialize(mx.init.Constant(0.1))
        trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                          on_nonfinite="skip")
        loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(data, label), batch_size=4)
        with pytest.warns(UserWarning) if np.isnan(label).any() else contextlib.nullcontext():
            history = fit(net, mx.gluon.loss.L2Loss(), trainer, loader, epochs=2, progress=False)
        return net, history

    net, history = train(x, poisoned)
    clean_rows = np.r_[0:4, 8:12]
    ref, ref_history = train(x[clean_rows], y[clean_rows])
    assert history["nonfinite_skips"] == [1, 1]
    assert ref_history["nonfinite_skips"] == [0, 0]
    np.testing.assert_array_equal(net.weight.data().asnumpy(), ref.weight.data().asnumpy())


def test_one_hot_labels_give_the_argmax_accuracy():
    """SoftmaxCrossEntropyLoss(sparse_label=False) takes one-hot labels; mx.metric.Accuracy
    alone would compare int-cast scores with the one-hot entries."""
    x, y = make_data(32)
    onehot = np.eye(3, dtype="float32")[y]
    net = make_net([mx.cpu()])
    dense_loss = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)
    history = fit(net, dense_loss, sgd(net), loader(x, onehot), epochs=1, val_data=loader(x, onehot),
                  metrics=["acc", mx.metric.TopKAccuracy(2)], progress=False)
    scores = net(mx.nd.array(x)).asnumpy()
    assert history["val_accuracy"] == [pytest.approx(np.mean(scores.argmax(1) == y))]
    top2 = np.argsort(-scores, axis=1)[:, :2]
    assert history["val_top_k_accuracy_2"] == [pytest.approx(np.mean((top2 == y[:, None]).any(1)))]
    assert evaluate(net, loader(x, onehot))["accuracy"] == pytest.approx(np.mean(scores.argmax(1) == y))


def test_float64_data_is_cast_to_the_networks_float32():
    x, y = make_data(24)
    net, ref = make_net([mx.cpu()]), make_net([mx.cpu()])
    fit(net, LOSS, sgd(net), loader(x.astype("float64"), y), epochs=1, progress=False)
    fit(ref, LOSS, sgd(ref), loader(x, y), epochs=1, progress=False)
    assert_params(params_of(net), params_of(ref))
    assert evaluate(net, loader(x.astype("float64"), y))["accuracy"] == \
        evaluate(ref, loader(x, y))["accuracy"]


def test_issue_14_fit_arguments_are_checked():
    x, y = make_data(16)
    net, other = make_net([mx.cpu()]), make_net([mx.cpu()], seed=2)
    with pytest.raises(TypeError, match="metrics must be a metric name.*got 3"):
        fit(net, LOSS, sgd(net), loader(x, y), epochs=1, metrics=3, progress=False)
    with pytest.raises(ValueError, match="the trainer updates none of the network's parameters"):
        fit(net, LOSS, sgd(other), loader(x, y), epochs=1, progress=False)
    before = params_of(net)
    history = fit(net, LOSS, sgd(net), loader(x, y), epochs=1, callbacks=None, progress=False)
    assert history["epoch"] == [1] and not np.array_equal(params_of(net)["0.weight"], before["0.weight"])
    with pytest.raises(TypeError, match="callbacks must be a list"):
        fit(net, LOSS, sgd(net), loader(x, y), epochs=1, callbacks=3, progress=False)


def test_metrics_that_cannot_be_made_by_name_or_take_the_labels_say_why():
    x, y = make_data(16)
    net = make_net([mx.cpu()])
    before = params_of(net)
    for name, fix in (("top_k_accuracy", r"mx.metric.TopKAccuracy\(top_k=5\)"),
                      ("perplexity", r"mx.metric.Perplexity\(ignore_label=None\)")):
        with pytest.raises(ValueError, match=f"{name!r} cannot be made from its name alone.*{fix}"):
            fit(net, LOSS, sgd(net), loader(x, y), epochs=1, metrics=name, progress=False)
    with pytest.raises(ValueError, match="Unknown metric 'acuracy'; did you mean 'accuracy'"):
        fit(net, LOSS, sgd(net), loader(x, y), epochs=1, metrics="acuracy", progress=False)
    assert_params(params_of(net), before)
    onehot = np.eye(3, dtype="float32")[y]   # CrossEntropy takes class indices (MXNet asserts)
    with pytest.raises(ValueError, match=r"CrossEntropy cannot take labels of shape \[\(8, 3\)\] "
                                         r"with outputs of shape \[\(8, 3\)\]"):
        fit(net, gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False), sgd(net),
            loader(x, onehot), epochs=1, metrics="ce", progress=False)


@pytest.mark.parametrize("metric", ["loss", mx.metric.Loss(), mx.metric.Loss("xent")],
                         ids=["name", "object", "renamed"])
def test_a_loss_metric_is_refused_instead_of_averaging_the_outputs(metric):
    """mx.metric.Loss averages whatever it is given; fit gives metrics the outputs (logits),
    and 'loss' replaced the history's mean loss with the mean logit."""
    x, y = make_data(16)
    net = make_net([mx.cpu()])
    before = params_of(net)
    with pytest.raises(ValueError, match=r"mx.metric.Loss.*history's 'loss'.*drop"):
        fit(net, LOSS, sgd(net), loader(x, y), epochs=1, metrics=["acc", metric], progress=False)
    with pytest.raises(ValueError, match=r"mx.metric.Loss.*drop"):
        evaluate(net, loader(x, y), metrics=metric, loss=LOSS)
    assert_params(params_of(net), before)
    history = fit(net, LOSS, sgd(net), loader(x, y), epochs=1, metrics="acc", progress=False)
    assert history["loss"][0] > 0.5        # a cross-entropy of 3 classes, not a mean logit


def test_evaluate_refuses_a_loss_that_returns_a_mean():
    """A mean over the batch, summed and divided by the samples, would be the loss / batch size."""
    x, y = make_data(16)
    net = make_net([mx.cpu()])
    per_sample = LOSS(net(mx.nd.array(x)), mx.nd.array(y)).asnumpy()
    assert evaluate(net, loader(x, y), loss=LOSS)["loss"] == pytest.approx(per_sample.mean(), rel=1e-6)
    with pytest.raises(ValueError, match=r"loss returned shape \(1,\) for 8 samples.*not a mean"):
        evaluate(net, loader(x, y), loss=lambda out, label: LOSS(out, label).mean())


@pytest.mark.parametrize("ctx,error,match", [
    ([mx.cpu(0), mx.cpu(0)], ValueError, r"ctx names a context twice: \[cpu\(0\), cpu\(0\)\]"),
    ([], ValueError, "ctx is empty"),
    ("cpu:0", TypeError, "'cpu:0'; pass mx.cpu()"),
])
def test_fit_and_evaluate_check_ctx_as_split_and_load_does(ctx, error, match):
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    before = net.weight.data().asnumpy()
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(np.ones((4, 3), "float32"), np.zeros(4, "float32")),
                                 batch_size=2)
    with pytest.raises(error, match=match):
        fit(net, gluon.loss.L2Loss(), Trainer(net.collect_params(), "sgd"), data, epochs=1, ctx=ctx,
            progress=False)
    with pytest.raises(error, match=match):
        evaluate(net, data, ctx=ctx, metrics="mse")
    np.testing.assert_array_equal(net.weight.data().asnumpy(), before)
