"""How often ``gluonkit.Trainer.step`` makes the host wait for the devices, per setting.

Every call that waits is counted (``NDArray.asnumpy``, which ``asscalar`` and ``float()`` go
through, ``NDArray.wait_to_read`` and ``mx.nd.waitall``) while ``step`` runs; the figures are
the table of docs/trainer.md.
"""
import contextlib
import time

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from mxnet.contrib.amp import amp as mx_amp
from numpy.testing import assert_allclose

import gluonkit
from gluonkit.trainer import amp

RNG = np.random.RandomState(4)
X = RNG.randn(8, 5).astype("float32")
Y = RNG.randn(8, 2).astype("float32")
CLIP = 0.05   # below every gradient norm met here: each update is clipped


class Waits:
    """Counts the calls that wait, while ``counting`` is on."""

    def __init__(self, monkeypatch):
        self.count, self.on = 0, False
        for owner, name in ((nd.NDArray, "asnumpy"), (nd.NDArray, "wait_to_read"), (mx.nd, "waitall"),
                            (mx.nd.ndarray, "waitall")):
            monkeypatch.setattr(owner, name, self._counted(getattr(owner, name)))

    def _counted(self, real):
        def call(*args, **kwargs):
            self.count += self.on
            return real(*args, **kwargs)
        return call

    @contextlib.contextmanager
    def counting(self):
        self.on = True
        try:
            yield
        finally:
            self.on = False


def _net(ctx):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=5, activation="tanh"), gluon.nn.Dense(2, in_units=4))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def _backward(net, ctx, loss=None):
    xs, ys = gluonkit.split_and_load(nd.array(X), ctx), gluonkit.split_and_load(nd.array(Y), ctx)
    loss = loss or (lambda out, y: ((out - y) ** 2).sum(axis=1))
    with autograd.record():
        losses = [loss(net(x), y) for x, y in zip(xs, ys)]
    autograd.backward(losses)


# setting: (Trainer options, count given to step, attach a loss scaler, waits per update)
SETTINGS = {
    "default": ({}, 8, False, 0),
    "float count": ({}, 7.5, False, 0),
    "clip_global_norm": ({"clip_global_norm": CLIP}, 8, False, 0),
    "NDArray count": ({}, "ndarray", False, 1),
    "NDArray count + clip_global_norm": ({"clip_global_norm": CLIP}, "ndarray", False, 1),
    "skip": ({"on_nonfinite": "skip"}, 8, False, 1),
    "skip + clip_global_norm": ({"on_nonfinite": "skip", "clip_global_norm": CLIP}, 8, False, 1),
    "raise": ({"on_nonfinite": "raise"}, 8, False, 1),
    "loss scaler": ({}, 8, True, 1),
}


@pytest.fixture
def amp_ready(monkeypatch):
    """``amp.init_trainer`` without ``amp.init`` (which would make every layer float16)."""
    monkeypatch.setattr(mx_amp, "_amp_initialized", True)


@pytest.mark.parametrize("ctx", [[mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]], ids=["1ctx", "2ctx"])
@pytest.mark.parametrize("setting", SETTINGS.values(), ids=SETTINGS.keys())
def test_waits_per_update(monkeypatch, amp_ready, setting, ctx):
    options, count, scaled, expected = setting
    net = _net(ctx)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                               accumulate=2, **options)
    loss = None
    if scaled:
        amp.init_trainer(trainer)
        loss = amp.ScaledLoss(lambda out, y: ((out - y) ** 2).sum(axis=1), trainer)
    waits = Waits(monkeypatch)
    for _ in range(3):
        for micro_batch in range(2):
            _backward(net, ctx, loss)
            given = nd.array([8], ctx=ctx[-1]) if count == "ndarray" else count
            before = waits.count
            with waits.counting():
                updated = trainer.step(given)
            assert updated == (micro_batch == 1)
            assert waits.count - before == (expected if updated else 0)


