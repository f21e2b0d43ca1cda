"""Buckets, BucketSampler, BucketPad and bucket_loader against NumPy and plain Gluon."""
import itertools

import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd, gluon
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from gluonkit.data.buckets import BucketBatchify, BucketPad, Buckets, BucketSampler, bucket_loader
from gluonkit.nn.shapecache import ShapeCache

SHAPES = st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=40)


def _images(sizes, channels=2, seed=0):
    """Random (C, H, W) float32 images of the given (H, W) sizes."""
    rng = np.random.RandomState(seed)
    return [rng.rand(channels, h, w).astype(np.float32) for h, w in sizes]


def _fits(size, bucket):
    return all(a <= b for a, b in zip(size, bucket))


# ---------------------------------------------------------------- Buckets

@settings(max_examples=40, deadline=None)
@given(SHAPES, st.integers(1, 6))
def test_pad_buckets_hold_every_sample_in_the_smallest_bucket(sizes, count):
    shapes = [(3, h, w) for h, w in sizes]
    buckets = Buckets.from_data(shapes, count)
    assert 1 <= len(buckets) <= count
    for shape, b in zip(shapes, buckets.assign_all(shapes)):
        holding = [k for k, bucket in enumerate(buckets.shapes) if _fits(shape[1:], bucket)]
        smallest = min(holding, key=lambda k: (np.prod(buckets.shapes[k]), k))
        assert b == smallest, (shape, buckets.shapes)


@settings(max_examples=40, deadline=None)
@given(SHAPES, st.integers(1, 6))
def test_resize_buckets_take_the_nearest_in_log_scale(sizes, count):
    shapes = [(1, h, w) for h, w in sizes]
    buckets = Buckets.from_data(shapes, count, mode="resize")
    for shape, b in zip(shapes, buckets.assign_all(shapes)):
        distance = [sum(np.log(s / d) ** 2 for s, d in zip(shape[1:], bucket)) for bucket in buckets.shapes]
        assert distance[b] == pytest.approx(min(distance))


def test_from_data_finds_the_exact_sizes_when_there_are_few():
    shapes = [(7,)] * 5 + [(3,)] * 9 + [(12,)] * 2
    buckets = Buckets.from_data(shapes, 3, axes=0)
    assert buckets.shapes == [(3,), (7,), (12,)]
    assert buckets.overhead(shapes) == 0.0


@pytest.mark.parametrize("mode", ["pad", "resize"])
def test_multiple_rounds_bucket_sizes(mode):
    rng = np.random.RandomState(4)
    shapes = [(3, h, w) for h, w in rng.randint(9, 40, (200, 2))]
    plain = Buckets.from_data(shapes, 4, mode=mode)
    rounded = Buckets.from_data(shapes, 4, mode=mode, multiple=8)
    assert all(d % 8 == 0 for shape in rounded.shapes for d in shape)
    if mode == "pad":                  # rounded up: every sample still fits, with more padding
        assert rounded.overhead(shapes) >= plain.overhead(shapes)
        assert all(_fits(s[1:], rounded.shapes[b]) for s, b in zip(shapes, rounded.assign_all(shapes)))
    else:                              # rounded to the nearest multiple
        expected = {tuple(int(8 * max(1, round(d / 8))) for d in shape) for shape in plain.shapes}
        assert set(rounded.shapes) <= expected
    with pytest.raises(ValueError, match="multiple"):
        Buckets.from_data(shapes, 4, multiple=0)


def test_overhead_is_the_fraction_of_padding():
    shapes = [(1, 2, 2), (1, 4, 4), (1, 3, 4)]
    buckets = Buckets([(4, 4)])
    assert buckets.overhead(shapes) == pytest.approx((3 * 16) / (4 + 16 + 12) - 1)


