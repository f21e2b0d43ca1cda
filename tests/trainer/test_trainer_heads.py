"""Counts by head against one large batch done the long way in Gluon: the loss
L = sum over heads of (sum of the head's per-sample losses) / (the head's count)."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from conftest import params_of
from gluonkit.nn import Branches

HEADS = ("main", "aux", "parity")
SGD = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
ADAM = ("adam", {"learning_rate": 0.01, "wd": 0.001})
ONE, TWO = [mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]


class ThreeHeads(Branches):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential()
            self.trunk.add(gluon.nn.Dense(8, in_units=5, activation="tanh"))
            self.add("main", gluon.nn.Dense(4, in_units=8))
            self.add("aux", gluon.nn.Dense(3, in_units=8))
            self.add("parity", gluon.nn.Dense(2, in_units=8))


def _twins(ctx_list):
    ref, net = ThreeHeads(), ThreeHeads()
    ref.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net.initialize(ctx=ctx_list)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        b.set_data(a.data())
    return ref, net


def _data(n, seed, absent=()):
    """Inputs, labels by head and 0/1 masks by head (a head in ``absent`` has no label at all)."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 5).astype("float32")
    labels = {"main": rng.randint(0, 4, n), "aux": rng.randint(0, 3, n), "parity": rng.randint(0, 2, n)}
    masks = {"main": np.ones(n), "aux": (rng.rand(n) < 0.6) * 1.0, "parity": (rng.rand(n) < 0.3) * 1.0}
    for head in absent:
        masks[head] = np.zeros(n)
    return x, labels, masks


_CE = gluon.loss.SoftmaxCrossEntropyLoss()


def _losses(net, x, labels, masks):
    """Per-sample losses by head, times the head's mask (a sample without the label adds 0)."""
    outputs = dict(zip(HEADS, net(nd.array(x, ctx=_ctx(net)))))
    return {h: _CE(outputs[h], nd.array(labels[h], ctx=_ctx(net))) * nd.array(masks[h], ctx=_ctx(net))
            for h in HEADS}


def _ctx(net):
    return next(iter(net.collect_params().values())).list_ctx()[0]


def _big_batch(ref, trainer, batches):
    """The reference: one large batch of every micro-batch, the loss L, plain gluon.Trainer.step(1)."""
    x = np.concatenate([b[0] for b in batches])
    labels = {h: np.concatenate([b[1][h] for b in batches]) for h in HEADS}
    masks = {h: np.concatenate([b[2][h] for b in batches]) for h in HEADS}
    with autograd.record():
        losses = _losses(ref, x, labels, masks)
        loss = nd.add_n(*(losses[h].sum() / masks[h].sum() for h in HEADS if masks[h].sum() > 0))
    loss.backward()
    trainer.step(1, ignore_stale_grad=True)   # a head of count 0 got no gradient: no update at all