def test_clipping_without_a_wait_clips_as_gluon_and_reports_the_norm_when_read(monkeypatch):
    """The clip factor min(1, clip / norm) computed and applied on the device gives the
    update of gluon's clip_global_norm (which reads the norm), and global_norm its norm."""
    ctx = [mx.cpu(0), mx.cpu(1)]
    net, ref = _net(ctx), _net([mx.cpu(0)])
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        a.set_data(b.data(ctx[0]))
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, clip_global_norm=CLIP)
    plain = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1})
    waits = Waits(monkeypatch)
    arrays = []
    for _ in range(3):
        _backward(net, ctx)
        with waits.counting():
            assert trainer.step(8)
        arrays.append(trainer.global_norm_array)
        _backward(ref, [mx.cpu(0)])
        grads = [p.grad() for p in ref.collect_params().values()]
        for g in grads:
            g /= 8
        norm = gluon.utils.clip_global_norm(grads, CLIP)
        plain.step(1)
        assert norm > CLIP
        assert_allclose(arrays[-1].asscalar(), norm, rtol=1e-5)
    assert waits.count == 0
    assert trainer.global_norm == pytest.approx(norm, rel=1e-5) and isinstance(trainer.global_norm, float)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        for c in ctx:
            assert_allclose(b.data(c).asnumpy(), a.data().asnumpy(), rtol=1e-5, atol=1e-7, err_msg=a.name)


def test_fits_grad_norm_history_is_the_mean_of_the_lazy_norms():
    """fit collects each update's norm as the trainer holds it (not read) and reads them when
    its tally settles: the history equals the mean of the norms read afterwards."""
    class Keep(gluonkit.callbacks.Callback):
        arrays = []

        def on_batch_end(self, state):
            if state.trainer.pending[0] == 0:
                self.arrays.append(state.trainer.global_norm_array)

    net = _net([mx.cpu(0)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=2,
                               clip_global_norm=CLIP)
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(np.tile(X, (3, 1)), np.tile(Y, (3, 1))), batch_size=4)
    history = gluonkit.fit(net, gluon.loss.L2Loss(), trainer, data, epochs=1, callbacks=[Keep()], progress=False)
    norms = [a.asscalar() for a in Keep.arrays]
    assert len(norms) == 3 and len(set(norms)) == 3
    assert history["grad_norm"] == [pytest.approx(np.mean(norms), rel=1e-6)]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_clipping_on_the_device_applies_a_nonfinite_gradient_as_it_is_under_ignore(bad):
    """A NaN or infinite norm clips nothing (as when the norm was read on the host): the other
    parameters get gluon's unclipped update, not a NaN factor."""
    net, ref = _net([mx.cpu(0)]), _net([mx.cpu(0)])
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        a.set_data(b.data())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, clip_global_norm=CLIP)
    plain = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1})
    for model, step in ((net, trainer.step), (ref, plain.step)):
        _backward(model, [mx.cpu(0)])
        model[0].bias.grad()[:] = bad
        step(8)
    assert not np.isfinite(trainer.global_norm)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        if a is not ref[0].bias:
            assert_allclose(b.data().asnumpy(), a.data().asnumpy(), rtol=1e-6, err_msg=a.name)


class _SlowBackward(mx.operator.CustomOp):
    """The identity, whose backward takes SLOW seconds and then notes that it ran."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        time.sleep(SLOW)
        FINISHED.append(True)
        self.assign(in_grad[0], req[0], out_grad[0])


@mx.operator.register("gluonkit_test_slow_backward")
class _SlowBackwardProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def infer_shape(self, in_shape):
        return in_shape, in_shape, []

    def create_operator(self, ctx, shapes, dtypes):
        return _SlowBackward()


SLOW = 0.5
FINISHED = []


@pytest.mark.parametrize("options, as_array, waits_for_backward", [
    ({}, False, False), ({"clip_global_norm": CLIP}, False, False), ({}, True, False),
    ({"clip_global_norm": CLIP}, True, False), ({"on_nonfinite": "skip"}, False, True)],
    ids=["default", "clip_global_norm", "NDArray count", "NDArray count + clip_global_norm", "skip"])
def test_step_returns_before_the_backward_pass_ends_unless_it_must_check_the_gradients(options, as_array,
                                                                                     waits_for_backward):
    """The first layer's gradient comes through a backward that takes SLOW seconds: a step
    that waits for no gradient (clipping on the device, a count read as given) returns while
    that backward still runs; 'skip' reads the gradients' sum of squares, so it cannot."""
    net = _net([mx.cpu(0)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, **options)
    count = nd.array([8]) if as_array else 8
    mx.nd.waitall()   # the count and the weights are ready: only the backward below is pending
    del FINISHED[:]
    with autograd.record():
        hidden = mx.nd.Custom(net[0](nd.array(X)), op_type="gluonkit_test_slow_backward")
        loss = ((net[1](hidden) - nd.array(Y)) ** 2).sum(axis=1)
    loss.backward()
    assert trainer.step(count)
    assert bool(FINISHED) == waits_for_backward
    mx.nd.waitall()
    assert FINISHED == [True]
    assert np.isfinite(net[0].weight.data().asnumpy()).all()