def test_more_buckets_pad_less():
    rng = np.random.RandomState(1)
    shapes = [(3, h, w) for h, w in rng.randint(10, 40, (300, 2))]
    overheads = [Buckets.from_data(shapes, k).overhead(shapes) for k in (1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(overheads, overheads[1:])), overheads


@pytest.mark.parametrize("shapes, message", [
    ([], "empty"),
    ([(4, 4), (4, 4)], "repeat"),
    ([(4, 4, 4)], "2 positive int"),
    ([(4, 0)], "2 positive int"),
])
def test_bad_bucket_shapes_are_refused(shapes, message):
    with pytest.raises(ValueError, match=message):
        Buckets(shapes)


def test_bad_mode_and_axes_are_refused():
    with pytest.raises(ValueError, match="mode"):
        Buckets([(4, 4)], mode="crop")
    with pytest.raises(ValueError, match="axes"):
        Buckets([(4, 4)], axes=(1, 1))
    with pytest.raises(ValueError, match="do not fit"):
        Buckets([(4, 4)], axes=(1, 2)).assign((4, 4))


def test_a_sample_larger_than_every_bucket_is_named():
    with pytest.raises(ValueError, match=r"sample 1 of size \(9, 2\).*mode='resize'"):
        Buckets([(4, 4), (8, 8)]).assign_all([(1, 3, 3), (1, 9, 2)])


def test_samples_must_agree_outside_the_bucket_axes():
    with pytest.raises(ValueError, match=r"sample 1 has shape \(2, 4, 4\)"):
        Buckets([(8, 8)]).sizes([(3, 4, 4), (2, 4, 4)])


# ---------------------------------------------------------------- BucketSampler

def _epoch(sampler):
    return [list(batch) for batch in sampler]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SHAPES, st.integers(1, 7), st.integers(1, 5), st.integers(0, 2 ** 31 - 1))
def test_every_sample_once_per_epoch_and_batches_stay_in_their_bucket(sizes, batch_size, count, seed):
    shapes = [(2, h, w) for h, w in sizes]
    sampler = BucketSampler(shapes, batch_size, count, seed=seed)
    members = sampler.buckets.assign_all(shapes)
    for _ in range(2):
        batches = _epoch(sampler)
        assert len(batches) == len(sampler)
        assert sorted(itertools.chain(*batches)) == list(range(len(shapes)))
        for batch in batches:
            assert 1 <= len(batch) <= batch_size
            assert len({members[i] for i in batch}) == 1
        # at most one incomplete batch per bucket
        short = [members[b[0]] for b in batches if len(b) < batch_size]
        assert len(short) == len(set(short))


def test_discard_drops_each_buckets_incomplete_batch():
    shapes = [(1, 4, 4)] * 7 + [(1, 9, 9)] * 5
    sampler = BucketSampler(shapes, 3, [(4, 4), (9, 9)], last_batch="discard", seed=0)
    batches = _epoch(sampler)
    assert len(batches) == len(sampler) == 3
    assert all(len(b) == 3 for b in batches)


def test_rollover_carries_the_rest_to_the_same_bucket():
    shapes = [(1, 4, 4)] * 7 + [(1, 9, 9)] * 5
    sampler = BucketSampler(shapes, 3, [(4, 4), (9, 9)], last_batch="rollover", seed=0)
    first, second = _epoch(sampler), _epoch(sampler)
    assert sorted(len(b) for b in first) == [3, 3, 3]
    seen_first = set(itertools.chain(*first))
    left = set(range(12)) - seen_first
    assert len(left) == 3                                     # one of bucket 0, two of bucket 1
    assert left <= set(itertools.chain(*second))
    assert all(len({i < 7 for i in b}) == 1 for b in first + second)


def test_shuffling_differs_between_epochs_and_repeats_with_the_seed():
    shapes = [(1, s, s) for s in np.random.RandomState(0).randint(2, 30, 200)]
    a = BucketSampler(shapes, 8, 4, seed=3)
    b = BucketSampler(shapes, 8, 4, seed=3)
    c = BucketSampler(shapes, 8, 4, seed=4)
    epochs_a = [_epoch(a) for _ in range(3)]
    assert epochs_a == [_epoch(b) for _ in range(3)]
    assert epochs_a[0] != epochs_a[1] != epochs_a[2]
    assert _epoch(c) != epochs_a[0]
    a.set_epoch(1)
    assert a.epoch == 1 and _epoch(a) == epochs_a[1]
    # batches of different buckets are interleaved, not one bucket after the other
    members = a.buckets.assign_all(shapes)
    order = [members[batch[0]] for batch in epochs_a[0]]
    assert order != sorted(order)


def test_seed_defaults_to_numpys_generator():
    shapes = [(1, s, s) for s in range(2, 40)]
    np.random.seed(5)
    first = _epoch(BucketSampler(shapes, 4, 3))
    np.random.seed(5)
    assert _epoch(BucketSampler(shapes, 4, 3)) == first


