"""fit with counts by head: every update one large batch whose heads are normalized by their
own window counts, and the history's loss per head, against plain Gluon done the long way."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose

import gluonkit
from gluonkit.callbacks import Callback
from conftest import TWO_CPUS, params_of
from gluonkit.nn import Branches

HEADS = ("main", "aux")
OPT = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
CE = gluon.loss.SoftmaxCrossEntropyLoss()
N, BATCH, ACCUMULATE = 26, 4, 3   # 7 batches: windows of 3, 3 and a partial one of 1


class TwoHeads(Branches):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = gluon.nn.Dense(8, in_units=5, activation="tanh")
            self.add("main", gluon.nn.Dense(4, in_units=8))
            self.add("aux", gluon.nn.Dense(3, in_units=8))


def _data():
    rng = np.random.RandomState(5)
    x = rng.randn(N, 5).astype("float32")
    y = rng.randint(0, 4, N).astype("float32")
    has_aux = (rng.rand(N) < 0.4).astype("float32")
    return x, y, has_aux


def _losses(net, x, y, has_aux):
    main, aux = net(x)
    return {"main": CE(main, y), "aux": CE(aux, y % 3) * has_aux}


def batch_fn(net, batch, ctx_list):
    x, y, has_aux = batch
    losses = []
    for lo_hi, ctx in zip(np.array_split(np.arange(x.shape[0]), len(ctx_list)), ctx_list):
        if len(lo_hi):
            part = [a[int(lo_hi[0]):int(lo_hi[-1]) + 1].as_in_context(ctx) for a in (x, y, has_aux)]
            losses.append(_losses(net, *part))
    return losses, head_counts(batch)


def head_counts(batch):
    _, _, has_aux = batch
    return {"main": has_aux.shape[0], "aux": float(has_aux.sum().asscalar())}


def _twins(ctx_list):
    ref, net = TwoHeads(), TwoHeads()
    ref.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.initialize(ctx=ctx_list)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        b.set_data(a.data())
    return ref, net


def _reference(ref, x, y, has_aux, epochs):
    """Plain gluon.Trainer, one step per window on its samples at once; the epochs' mean losses by head."""
    trainer = gluon.Trainer(ref.collect_params(), *OPT)
    window = BATCH * ACCUMULATE
    history = []
    for _ in range(epochs):
        sums, counts = {h: 0.0 for h in HEADS}, {h: 0.0 for h in HEADS}
        for lo in range(0, N, window):
            rows = slice(lo, min(lo + window, N))
            with autograd.record():
                losses = _losses(ref, nd.array(x[rows]), nd.array(y[rows]), nd.array(has_aux[rows]))
                n = {"main": len(x[rows]), "aux": has_aux[rows].sum()}
                loss = nd.add_n(*(losses[h].sum() / n[h] for h in HEADS if n[h]))
            loss.backward()
            trainer.step(1, ignore_stale_grad=True)
            for h in HEADS:
                sums[h] += float(losses[h].sum().asscalar())
                counts[h] += n[h]
        history.append({h: sums[h] / counts[h] for h in HEADS})
    return history


class Running(Callback):
    """The running logs after each batch."""

    def __init__(self):
        self.seen = []

    def on_batch_end(self, state):
        self.seen.append(dict(state.logs))


def test_fit_with_counts_by_head_equals_one_large_batch_per_window():
    x, y, has_aux = _data()
    ref, net = _twins(TWO_CPUS)
    expected = _reference(ref, x, y, has_aux, epochs=2)
    trainer = gluonkit.Trainer(net, *OPT, accumulate=ACCUMULATE)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y, has_aux), batch_size=BATCH)
    running = Running()
    history = gluonkit.fit(net, None, trainer, loader, epochs=2, ctx=TWO_CPUS, batch_fn=batch_fn,
                           head_counts=head_counts, callbacks=[running], progress=False)
    assert running.seen[-1]["loss_main"] == pytest.approx(history["loss_main"][-1])   # the running losses by head
    for name, value in params_of(ref).items():
        assert_allclose(params_of(net)[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    for epoch, by_head in enumerate(expected):
        for h in HEADS:
            assert_allclose(history[f"loss_{h}"][epoch], by_head[h], rtol=1e-5)
        assert_allclose(history["loss"][epoch], sum(by_head.values()), rtol=1e-5)


@pytest.mark.parametrize("options, error, message", [
    ({"batch_fn": None}, ValueError, r"head_counts needs a batch_fn"),
    ({"trainer": "gluon"}, TypeError, r"head_counts needs a gluonkit.Trainer"),
    ({"head_counts": 3}, TypeError, r"head_counts"),
])
def test_fit_refuses_counts_by_head_it_cannot_use_before_training(options, error, message):
    x, y, has_aux = _data()
    _, net = _twins([mx.cpu()])
    before = params_of(net)
    trainer = (gluon.Trainer(net.collect_params(), *OPT) if options.get("trainer") == "gluon"
               else gluonkit.Trainer(net, *OPT, accumulate=ACCUMULATE))
    kwargs = {"batch_fn": batch_fn, "head_counts": head_counts}
    kwargs.update({k: v for k, v in options.items() if k != "trainer"})
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y, has_aux), batch_size=BATCH)
    with pytest.raises(error, match=message):
        gluonkit.fit(net, CE, trainer, loader, epochs=1, progress=False, **kwargs)
    for name, value in params_of(net).items():
        assert (value == before[name]).all(), name


def _fit_heads(net, callbacks=()):
    x, y, has_aux = _data()
    trainer = gluonkit.Trainer(net, *OPT, accumulate=ACCUMULATE)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y, has_aux), batch_size=BATCH, shuffle=True)
    return gluonkit.fit(net, None, trainer, loader, epochs=2, batch_fn=batch_fn, head_counts=head_counts,
                        callbacks=list(callbacks), progress=False)


def test_a_stop_inside_a_window_resumes_to_the_same_weights_and_losses_by_head(tmp_path):
    from conftest import StopAt
    from gluonkit.callbacks import ModelCheckpoint

    _, straight = _twins([mx.cpu()])
    _, stopped = _twins([mx.cpu()])
    for a, b in zip(straight.collect_params().values(), stopped.collect_params().values()):
        b.set_data(a.data())
    np.random.seed(0)
    expected = _fit_heads(straight)
    np.random.seed(0)
    with pytest.raises(KeyboardInterrupt):   # after batch 5 of epoch 2: inside its second window
        _fit_heads(stopped, [StopAt(1, 4), ModelCheckpoint(tmp_path / "ckpt", resume=True)])
    np.random.seed(7)
    history = _fit_heads(stopped, [ModelCheckpoint(tmp_path / "ckpt", resume=True)])
    for name, value in params_of(straight).items():
        np.testing.assert_array_equal(params_of(stopped)[name], value, err_msg=name)
    for key in ("loss", "loss_main", "loss_aux"):
        assert_allclose(history[key], expected[key], rtol=1e-6, err_msg=key)