def _slice(batch, ctx_list):
    """One micro-batch split over the devices (unevenly when it does not divide)."""
    x, labels, masks = batch
    bounds = np.linspace(0, len(x), len(ctx_list) + 1).astype(int)
    return [(x[a:b], {h: labels[h][a:b] for h in HEADS}, {h: masks[h][a:b] for h in HEADS})
            for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _window(net, trainer, batches, ctx_list):
    """Run one window micro-batch by micro-batch with counts by head; the results of step."""
    trainer.begin_window({h: sum(b[2][h].sum() for b in batches) for h in HEADS})
    applied = []
    for batch in batches:
        parts = _slice(batch, ctx_list)
        with autograd.record():
            losses = [trainer.weigh_losses(_losses_on(net, part, ctx)) for part, ctx in zip(parts, ctx_list)]
        autograd.backward(losses)
        applied.append(trainer.step({h: batch[2][h].sum() for h in HEADS}))
    return applied


def _losses_on(net, part, ctx):
    x, labels, masks = part
    outputs = dict(zip(HEADS, net(nd.array(x, ctx=ctx))))
    return {h: _CE(outputs[h], nd.array(labels[h], ctx=ctx)) * nd.array(masks[h], ctx=ctx) for h in HEADS}


def _assert_same(ref, net):
    expected, actual = params_of(ref), params_of(net)
    for name in expected:
        assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("optimizer", [SGD, ADAM], ids=["sgd-momentum-wd", "adam"])
def test_counts_by_head_equal_one_large_batch(ctx_list, optimizer):
    ref, net = _twins(ctx_list)
    ref_trainer = gluon.Trainer(ref.collect_params(), *optimizer)
    trainer = gluonkit.Trainer(net.collect_params(), *optimizer, accumulate=3)
    for window in range(2):   # two updates: the optimizer states carry over
        # three heads of different counts, 'parity' absent from the second micro-batch
        batches = [_data(7, 10 * window), _data(4, 10 * window + 1, absent=("parity",)), _data(9, 10 * window + 2)]
        assert _window(net, trainer, batches, ctx_list) == [False, False, True]
        _big_batch(ref, ref_trainer, batches)
        _assert_same(ref, net)


def test_a_head_of_count_zero_in_a_window_is_not_updated_at_all():
    # SGD with momentum and weight decay: a head that did not count gets neither
    ref, net = _twins(ONE)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    for window in range(3):
        absent = ("parity",) if window == 1 else ()
        batches = [_data(6, 20 + 2 * window, absent), _data(5, 21 + 2 * window, absent)]
        before = params_of(net)
        _window(net, trainer, batches, ONE)
        _big_batch(ref, ref_trainer, batches)
        _assert_same(ref, net)
        if window == 1:
            assert_array_equal(params_of(net)["parity.weight"], before["parity.weight"])
            assert "parity.weight" in trainer.skipped


def test_counts_given_as_ndarrays_and_floats():
    ref, net = _twins(ONE)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    batches = [_data(6, 30), _data(5, 31)]
    trainer.begin_window({h: nd.array([sum(b[2][h].sum() for b in batches)]) for h in HEADS})
    for batch in batches:
        with autograd.record():
            loss = trainer.weigh_losses(_losses(net, *batch))
        loss.backward()
        trainer.step({h: nd.array([batch[2][h].sum()]) if h == "aux" else float(batch[2][h].sum()) for h in HEADS})
    _big_batch(ref, ref_trainer, batches)
    _assert_same(ref, net)


def test_clip_global_norm_clips_the_combined_gradient():
    clip = 0.05   # below the gradient norm: the update is clipped
    ref, net = _twins(TWO)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=3, clip_global_norm=clip)
    batches = [_data(7, 40), _data(2, 41, absent=("aux",)), _data(8, 42)]
    _window(net, trainer, batches, TWO)
    x = np.concatenate([b[0] for b in batches])
    labels = {h: np.concatenate([b[1][h] for b in batches]) for h in HEADS}
    masks = {h: np.concatenate([b[2][h] for b in batches]) for h in HEADS}
    with autograd.record():
        losses = _losses(ref, x, labels, masks)
        loss = nd.add_n(*(losses[h].sum() / masks[h].sum() for h in HEADS))
    loss.backward()
    norm = gluon.utils.clip_global_norm([p.grad() for p in ref.collect_params().values()], clip)
    ref_trainer.step(1)
    assert norm > clip
    assert_allclose(trainer.global_norm, norm, rtol=1e-5)
    _assert_same(ref, net)


def test_allreduce_grads_and_update_take_counts_by_head():
    ref, net = _twins(TWO)
    ref_trainer = gluon.Trainer(ref.collect_params(), *ADAM)
    trainer = gluonkit.Trainer(net.collect_params(), *ADAM, update_on_kvstore=False)
    batches = [_data(9, 50)]
    counts = {h: batches[0][2][h].sum() for h in HEADS}
    trainer.begin_window(counts)
    parts = _slice(batches[0], TWO)
    with autograd.record():
        losses = [trainer.weigh_losses(_losses_on(net, part, ctx)) for part, ctx in zip(parts, TWO)]
    autograd.backward(losses)
    trainer.allreduce_grads()
    trainer.update(counts)
    _big_batch(ref, ref_trainer, batches)
    _assert_same(ref, net)
    assert trainer.window_counts is None


def test_a_nonfinite_window_of_counts_by_head_is_skipped_and_the_next_one_applies():
    ref, net = _twins(ONE)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2, on_nonfinite="skip")
    batches = [_data(6, 60), _data(5, 61)]
    trainer.begin_window({h: sum(b[2][h].sum() for b in batches) for h in HEADS})
    for i, batch in enumerate(batches):
        with autograd.record():
            losses = _losses(net, *batch)
            if i == 1:
                losses["aux"] = losses["aux"] * np.inf
            loss = trainer.weigh_losses(losses)
        loss.backward()
        with pytest.warns(UserWarning, match="NaN or Inf") if i == 1 else _no_warning():
            assert not trainer.step({h: batch[2][h].sum() for h in HEADS})
    assert trainer.nonfinite_skips == 1 and trainer.window_counts is None
    _assert_same(ref, net)   # nothing applied
    batches = [_data(6, 62), _data(5, 63)]
    _window(net, trainer, batches, ONE)
    _big_batch(ref, ref_trainer, batches)
    _assert_same(ref, net)


