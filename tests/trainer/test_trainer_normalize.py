"""gluonkit.Trainer's normalizers and clipping against one large batch done the long way in Gluon."""
import warnings

import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd, gluon, nd
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from conftest import params_of as _weights

OPT = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}
CLIP = 0.05   # well below the gradient norms of these networks: every update is clipped


def _mlp():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(6, in_units=4, activation="tanh"), gluon.nn.Dense(3, in_units=6))
    return net


def _twins(make, ctx_list):
    ref = make()
    ref.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net = make()
    net.initialize(ctx=ctx_list)
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        b.set_data(a.data())
    return ref, net


def _assert_same(ref, net, atol=1e-6):
    expected, actual = _weights(ref), _weights(net)
    for name in expected:
        assert_allclose(actual[name], expected[name], rtol=1e-5, atol=atol, err_msg=name)


def _loss(out, y):
    return ((out - y) ** 2).sum(axis=1)


def _backward(net, x, y, ctx_list):
    xs, ys = gluonkit.split_and_load(x, ctx_list), gluonkit.split_and_load(y, ctx_list)
    with autograd.record():
        losses = [_loss(net(a), b) for a, b in zip(xs, ys)]
    autograd.backward(losses)
    return x.shape[0]


def _clipped_step(net, trainer, grads, count):
    """Normalize the summed gradients by ``count``, clip them with Gluon's own helper, step(1)."""
    for g in grads:
        g /= count
    norm = gluon.utils.clip_global_norm(grads, CLIP)
    trainer.step(1)
    return norm


def _big_batch_clipped(ref, trainer, x, y):
    with autograd.record():
        loss = _loss(ref(nd.array(x)), nd.array(y))
    loss.backward()
    return _clipped_step(ref, trainer, [p.grad() for p in ref.collect_params().values()], x.shape[0])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_ctx=st.sampled_from([1, 3]), accumulate=st.integers(1, 4), on_nonfinite=st.sampled_from(["ignore", "skip"]),
       data=st.data())
def test_clipping_equals_one_large_batch_clipped_once(num_ctx, accumulate, on_nonfinite, data):
    sizes = data.draw(st.lists(st.integers(1, 9), min_size=2 * accumulate, max_size=2 * accumulate),
                      label="micro-batch sizes")
    ctx_list = [mx.cpu(i) for i in range(num_ctx)]
    rng = np.random.RandomState(sum(sizes))
    x, y = rng.randn(sum(sizes), 4).astype("float32"), 3 * rng.randn(sum(sizes), 3).astype("float32")
    ref, net = _twins(_mlp, ctx_list)
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT))
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=accumulate,
                               clip_global_norm=CLIP, on_nonfinite=on_nonfinite)
    assert trainer.global_norm is None
    offsets = np.cumsum([0] + sizes)
    for window in range(2):
        begin, end = offsets[window * accumulate], offsets[(window + 1) * accumulate]
        for j in range(window * accumulate, (window + 1) * accumulate):
            updated = trainer.step(_backward(net, nd.array(x[offsets[j]:offsets[j + 1]]),
                                             nd.array(y[offsets[j]:offsets[j + 1]]), ctx_list))
        assert updated
        norm = _big_batch_clipped(ref, ref_trainer, x[begin:end], y[begin:end])
        assert norm > 2 * CLIP   # the reference really clipped
        assert_allclose(trainer.global_norm, norm, rtol=1e-5)
        _assert_same(ref, net)


def _naive_per_micro_batch(net, trainer, batches):
    """The classic bug: each micro-batch's gradient (normalized by the window's count) clipped alone."""
    total = sum(x.shape[0] for x, _ in batches)
    params = list(net.collect_params().values())
    summed = [nd.zeros(p.shape) for p in params]
    for x, y in batches:
        with autograd.record():
            loss = _loss(net(nd.array(x)), nd.array(y))
        loss.backward()
        grads = [p.grad() / total for p in params]
        gluon.utils.clip_global_norm(grads, CLIP)
        summed = [s + g for s, g in zip(summed, grads)]
    for p, s in zip(params, summed):
        p.grad()[:] = s
    trainer.step(1)