def test_without_shuffle_buckets_come_in_order():
    shapes = [(1, 9, 9), (1, 2, 2), (1, 9, 9), (1, 2, 2), (1, 2, 2)]
    sampler = BucketSampler(shapes, 2, [(2, 2), (9, 9)], shuffle=False)
    assert _epoch(sampler) == [[1, 3], [4], [0, 2]]


def test_sampler_arguments_are_checked():
    with pytest.raises(ValueError, match="batch_size"):
        BucketSampler([(1, 2, 2)], 0)
    with pytest.raises(ValueError, match="last_batch"):
        BucketSampler([(1, 2, 2)], 2, last_batch="pad")
    with pytest.raises(ValueError, match="seed"):
        BucketSampler([(1, 2, 2)], 2, seed=-1)
    with pytest.raises(ValueError, match="epoch"):
        BucketSampler([(1, 2, 2)], 2).set_epoch(-1)


# ---------------------------------------------------------------- BucketPad and masks

def _pad_reference(images, bucket, pad_val):
    out = np.full((len(images), images[0].shape[0]) + tuple(bucket), pad_val, dtype=np.float32)
    for k, x in enumerate(images):
        out[k, :, :x.shape[1], :x.shape[2]] = x
    return out


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=6),
       st.sampled_from([0.0, -1.0]))
def test_pad_matches_numpy(sizes, pad_val):
    images = _images(sizes)
    buckets = Buckets([(3, 3), (6, 4), (4, 6), (6, 6)])
    data, valid = BucketPad(buckets, pad_val=pad_val, ret_valid=True)(images)
    big = tuple(np.max(sizes, axis=0))
    bucket = buckets.shapes[buckets.assign((2,) + big)]
    assert data.shape == (len(images), 2) + bucket
    assert_array_equal(data.asnumpy(), _pad_reference(images, bucket, pad_val))
    assert valid.dtype == np.int32
    assert_array_equal(valid.asnumpy(), np.array(sizes))


def test_pad_accepts_ndarrays_and_one_axis():
    seqs = [mx.nd.array(np.arange(n * 2).reshape(n, 2)) for n in (3, 1)]
    data, valid = BucketPad(Buckets([2, 5], axes=0), ret_valid=True)(seqs)
    expected = np.zeros((2, 5, 2), dtype=np.float32)
    expected[0, :3] = np.arange(6).reshape(3, 2)
    expected[1, :1] = [0, 1]
    assert_array_equal(data.asnumpy(), expected)
    assert_array_equal(valid.asnumpy(), [[3], [1]])


def _imresize(image, size):
    """MXNet's OpenCV resize (what gluon's transforms.Resize uses) of a (C, H, W) image."""
    hwc = mx.nd.array(image.transpose(1, 2, 0))
    return mx.image.imresize(hwc, size[1], size[0], interp=1).asnumpy().transpose(2, 0, 1)


def test_resize_matches_opencv():
    images = _images([(4, 8), (6, 5), (5, 7)], channels=3)
    buckets = Buckets([(5, 7), (12, 12)], mode="resize")
    data, valid = BucketPad(buckets, ret_valid=True)(images)
    assert data.shape == (3, 3, 5, 7)
    assert_allclose(data.asnumpy(), np.stack([_imresize(x, (5, 7)) for x in images]), rtol=1e-5, atol=1e-5)
    assert_array_equal(valid.asnumpy(), [[5, 7]] * 3)
    big = _images([(30, 11)])
    data = BucketPad(buckets)(big)                  # downscaling too, to the first sample's bucket
    assert_allclose(data.asnumpy()[0], _imresize(big[0], (12, 12)), rtol=1e-5, atol=1e-5)


def test_resize_needs_the_last_two_axes():
    with pytest.raises(ValueError, match="last two axes"):
        BucketPad(Buckets([4], axes=0, mode="resize"))([np.ones((3, 2), dtype=np.float32)])


def test_pad_refuses_a_batch_larger_than_every_bucket():
    with pytest.raises(ValueError, match="larger than every bucket"):
        BucketPad(Buckets([(3, 3)]))(_images([(2, 2), (4, 1)]))