def _no_warning():
    import contextlib
    return contextlib.nullcontext()


def test_a_window_stopped_mid_way_resumes_bit_identical(tmp_path):
    batches = [_data(6, 70), _data(5, 71, absent=("parity",)), _data(7, 72)]
    counts = {h: sum(b[2][h].sum() for b in batches) for h in HEADS}

    def run(stop_after=None):
        _, net = _twins(TWO)
        mx.random.seed(0)
        trainer = gluonkit.Trainer(net.collect_params(), *ADAM, accumulate=3)
        trainer.begin_window(counts)
        for i, batch in enumerate(batches):
            if i == stop_after:   # a new process: network, trainer and state from the files
                net.save_parameters(str(tmp_path / "net.params"))
                state = trainer.state_dict()
                _, net = _twins(TWO)
                net.load_parameters(str(tmp_path / "net.params"), ctx=TWO)
                trainer = gluonkit.Trainer(net.collect_params(), *ADAM, accumulate=3)
                trainer.load_state_dict(state)
                assert trainer.window_counts == {h: counts[h] for h in sorted(counts)}
            parts = _slice(batch, TWO)
            with autograd.record():
                losses = [trainer.weigh_losses(_losses_on(net, part, ctx)) for part, ctx in zip(parts, TWO)]
            autograd.backward(losses)
            trainer.step({h: batch[2][h].sum() for h in HEADS})
        return params_of(net)

    straight, resumed = run(), run(stop_after=2)
    for name in straight:
        assert_array_equal(resumed[name], straight[name], err_msg=name)


@pytest.fixture()
def window():
    """A trainer with a window of counts by head begun and one micro-batch's losses weighed."""
    _, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    batch = _data(6, 80)
    trainer.begin_window({"main": 12, "aux": 5})
    with autograd.record():
        losses = _losses(net, *batch)
        loss = trainer.weigh_losses({"main": losses["main"]})
    loss.backward()
    return net, trainer


@pytest.mark.parametrize("counts, error, message", [
    ({"main": 6, "typo": 1}, KeyError, r"head\(s\) 'typo', which no loss of the window carries"),
    ({"main": 6, "aux": 2}, ValueError, r"head\(s\) 'aux' whose loss this micro-batch did not compute"),
    ({"main": -6}, ValueError, r"the count of head 'main'.*must be a finite number >= 0, got -6"),
    (6, ValueError, r"step\(6\) was given a plain count in a window begun with counts by head"),
])
def test_misuses_are_refused_before_anything_changes(window, counts, error, message):
    net, trainer = window
    before = params_of(net)
    with pytest.raises(error, match=message):
        trainer.step(counts)
    assert trainer.pending == (0, 0)
    assert trainer.step({"main": 6, "aux": 0}) is False   # the window goes on
    assert trainer.pending == (1, 6)
    _assert_same_arrays(before, params_of(net))


def _assert_same_arrays(expected, actual):
    for name in expected:
        assert_array_equal(actual[name], expected[name], err_msg=name)


def test_a_plain_count_then_counts_by_head_in_one_window_is_refused():
    _, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    x, labels, masks = _data(6, 90)
    with autograd.record():
        loss = _losses(net, x, labels, masks)["main"]
    loss.backward()
    trainer.step(6)
    with pytest.raises(ValueError, match="begin_window was called with 1 micro-batch"):
        trainer.begin_window({"main": 6})
    with pytest.raises(ValueError, match="counts by head in a window of 1 micro-batch"):
        trainer.step({"main": 6})
    assert trainer.pending == (1, 6)


def test_a_loss_for_a_head_without_a_count_and_a_step_without_begin_window_are_refused():
    _, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD)
    with pytest.raises(RuntimeError, match=r"no window was begun"):
        trainer.step({"main": 6})
    with pytest.raises(RuntimeError, match=r"call trainer.begin_window"):
        trainer.weigh_losses({"main": nd.ones(3)})
    trainer.begin_window({"main": 6})
    with pytest.raises(KeyError, match=r"a loss for head\(s\) 'aux'"):
        trainer.weigh_losses({"main": nd.ones(3), "aux": nd.ones(3)})
    with pytest.raises(TypeError, match=r"begin_window takes the counts by head as a dict"):
        gluonkit.Trainer(net.collect_params(), *SGD).begin_window([6])