def test_clipping_per_micro_batch_differs_from_the_large_batch_but_gluonkit_does_not():
    rng = np.random.RandomState(3)
    x, y = rng.randn(12, 4).astype("float32"), 3 * rng.randn(12, 3).astype("float32")
    batches = [(x[:5], y[:5]), (x[5:], y[5:])]
    ref, net = _twins(_mlp, [mx.cpu(0), mx.cpu(1)])
    naive = _mlp()
    naive.initialize()
    for a, b in zip(ref.collect_params().values(), naive.collect_params().values()):
        b.set_data(a.data())
    _big_batch_clipped(ref, gluon.Trainer(ref.collect_params(), "sgd", dict(OPT)), x, y)
    _naive_per_micro_batch(naive, gluon.Trainer(naive.collect_params(), "sgd", dict(OPT)), batches)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=2, clip_global_norm=CLIP)
    for bx, by in batches:
        trainer.step(_backward(net, nd.array(bx), nd.array(by), [mx.cpu(0), mx.cpu(1)]))
    _assert_same(ref, net)
    gap = max(np.abs(a - b).max() for a, b in zip(_weights(naive).values(), _weights(ref).values()))
    assert gap > 1e-3


def test_a_norm_below_the_limit_is_not_clipped_and_is_reported():
    ref, net = _twins(_mlp, [mx.cpu(0)])
    rng = np.random.RandomState(4)
    x, y = rng.randn(8, 4).astype("float32"), rng.randn(8, 3).astype("float32")
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", dict(OPT))
    with autograd.record():
        loss = _loss(ref(nd.array(x)), nd.array(y))
    loss.backward()
    expected_norm = np.sqrt(sum(((p.grad() / 8) ** 2).sum().asscalar() for p in ref.collect_params().values()))
    ref_trainer.step(8)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), clip_global_norm=1e3)
    trainer.step(_backward(net, nd.array(x), nd.array(y), [mx.cpu(0)]))
    assert isinstance(trainer.global_norm, float)
    assert_allclose(trainer.global_norm, expected_norm, rtol=1e-5)
    _assert_same(ref, net, atol=0)


@pytest.mark.parametrize("policy,clip,update_on_kvstore,copies", [
    ("skip", CLIP, None, 1), ("raise", CLIP, False, 1), ("ignore", CLIP, None, 1),
    ("skip", None, False, 1), ("ignore", None, None, 0),
    ("skip", None, True, 3),   # the kvstore updates as it sums: each device's copy is read before
])
def test_the_check_and_the_clip_read_the_gradients_once(monkeypatch, policy, clip, update_on_kvstore, copies):
    """3 devices: the elements squared are one device's summed gradients, once, for the check and the clip."""
    ctx_list = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(300, in_units=300), gluon.nn.Dense(3, in_units=300))   # one large, three small
    net.initialize(ctx=ctx_list)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, on_nonfinite=policy,
                               clip_global_norm=clip, update_on_kvstore=update_on_kvstore)
    _backward(net, nd.ones((6, 300)), nd.zeros((6, 3)), ctx_list)
    squared = []
    real_dot, real_sum_sq = mx.nd.dot, mx.nd.multi_sum_sq

    def dot(a, b, *args, **kwargs):
        squared.append(a.size)
        return real_dot(a, b, *args, **kwargs)

    def multi_sum_sq(*arrays, **kwargs):
        squared.extend(a.size for a in arrays)
        return real_sum_sq(*arrays, **kwargs)

    monkeypatch.setattr(mx.nd, "dot", dot)
    monkeypatch.setattr(mx.nd, "multi_sum_sq", multi_sum_sq)
    assert trainer.step(6)
    assert sum(squared) == copies * sum(p.data().size for p in net.collect_params().values())