def test_mask_marks_each_samples_own_elements():
    sizes = [(2, 3), (5, 1), (4, 4)]
    images = _images(sizes, channels=3)
    samples = [(x, k) for k, x in enumerate(images)]
    data, label, mask = BucketBatchify(Buckets([(5, 4)]), extra="mask")(samples)
    expected = np.zeros((3, 5, 4), dtype=np.float32)
    for k, (h, w) in enumerate(sizes):
        for i in range(5):
            for j in range(4):
                expected[k, i, j] = float(i < h and j < w)
    assert_array_equal(mask.asnumpy(), expected)
    assert_array_equal(label.asnumpy(), [0, 1, 2])
    # a loss masked this way sees only the samples' own pixels
    masked_sum = (data * mask.expand_dims(1)).sum(axis=(1, 2, 3)).asnumpy()
    assert_allclose(masked_sum, [x.sum() for x in images], rtol=1e-5)


def test_batchify_outputs():
    samples = [(x, 7) for x in _images([(2, 2), (3, 1)])]
    buckets = Buckets([(3, 3)])
    data, label = BucketBatchify(buckets)(samples)
    assert data.shape == (2, 2, 3, 3) and label.shape == (2,)
    data, label, valid = BucketBatchify(buckets, extra="valid")(samples)
    assert_array_equal(valid.asnumpy(), [[2, 2], [3, 1]])
    segmentation = [(x, np.ones(x.shape[1:], dtype=np.float32)) for x, _ in samples]
    _, mask_labels = BucketBatchify(buckets, label_fn=BucketPad(buckets, pad_val=-1))(segmentation)
    assert_array_equal(mask_labels.asnumpy()[1], [[1, -1, -1], [1, -1, -1], [1, -1, -1]])
    with pytest.raises(ValueError, match=r"\(data, label\) samples"):
        BucketBatchify(buckets)([x for x, _ in samples])
    with pytest.raises(ValueError, match="extra"):
        BucketBatchify(buckets, extra="lengths")
    with pytest.raises(TypeError, match="Buckets"):
        BucketPad([(3, 3)])


# ---------------------------------------------------------------- bucket_loader

def _unpad(data, valid):
    return [x[:, :h, :w] for x, (h, w) in zip(data.asnumpy(), valid.asnumpy())]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SHAPES, st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3))
def test_loader_batches_split_over_contexts_and_windows_stay_in_buckets(sizes, batch_size, count,
                                                                        devices, accumulate):
    images = _images(sizes)
    dataset = gluon.data.ArrayDataset(images, np.arange(len(images), dtype=np.float32))
    loader = bucket_loader(dataset, batch_size, count, extra="valid", seed=1)
    buckets = loader.batch_sampler.buckets
    ctx_list = [mx.cpu(i) for i in range(devices)]
    seen = []
    batches = list(loader)
    for window in range(0, len(batches), accumulate):
        for data, label, valid in batches[window:window + accumulate]:
            bucket = buckets.shapes[buckets.assign((2,) + tuple(valid.asnumpy().max(axis=0)))]
            assert data.shape[2:] == bucket
            parts = gluonkit.split_and_load(data, ctx_list)
            assert len(parts) == min(devices, data.shape[0])
            assert all(p.shape[1:] == data.shape[1:] for p in parts)
            assert [p.context for p in parts] == ctx_list[:len(parts)]
            for index, x in zip(label.asnumpy().astype(int), _unpad(data, valid)):
                assert_array_equal(x, images[index])
                assert buckets.assign(images[index].shape) == buckets.shapes.index(bucket)
                seen.append(index)
    assert sorted(seen) == list(range(len(images)))


def test_loader_feeds_gluon_on_several_workers():
    images = _images([(s, 9 - s) for s in range(2, 8)] * 3)
    dataset = gluon.data.ArrayDataset(images, np.arange(len(images), dtype=np.float32))
    single = [(d.asnumpy(), y.asnumpy()) for d, y in bucket_loader(dataset, 4, 2, seed=0)]
    multi = [(d.asnumpy(), y.asnumpy()) for d, y in bucket_loader(dataset, 4, 2, seed=0, num_workers=2)]
    assert len(single) == len(multi)
    for (a, x), (b, y) in zip(single, multi):
        assert_array_equal(a, b)
        assert_array_equal(x, y)


def _conv_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, padding=1, activation="tanh"), gluon.nn.GlobalAvgPool2D(),
            gluon.nn.Dense(3))
    return net