def test_steps_whose_counts_differ_from_the_announced_drop_the_window():
    net, trainer = _window_of_two()
    before = params_of(net)
    with pytest.raises(ValueError, match=r"'main': 12 stepped, 13 announced"):
        trainer.step({"main": 6})
    _assert_same_arrays(before, params_of(net))
    assert trainer.pending == (0, 0) and trainer.window_counts is None


def _window_of_two():
    _, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    trainer.begin_window({"main": 13})
    for _ in range(2):
        with autograd.record():
            loss = trainer.weigh_losses({"main": _losses(net, *_data(6, 91))["main"]})
        loss.backward()
        if trainer.pending[0] == 0:
            trainer.step({"main": 6})
    return net, trainer


def test_loss_scaling_unscales_the_weighed_gradient_and_drops_an_overflow():
    from gluonkit.trainer import amp

    ref, net = _twins(TWO)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    scaler = amp.LossScaler()
    trainer.attach_loss_scaler(scaler)
    scaled_ce = amp.ScaledLoss(_CE, trainer)
    for window, overflow in enumerate([True, False]):
        batches = [_data(6, 100 + 2 * window), _data(5, 101 + 2 * window)]
        scale = scaler.loss_scale
        trainer.begin_window({h: sum(b[2][h].sum() for b in batches) for h in HEADS})
        for batch in batches:
            x, labels, masks = batch
            with autograd.record():
                outputs = dict(zip(HEADS, net(nd.array(x))))
                losses = {h: scaled_ce(outputs[h], nd.array(labels[h])) * nd.array(masks[h]) for h in HEADS}
                if overflow:
                    losses["parity"] = losses["parity"] * np.inf
                loss = trainer.weigh_losses(losses)
            loss.backward()
            trainer.step({h: masks[h].sum() for h in HEADS})
        if overflow:
            assert scaler.loss_scale == scale / 2
        else:
            _big_batch(ref, ref_trainer, batches)
        _assert_same(ref, net)


def test_heads_whose_losses_have_different_shapes():
    # a per-token head (two tokens a sample, some masked) beside a per-sample one, as masked-LM and NSP
    def losses(net, x, labels, tokens):
        outputs = dict(zip(HEADS, net(nd.array(x))))
        per_token = _CE(outputs["aux"], nd.array(labels["aux"])).reshape((-1, 1)) * nd.array(tokens)
        return {"main": _CE(outputs["main"], nd.array(labels["main"])), "aux": per_token}

    rng = np.random.RandomState(110)
    batches = [(*_data(n, 110 + n)[:2], (rng.rand(n, 2) < 0.5) * 1.0) for n in (5, 8)]
    ref, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *ADAM, accumulate=2)
    trainer.begin_window({"main": 13, "aux": sum(b[2].sum() for b in batches)})
    for x, labels, tokens in batches:
        with autograd.record():
            loss = trainer.weigh_losses(losses(net, x, labels, tokens))
        loss.backward()
        trainer.step({"main": len(x), "aux": tokens.sum()})
    x = np.concatenate([b[0] for b in batches])
    labels = {h: np.concatenate([b[1][h] for b in batches]) for h in HEADS}
    tokens = np.concatenate([b[2] for b in batches])
    with autograd.record():
        by_head = losses(ref, x, labels, tokens)
        loss = by_head["main"].sum() / 13 + by_head["aux"].sum() / tokens.sum()
    loss.backward()
    gluon.Trainer(ref.collect_params(), *ADAM).step(1, ignore_stale_grad=True)
    _assert_same(ref, net)


def test_a_micro_batch_of_heads_of_count_zero_only_gives_their_parameters_no_gradient():
    ref, net = _twins(ONE)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    batches = [_data(6, 120, absent=HEADS), _data(5, 121, absent=("parity",))]
    trainer.begin_window({h: sum(b[2][h].sum() for b in batches) for h in HEADS})
    with autograd.record():   # the first micro-batch: no label, only the parity loss (window count 0)
        loss = trainer.weigh_losses({"parity": _losses(net, *batches[0])["parity"]})
    loss.backward()
    trainer.step({"main": 0, "aux": 0, "parity": 0})
    with autograd.record():
        loss = trainer.weigh_losses(_losses(net, *batches[1]))
    loss.backward()
    assert trainer.step({h: batches[1][2][h].sum() for h in HEADS})
    _big_batch(ref, ref_trainer, batches[1:])   # the first micro-batch added nothing
    _assert_same(ref, net)
    assert "parity.weight" in trainer.skipped