def test_a_nonfinite_gradient_is_skipped_not_clipped():
    ref, net = _twins(_mlp, [mx.cpu(0), mx.cpu(1)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), clip_global_norm=CLIP, on_nonfinite="skip")
    before = _weights(net)
    x = np.ones((4, 4), dtype="float32")
    x[3, 0] = np.nan   # on the second device only
    with pytest.warns(UserWarning, match="holds NaN or Inf"):
        assert trainer.step(_backward(net, nd.array(x), nd.ones((4, 3)), [mx.cpu(0), mx.cpu(1)])) is False
    for k, v in _weights(net).items():
        assert_array_equal(v, before[k])
    assert trainer.global_norm is None   # no update was applied yet


@pytest.mark.parametrize("clip, error", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                         (float("inf"), ValueError), ("1", TypeError), (True, TypeError)])
def test_clip_global_norm_must_be_a_finite_positive_number(clip, error):
    net = _mlp()
    net.initialize()
    with pytest.raises(error, match="clip_global_norm"):
        gluonkit.Trainer(net.collect_params(), "sgd", clip_global_norm=clip)


def test_clipping_refuses_settings_where_the_summed_gradient_is_never_seen():
    net = _mlp()
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    with pytest.raises(ValueError, match="update_on_kvstore=True cannot be used with clip_global_norm"):
        gluonkit.Trainer(net.collect_params(), "sgd", update_on_kvstore=True, clip_global_norm=1.0)
    with pytest.raises(ValueError, match="kvstore=None never sums them"):
        gluonkit.Trainer(net.collect_params(), "sgd", kvstore=None, clip_global_norm=1.0)


# --- counts other than samples: the SSD / Faster R-CNN pattern -------------------------------

ANCHORS, CLASSES = 5, 3   # per image; class 0 is the background


