"""Mixed precision: the CPU-only error, and dynamic loss scaling with accumulation and the
non-finite policy, run in float32 with a scaler attached through ``amp.init_trainer``
(float16 has no CPU kernels) and overflows made by an Inf in the input."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.contrib.amp import amp as mx_amp

from gluonkit import Checkpoint, Trainer, fit
from gluonkit.trainer import amp

RNG = np.random.RandomState(0)
X = RNG.randn(32, 4).astype("float32")
Y = RNG.randn(32, 3).astype("float32")
OPT = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}


@pytest.fixture
def amp_ready(monkeypatch):
    """``amp.init_trainer`` without ``amp.init`` (which would make every layer float16)."""
    monkeypatch.setattr(mx_amp, "_amp_initialized", True)
    monkeypatch.setattr(mx_amp, "_amp_loss_scale_initialized", True)


def make_net():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Xavier(rnd_type="gaussian"))
    return net


def twin(net):
    other = make_net()
    for mine, theirs in zip(other.collect_params().values(), net.collect_params().values()):
        mine.set_data(theirs.data())
    return other


def weights(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


def scaled_trainer(net, accumulate, **kwargs):
    trainer = Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=accumulate, **kwargs)
    amp.init_trainer(trainer)
    return trainer, amp.ScaledLoss(gluon.loss.L2Loss(), trainer)


def micro_step(net, loss, trainer, x, y):
    with autograd.record():
        value = loss(net(mx.nd.array(x)), mx.nd.array(y))
    value.backward()
    return trainer.step(len(x))


def gluon_step(net, trainer, x, y):
    """Plain Gluon: one batch, unscaled loss."""
    with autograd.record():
        value = gluon.loss.L2Loss()(net(mx.nd.array(x)), mx.nd.array(y))
    value.backward()
    trainer.step(len(x))


def overflowing(x):
    x = x.copy()
    x[0, 0] = np.inf
    return x


def test_overflowing_window_is_dropped_once_and_the_next_equals_plain_gluon(amp_ready):
    net = make_net()
    reference = twin(net)
    start = weights(net)
    trainer, loss = scaled_trainer(net, accumulate=2)
    plain = gluon.Trainer(reference.collect_params(), "sgd", dict(OPT))
    scaler = trainer.loss_scaler
    first = scaler.loss_scale
    assert not micro_step(net, loss, trainer, X[:5], Y[:5])
    assert not micro_step(net, loss, trainer, overflowing(X[5:16]), Y[5:16])   # dropped
    for got, want in zip(weights(net), start):
        np.testing.assert_array_equal(got, want)
    for param in net.collect_params().values():
        assert not param.grad().asnumpy().any()
    assert scaler.loss_scale == first / 2
    assert trainer.nonfinite_skips == 0
    # the next windows: the same updates as plain Gluon on the same (unscaled) gradients;
    # a momentum state touched by the dropped window would differ here
    for lo, mid, hi in ((16, 20, 32), (0, 13, 32)):
        assert not micro_step(net, loss, trainer, X[lo:mid], Y[lo:mid])
        assert micro_step(net, loss, trainer, X[mid:hi], Y[mid:hi])
        gluon_step(reference, plain, X[lo:hi], Y[lo:hi])
        for got, want in zip(weights(net), weights(reference)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert scaler.loss_scale == first / 2


def test_the_scale_is_held_within_a_window_and_the_gradient_is_scaled_by_it(amp_ready):
    net = make_net()
    reference = twin(net)
    trainer, loss = scaled_trainer(net, accumulate=3)
    scaler = trainer.loss_scaler
    scale = scaler.loss_scale
    for lo, hi in ((0, 5), (5, 16)):
        with autograd.record():
            value = loss(net(mx.nd.array(X[lo:hi])), mx.nd.array(Y[lo:hi]))
        value.backward()
        plain = gluon.loss.L2Loss()(reference(mx.nd.array(X[lo:hi])), mx.nd.array(Y[lo:hi]))
        np.testing.assert_allclose(value.asnumpy(), plain.asnumpy(), rtol=1e-6)   # values unscaled
        trainer.step(hi - lo)
        assert (scaler.loss_scale, trainer.window_loss_scale) == (scale, scale)
    with autograd.record():
        unscaled = gluon.loss.L2Loss()(reference(mx.nd.array(X[:16])), mx.nd.array(Y[:16]))
    unscaled.backward()
    for mine, theirs in zip(net.collect_params().values(), reference.collect_params().values()):
        np.testing.assert_allclose(mine.grad().asnumpy(), scale * theirs.grad().asnumpy(), rtol=1e-5)


@pytest.mark.parametrize("splits", [(5, 16), (11, 27, 32)])
def test_accumulation_with_a_scaler_equals_one_large_batch(amp_ready, splits):
    net = make_net()
    reference = twin(net)
    trainer, loss = scaled_trainer(net, accumulate=len(splits))
    plain = gluon.Trainer(reference.collect_params(), "sgd", dict(OPT))
    for _ in range(3):
        bounds = (0,) + splits
        results = [micro_step(net, loss, trainer, X[lo:hi], Y[lo:hi]) for lo, hi in zip(bounds, splits)]
        assert results == [False] * (len(splits) - 1) + [True]
        gluon_step(reference, plain, X[:splits[-1]], Y[:splits[-1]])
    for got, want in zip(weights(net), weights(reference)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_the_nonfinite_policy_still_warns_or_raises_and_the_scale_is_lowered(amp_ready):
    net = make_net()
    start = weights(net)
    trainer, loss = scaled_trainer(net, accumulate=1, on_nonfinite="skip")
    scale = trainer.loss_scaler.loss_scale
    with pytest.warns(UserWarning, match="NaN or Inf"):
        assert not micro_step(net, loss, trainer, overflowing(X[:8]), Y[:8])
    assert (trainer.nonfinite_skips, trainer.loss_scaler.loss_scale) == (1, scale / 2)
    trainer.on_nonfinite = "raise"
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        micro_step(net, loss, trainer, overflowing(X[:8]), Y[:8])
    assert trainer.loss_scaler.loss_scale == scale / 4
    for got, want in zip(weights(net), start):
        np.testing.assert_array_equal(got, want)
    assert micro_step(net, loss, trainer, X[:8], Y[:8])
    assert all(np.isfinite(w).all() for w in weights(net)) and weights(net)[0].tolist() != start[0].tolist()


def test_amp_refuses_cpu_contexts_and_a_cpu_only_build():
    with pytest.raises(ValueError, match=r"GPUs only.*--ctx gpu:0.*drop --amp"):
        amp.init([mx.cpu()])
    with pytest.raises(ValueError, match="target_dtype must be one of"):
        amp.init([mx.gpu(0)], target_dtype="int8")
    if not mx.runtime.Features().is_enabled("CUDA"):
        with pytest.raises(RuntimeError, match="CPU-only build.*mxnet-cu112.*drop --amp"):
            amp.init([mx.gpu(0)])
    assert not mx_amp._amp_initialized       # checked before anything was switched


def test_a_scaled_batch_fn_trains_as_plain_gluon(amp_ready):
    net = make_net()
    reference = twin(net)
    trainer = Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=2)
    amp.init_trainer(trainer)

    def batch_fn(net, batch, ctx):
        x, y = batch
        return [gluon.loss.L2Loss()(net(x.as_in_context(ctx[0])), y.as_in_context(ctx[0]))], x.shape[0]

    data = [(mx.nd.array(X[lo:hi]), mx.nd.array(Y[lo:hi])) for lo, hi in ((0, 5), (5, 16), (16, 20), (20, 32))]
    fit(net, None, trainer, data, epochs=1, ctx=[mx.cpu()], progress=False,
        batch_fn=amp.scaled_batch_fn(batch_fn, trainer))
    plain = gluon.Trainer(reference.collect_params(), "sgd", dict(OPT))
    gluon_step(reference, plain, X[:16], Y[:16])
    gluon_step(reference, plain, X[16:], Y[16:])
    for got, want in zip(weights(net), weights(reference)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    with autograd.record():                     # and its gradient was the scaled one
        losses, _ = amp.scaled_batch_fn(batch_fn, trainer)(net, data[0], [mx.cpu()])
    autograd.backward(losses)
    with autograd.record():
        plain_losses, _ = batch_fn(reference, data[0], [mx.cpu()])
    autograd.backward(plain_losses)
    scale = trainer.loss_scaler.loss_scale
    np.testing.assert_allclose(net.weight.grad().asnumpy(), scale * reference.weight.grad().asnumpy(),
                               rtol=1e-5)


def test_an_overflow_on_the_second_device_only_lowers_the_scale(amp_ready):
    """The kvstore updates (no clipping), so nothing sums the devices' gradients before the
    check: the overflow on device 1 must still drop the window and halve the scale."""
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Xavier(rnd_type="gaussian"), ctx=ctx)
    start = [p.data(ctx[0]).asnumpy() for p in net.collect_params().values()]
    trainer, loss = scaled_trainer(net, accumulate=1)
    first = trainer.loss_scaler.loss_scale
    x, y = mx.nd.array(X[:8]), mx.nd.array(Y[:8])
    with autograd.record():
        values = [loss(net(x[:4].as_in_context(ctx[0])), y[:4].as_in_context(ctx[0])),
                  loss(net(mx.nd.array(overflowing(X[4:8]), ctx=ctx[1])), y[4:].as_in_context(ctx[1]))]
    autograd.backward(values)
    assert trainer.step(8) is False
    assert trainer.loss_scaler.loss_scale == first / 2
    for p, before in zip(net.collect_params().values(), start):
        np.testing.assert_array_equal(p.data(ctx[0]).asnumpy(), before)
        np.testing.assert_array_equal(p.data(ctx[1]).asnumpy(), before)


@pytest.mark.parametrize("then", ["step", "flush"])
def test_a_run_resumed_mid_window_keeps_the_loss_scale(amp_ready, tmp_path, then):
    """Saved after an overflow halved the scale, with a micro-batch (scaled by the halved scale)
    pending; a fresh scaler would scale the next micro-batch (and divide the update) by the
    first scale, halving the saved micro-batch's share."""
    def finish(net, loss, trainer):
        return micro_step(net, loss, trainer, X[21:32], Y[21:32]) if then == "step" else trainer.flush()

    net = make_net()
    trainer, loss = scaled_trainer(net, accumulate=2)
    micro_step(net, loss, trainer, X[:5], Y[:5])
    micro_step(net, loss, trainer, overflowing(X[5:16]), Y[5:16])   # dropped: the scale halves
    micro_step(net, loss, trainer, X[16:21], Y[16:21])
    checkpoint = Checkpoint(str(tmp_path))
    checkpoint.save(net, trainer, epoch=0)
    scale = trainer.loss_scaler.loss_scale
    assert finish(net, loss, trainer)

    resumed = make_net()
    resumed_trainer, resumed_loss = scaled_trainer(resumed, accumulate=2)
    checkpoint.load(resumed, resumed_trainer)
    assert resumed_trainer.loss_scaler.loss_scale == scale == 2.0 ** 15
    assert finish(resumed, resumed_loss, resumed_trainer)
    for got, want in zip(weights(resumed), weights(net)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert resumed_trainer.state_dict()["loss_scaler"] == trainer.state_dict()["loss_scaler"]


def test_the_loss_scalers_counts_round_trip_so_it_grows_when_the_original_would(amp_ready):
    net = make_net()
    trainer, loss = scaled_trainer(net, accumulate=1)
    micro_step(net, loss, trainer, overflowing(X[:8]), Y[:8])
    for lo in range(8, 32, 8):
        micro_step(net, loss, trainer, X[lo:lo + 8], Y[lo:lo + 8])
    trainer.name_params(net)
    state = trainer.state_dict()
    other_net = make_net()
    other, _ = scaled_trainer(other_net, accumulate=1)
    other.name_params(other_net)
    other.load_state_dict(state)
    assert other.state_dict()["loss_scaler"] == state["loss_scaler"]
    assert state["loss_scaler"]["unskipped"] == 3 and state["loss_scaler"]["next_loss_scale"] == 2.0 ** 15


def test_a_loss_scale_needs_a_scaler_to_load_into_and_nothing_changes(amp_ready):
    net = make_net()
    trainer, loss = scaled_trainer(net, accumulate=2)
    micro_step(net, loss, trainer, X[:5], Y[:5])
    trainer.name_params(net)
    state = trainer.state_dict()
    plain = Trainer(make_net(), "sgd", dict(OPT), accumulate=2)
    before = plain.state_dict()
    with pytest.raises(ValueError, match=r"loss scale \(65536.0\).*gluonkit.trainer.amp.init_trainer\(trainer\) "
                                         "before loading"):
        plain.load_state_dict(state)
    assert plain.pending == (0, 0) and plain.state_dict()["update_counts"] == before["update_counts"]
    # a state without one (a run without mixed precision) leaves the attached scaler as it is
    scaled_net = make_net()
    scaled, _ = scaled_trainer(scaled_net, accumulate=2)
    scaled.name_params(scaled_net)
    scaled.load_state_dict(before)
    assert scaled.loss_scaler.loss_scale == 2.0 ** 16


def test_a_loss_scaler_is_attached_through_the_trainer_and_read_back():
    net = make_net()
    trainer = Trainer(net.collect_params(), "sgd", dict(OPT))
    assert trainer.loss_scaler is None and trainer.window_loss_scale == 1.0
    with pytest.raises(TypeError, match="scaler must be a loss scaler .* got 3; use gluonkit.trainer.amp.LossScaler"):
        trainer.attach_loss_scaler(3)
    assert trainer.loss_scaler is None
    scaler = amp.LossScaler()
    trainer.attach_loss_scaler(scaler)
    assert trainer.loss_scaler is scaler
    loss = amp.ScaledLoss(gluon.loss.L2Loss(), trainer)
    with autograd.record():
        value = loss(net(mx.nd.array(X[:4])), mx.nd.array(Y[:4]))
    value.backward()
    assert trainer.window_loss_scale == scaler.loss_scale == 2.0 ** 16


def test_init_trainer_without_init_says_to_call_it():
    trainer = Trainer(make_net().collect_params(), "sgd", dict(OPT))
    with pytest.raises(RuntimeError, match=r"call gluonkit.trainer.amp.init\(ctx\)"):
        amp.init_trainer(trainer)
    assert trainer.loss_scaler is None