@pytest.mark.parametrize("bad", [-3, float("nan")], ids=["negative", "nan"])
def test_begin_window_refuses_a_negative_or_nan_ndarray_count_as_it_refuses_the_number(bad):
    ref, net = _twins(ONE)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    batches = [_data(6, 130), _data(5, 131)]
    counts = {h: sum(b[2][h].sum() for b in batches) for h in HEADS}
    trainer.begin_window(counts)
    with pytest.raises(ValueError) as as_number:
        trainer.begin_window({**counts, "aux": bad})
    with pytest.raises(ValueError) as as_ndarray:
        trainer.begin_window({**counts, "aux": nd.array([bad])})
    assert str(as_ndarray.value) == str(as_number.value)
    assert "the count of head 'aux'" in str(as_ndarray.value) and f"got {bad}." in str(as_ndarray.value)
    assert trainer.window_counts == counts   # the window begun before is kept, and runs as it was
    for batch in batches:
        with autograd.record():
            loss = trainer.weigh_losses(_losses(net, *batch))
        loss.backward()
        trainer.step({h: batch[2][h].sum() for h in HEADS})
    _big_batch(ref, ref_trainer, batches)
    _assert_same(ref, net)


@pytest.mark.parametrize("apply", ["step", "update"])
def test_a_window_whose_every_head_counts_zero_is_dropped_with_a_warning(apply):
    # as a plain count of 0: no update, no momentum or weight decay, and the next window as if it never ran
    ref, net = _twins(ONE)
    ref_trainer = gluon.Trainer(ref.collect_params(), *SGD)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2 if apply == "step" else 1)
    before = params_of(net)
    unlabelled = [_data(6, 140, absent=HEADS), _data(5, 141, absent=HEADS)]
    assert trainer.begin_window({h: 0 for h in HEADS}) == {h: 0 for h in HEADS}
    with pytest.warns(UserWarning, match=r"Skipped an update: the counts given to step\(\) in this window sum to 0"):
        for batch in unlabelled if apply == "step" else unlabelled[:1]:
            with autograd.record():
                loss = trainer.weigh_losses(_losses(net, *batch))
            loss.backward()
            if apply == "step":
                assert trainer.step({h: 0 for h in HEADS}) is False
            else:
                trainer.allreduce_grads()
                trainer.update({h: 0 for h in HEADS})
    _assert_same_arrays(before, params_of(net))
    assert trainer.window_counts is None and trainer.pending == (0, 0)
    batches = [_data(6, 142), _data(5, 143)] if apply == "step" else [_data(9, 142)]
    _window(net, trainer, batches, ONE)
    _big_batch(ref, ref_trainer, batches)   # two momentum steps would differ: the dropped one never counted
    _assert_same(ref, net)


def test_a_head_announced_above_zero_whose_loss_is_never_weighed_is_named():
    _, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD, accumulate=2)
    before = params_of(net)
    trainer.begin_window({"main": 12, "aux": 5})
    for i in range(2):
        with autograd.record():
            loss = trainer.weigh_losses({"main": _losses(net, *_data(6, 150 + i))["main"]})
        loss.backward()
        if i == 0:
            assert trainer.step({"main": 6}) is False
    with pytest.raises(ValueError, match=r"for head\(s\) 'aux' \(5\), but no micro-batch of the window gave "
                                         r"weigh_losses its loss.*give weigh_losses that head's losses, or "
                                         r"announce 0 for it\.$"):
        trainer.step({"main": 6, "aux": 0})
    _assert_same_arrays(before, params_of(net))
    assert trainer.window_counts is None and trainer.pending == (0, 0)


@pytest.mark.parametrize("losses, named", [
    ([nd.ones(4)], "a list"), (nd.ones(4), r"an NDArray of shape \(4,\)"), ({}, "an empty dict")])
def test_weigh_losses_names_what_it_got_instead_of_a_dict_in_one_line(losses, named):
    _, net = _twins(ONE)
    trainer = gluonkit.Trainer(net.collect_params(), *SGD)
    trainer.begin_window({"main": 4})
    with pytest.raises(TypeError, match=rf"as a dict of head name -> per-sample losses \(an NDArray\), "
                                        rf"got {named}\.$") as err:
        trainer.weigh_losses(losses)
    assert "\n" not in str(err.value)