def test_accumulating_micro_batches_of_different_buckets_equals_hand_summed_gradients(ctx_list, hybridize):
    images = _images([(4, 4)] * 6 + [(7, 5)] * 5 + [(9, 9)] * 4, channels=2, seed=2)
    labels = np.random.RandomState(3).randint(0, 3, len(images)).astype(np.float32)
    loader = bucket_loader(gluon.data.ArrayDataset(images, labels), 3, 3, seed=0)
    batches = [(x.asnumpy(), y.asnumpy()) for x, y in loader]
    windows = [batches[:3], batches[3:]]
    assert all(len({x.shape for x, _ in w}) > 1 for w in windows)   # buckets mix in each window

    ref = _conv_net()
    ref.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    ref(mx.nd.zeros((1, 2, 4, 4)))
    net = ShapeCache(_conv_net()) if hybridize else _conv_net()
    net.initialize(ctx=ctx_list)
    net(mx.nd.zeros((1, 2, 4, 4), ctx=ctx_list[0]))
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        b.set_data(a.data())
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    lr, momentum, wd = 0.2, 0.9, 0.01
    trainer = gluonkit.Trainer(net.collect_params(), "sgd",
                               {"learning_rate": lr, "momentum": momentum, "wd": wd}, accumulate=3)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    params = list(ref.collect_params().values())
    weights = [p.data().asnumpy() for p in params]
    velocity = [np.zeros_like(w) for w in weights]
    for window in windows:
        grads = [np.zeros_like(w) for w in weights]
        for x, y in window:                               # by hand: one context, summed in NumPy
            with autograd.record():
                loss = loss_fn(ref(mx.nd.array(x)), mx.nd.array(y))
            loss.backward()
            grads = [g + p.grad().asnumpy() for g, p in zip(grads, params)]
        count = sum(len(y) for _, y in window)
        for k, (w, g) in enumerate(zip(weights, grads)):
            velocity[k] = momentum * velocity[k] - lr * (g / count + wd * w)
            weights[k] = w + velocity[k]
        for p, w in zip(params, weights):
            p.set_data(mx.nd.array(w))
        updates = []
        for x, y in window:                               # gluonkit: micro-batches over ctx_list
            xs, ys = gluonkit.split_and_load(x, ctx_list), gluonkit.split_and_load(y, ctx_list)
            with autograd.record():
                losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
            autograd.backward(losses)
            updates.append(trainer.step(len(y)))
        assert updates == [False, False, True]
        for name, p, w in zip(net.collect_params(), net.collect_params().values(), weights):
            for ctx in ctx_list:
                assert_allclose(p.data(ctx).asnumpy(), w, rtol=1e-5, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------- one's own loop

def _small_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, padding=1), gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net.hybridize()
    return net


@pytest.mark.parametrize("extra", [None, "valid", "mask"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_are_what_gluons_dataloader_gives_and_feed_a_hybridized_net(extra, num_workers):
    # the batches lived on cpu_shared(0): a hybridized net on cpu(0) refused them ("CachedOp
    # requires all inputs to live on the same context"), and int labels became float32
    images = _images([(6, 6), (5, 7), (8, 8), (6, 5), (7, 8), (8, 6)])
    labels = [0, 2, 1, 1, 0, 2]
    reference = next(iter(gluon.data.DataLoader(gluon.data.ArrayDataset(
        _images([(6, 6)] * 6), labels), batch_size=3, num_workers=num_workers)))
    net, loss_fn = _small_net(), gluon.loss.SoftmaxCrossEntropyLoss()
    loader = bucket_loader(gluon.data.ArrayDataset(images, labels), 3, buckets=2, seed=0,
                           extra=extra, num_workers=num_workers)
    seen = 0
    for batch in loader:
        x, y = batch[0], batch[1]
        assert [b.context for b in batch] == [mx.cpu(0)] * len(batch)
        assert y.dtype == reference[1].dtype == np.int64
        assert x.dtype == reference[0].dtype == np.float32
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        expected = loss_fn(net(mx.nd.array(x.asnumpy())), mx.nd.array(y.asnumpy()))
        assert_allclose(loss.asnumpy(), expected.asnumpy(), rtol=1e-6)
        seen += x.shape[0]
    assert seen == len(images)