class _TinyDetector(gluon.nn.HybridBlock):
    """Per-anchor class scores and box offsets from a feature vector per image."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cls = gluon.nn.Dense(ANCHORS * CLASSES, in_units=4)
        self.box = gluon.nn.Dense(ANCHORS * 4, in_units=4)

    def hybrid_forward(self, F, x):
        return self.cls(x).reshape((0, ANCHORS, CLASSES)), self.box(x).reshape((0, ANCHORS, 4))


_CE = gluon.loss.SoftmaxCrossEntropyLoss()


def _detection_loss(net, x, cls_target, box_target):
    """Un-normalized: summed over all anchors (class) and positive anchors (box); and the positives."""
    scores, boxes = net(x)
    positive = (cls_target > 0).expand_dims(-1)
    loss = _CE(scores.reshape((-1, CLASSES)), cls_target.reshape((-1,))).sum() \
        + (nd.abs(boxes - box_target) * positive).sum()
    return loss, positive.sum()


def _detection_data(rng, n, positive_rate=0.3):
    x = rng.randn(n, 4).astype("float32")
    labels = rng.randint(1, CLASSES, (n, ANCHORS)) * (rng.rand(n, ANCHORS) < positive_rate)
    return x, labels.astype("float32"), rng.randn(n, ANCHORS, 4).astype("float32")


def _detection_micro_batch(net, batch, ctx_list):
    """Backward of the summed loss over the devices; the positives as one NDArray on cpu(0)."""
    parts = [gluonkit.split_and_load(a, ctx_list) for a in batch]
    with autograd.record():
        losses, positives = zip(*(_detection_loss(net, *p) for p in zip(*parts)))
    autograd.backward(list(losses))
    return nd.add_n(*(p.as_in_context(ctx_list[0]) for p in positives))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_ctx=st.sampled_from([1, 2, 3]), accumulate=st.integers(1, 4), data=st.data())
def test_positives_as_ndarrays_equal_one_large_batch_normalized_by_its_positives(num_ctx, accumulate, data):
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=accumulate, max_size=accumulate), label="images")
    ctx_list = [mx.cpu(i) for i in range(num_ctx)]
    rng = np.random.RandomState(sum(sizes) + accumulate)
    batches = [_detection_data(rng, n) for n in sizes]
    if accumulate > 1:
        batches[0][1][:] = 0      # a micro-batch with no positives at all
    batches[-1][1][0, 0] = 1      # and at least one in the window
    x, labels, boxes = (np.concatenate(parts) for parts in zip(*batches))
    ref, net = _twins(_TinyDetector, ctx_list)

    with autograd.record():
        loss, positives = _detection_loss(ref, nd.array(x), nd.array(labels), nd.array(boxes))
        loss = loss / positives
    loss.backward()
    gluon.Trainer(ref.collect_params(), "sgd", dict(OPT)).step(1)

    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=accumulate)
    for batch in batches:
        updated = trainer.step(_detection_micro_batch(net, [nd.array(a) for a in batch], ctx_list))
    assert updated
    _assert_same(ref, net)


def test_counts_given_as_ndarrays_are_not_read_before_the_update(monkeypatch):
    net = _TinyDetector()
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=3)
    rng = np.random.RandomState(5)
    batches = [[nd.array(a) for a in _detection_data(rng, 3)] for _ in range(3)]
    reads = []
    real_asnumpy = nd.NDArray.asnumpy

    def asnumpy(array):
        reads.append(array.shape)
        return real_asnumpy(array)

    monkeypatch.setattr(nd.NDArray, "asnumpy", asnumpy)
    for batch in batches[:2]:
        assert trainer.step(_detection_micro_batch(net, batch, [mx.cpu(0), mx.cpu(1)])) is False
    assert reads == []
    assert trainer.step(_detection_micro_batch(net, batches[2], [mx.cpu(0), mx.cpu(1)]))
    assert reads == [(1,)]   # the window's count, read once


def test_a_window_without_positives_is_dropped_with_a_warning(ctx_list):
    net = _TinyDetector()
    net.initialize(ctx=ctx_list)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, accumulate=2)
    rng = np.random.RandomState(6)
    empty = [[nd.array(a) for a in _detection_data(rng, 2, positive_rate=0)] for _ in range(2)]
    before = _weights(net)
    assert trainer.step(_detection_micro_batch(net, empty[0], ctx_list)) is False
    with pytest.warns(UserWarning, match="sum to 0"):
        assert trainer.step(_detection_micro_batch(net, empty[1], ctx_list)) is False
    for k, v in _weights(net).items():
        assert_array_equal(v, before[k], err_msg=k)
    assert trainer.pending == (0, 0)
    for p in net.collect_params().values():   # nothing of the dropped window is left
        for g in p.list_grad():
            assert_array_equal(g.asnumpy(), 0)
    with pytest.warns(UserWarning, match="sum to 0"):   # an int 0 too
        _detection_micro_batch(net, empty[0], ctx_list)
        trainer.step(0)
        trainer.flush()


def test_a_negative_count_is_refused_at_the_update_and_nothing_is_applied():
    net = _mlp()
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    before = _weights(net)
    _backward(net, nd.ones((2, 4)), nd.ones((2, 3)), [mx.cpu(0)])
    with pytest.raises(ValueError, match=r"sum to -2 .* must be >= 0"):
        trainer.step(nd.array([-2]))
    for k, v in _weights(net).items():
        assert_array_equal(v, before[k])


def test_numpy_integers_and_mixed_counts_are_accepted(ctx_list):
    """``np.int64`` counts, and ints mixed with NDArrays in one window, normalize like their sum."""
    ref, net = _twins(_mlp, ctx_list)
    rng = np.random.RandomState(7)
    x, y = rng.randn(9, 4).astype("float32"), rng.randn(9, 3).astype("float32")
    with autograd.record():
        loss = _loss(ref(nd.array(x)), nd.array(y))
    loss.backward()
    gluon.Trainer(ref.collect_params(), "sgd", dict(OPT)).step(9)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", dict(OPT), accumulate=np.int64(3))
    assert trainer.step(np.int64(_backward(net, nd.array(x[:2]), nd.array(y[:2]), ctx_list))) is False
    assert trainer.step(nd.array([_backward(net, nd.array(x[2:6]), nd.array(y[2:6]), ctx_list)],
                                 ctx=ctx_list[-1])) is False
    assert trainer.pending == (2, 6)
    assert trainer.step(_backward(net, nd.array(x[6:]), nd.array(y[6:]), ctx_list))
    _assert_same(ref, net)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.pending = (np.int64(1), np.int64(4))
    assert trainer.pending == (1, 4)
