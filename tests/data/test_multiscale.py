"""Multi-scale sampling and loading: one size per batch, reproducible, every sample once."""
import itertools

import mxnet as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mxnet import gluon
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from gluonkit.data import digits
from gluonkit.data.multiscale import MultiScaleDataset, MultiScaleSampler, multiscale_loader, resize_first


def _image(h, w, channels=1, seed=0):
    return np.random.RandomState(seed).rand(channels, h, w).astype(np.float32)


def _imresize(image, size):
    """MXNet's OpenCV resize (what gluon's transforms.Resize uses) of a (C, H, W) image."""
    hwc = mx.nd.array(image.transpose(1, 2, 0))
    return mx.image.imresize(hwc, size[1], size[0], interp=1).asnumpy().transpose(2, 0, 1)


def _epoch(sampler):
    return [list(batch) for batch in sampler]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 9), st.integers(1, 4),
       st.lists(st.integers(4, 40), min_size=1, max_size=5), st.integers(0, 1000))
def test_one_size_per_interval_and_every_sample_once(length, batch_size, interval, sizes, seed):
    sampler = MultiScaleSampler(length, batch_size, sizes, interval=interval, seed=seed)
    for _ in range(2):
        batches = _epoch(sampler)
        assert len(batches) == len(sampler) == -(-length // batch_size)
        assert sorted(i for i, _ in itertools.chain(*batches)) == list(range(length))
        per_batch = []
        for batch in batches:
            assert len({size for _, size in batch}) == 1
            per_batch.append(batch[0][1])
        assert all(size in [(s, s) for s in sizes] for size in per_batch)
        for start in range(0, len(per_batch), interval):
            assert len(set(per_batch[start:start + interval])) == 1


def test_sizes_change_between_epochs_and_repeat_with_the_seed():
    sizes = [(16, 16), (20, 24), 24, 28]
    a, b = (MultiScaleSampler(200, 8, sizes, seed=7) for _ in range(2))
    epochs = [_epoch(a) for _ in range(3)]
    assert epochs == [_epoch(b) for _ in range(3)]
    assert epochs[0] != epochs[1]
    assert [batch[0][1] for batch in epochs[0]] != [batch[0][1] for batch in epochs[1]]
    drawn = {batch[0][1] for epoch in epochs for batch in epoch}
    assert drawn == {(16, 16), (20, 24), (24, 24), (28, 28)}
    assert _epoch(MultiScaleSampler(200, 8, sizes, seed=8)) != epochs[0]
    a.set_epoch(2)
    assert a.epoch == 2 and _epoch(a) == epochs[2]


def test_without_shuffle_the_order_is_the_datasets():
    batches = _epoch(MultiScaleSampler(5, 2, [8], shuffle=False, seed=0))
    assert batches == [[(0, (8, 8)), (1, (8, 8))], [(2, (8, 8)), (3, (8, 8))], [(4, (8, 8))]]


def test_last_batch_discard_and_rollover():
    assert [len(b) for b in MultiScaleSampler(7, 3, [8], last_batch="discard", seed=0)] == [3, 3]
    sampler = MultiScaleSampler(7, 3, [8], last_batch="rollover", seed=0)
    first, second = _epoch(sampler), _epoch(sampler)
    left = set(range(7)) - {i for i, _ in itertools.chain(*first)}
    assert len(left) == 1 and left <= {i for i, _ in itertools.chain(*second)}


@pytest.mark.parametrize("kwargs, error, message", [
    ({"sizes": []}, ValueError, "empty"),
    ({"sizes": [0]}, ValueError, "positive"),
    ({"sizes": [(3, 4, 5)]}, ValueError, "pair"),
    ({"sizes": 32}, TypeError, "list"),
    ({"interval": 0}, ValueError, "interval"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"last_batch": "pad"}, ValueError, "last_batch"),
])
def test_bad_arguments_are_refused(kwargs, error, message):
    args = dict(length=4, batch_size=2, sizes=[8])
    args.update(kwargs)
    with pytest.raises(error, match=message):
        MultiScaleSampler(**args)


def test_dataset_resizes_the_image_and_keeps_the_rest():
    dataset = MultiScaleDataset(gluon.data.ArrayDataset([_image(5, 9, 2)], [3]))
    image, label = dataset[(0, (11, 4))]
    assert_allclose(image, _imresize(_image(5, 9, 2), (11, 4)), rtol=1e-5, atol=1e-5)
    assert label == 3
    assert_array_equal(dataset[0][0], _image(5, 9, 2))
    assert len(dataset) == 1
    assert_allclose(resize_first(_image(7, 7), (3, 2)), _imresize(_image(7, 7), (3, 2)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="mode='pad'"):
        resize_first((np.zeros((1, 2, 3, 4), dtype=np.float32), 0), (4, 4))


def test_a_custom_transform_receives_each_batchs_size():
    seen = []

    def transform(sample, size):
        seen.append(size)
        return np.full((1,) + size, sample[1], dtype=np.float32), sample[1]

    dataset = gluon.data.ArrayDataset([np.zeros((1, 2, 2), dtype=np.float32)] * 6, np.arange(6))
    for data, label in multiscale_loader(dataset, 4, [(3, 5), (6, 2)], transform=transform, seed=1):
        assert_array_equal(data.asnumpy(), np.broadcast_to(label.asnumpy()[:, None, None, None], data.shape))
    assert len(seen) == 6 and set(seen) <= {(3, 5), (6, 2)}


def test_loader_gives_fit_ready_batches_of_real_images(ctx_list):
    train = digits()
    images = [train[i][0] for i in range(20)]
    dataset = gluon.data.ArrayDataset(images, np.arange(20, dtype=np.float32))
    loader = multiscale_loader(dataset, 6, [10, 12, 16], seed=0)
    assert loader.batch_sampler.sizes == [(10, 10), (12, 12), (16, 16)]
    indices = []
    for data, label in loader:
        assert data.shape[2] in (10, 12, 16) and data.shape[2] == data.shape[3]
        for x, k in zip(data.asnumpy(), label.asnumpy().astype(int)):
            assert_allclose(x, _imresize(images[k], data.shape[2:]), rtol=1e-5, atol=1e-5)
            indices.append(k)
        parts = gluonkit.split_and_load(data, ctx_list)
        assert all(p.shape[1:] == data.shape[1:] for p in parts)
    assert sorted(indices) == list(range(20))


def test_loader_workers_agree_with_the_main_process():
    dataset = gluon.data.ArrayDataset([_image(6, 6, seed=k) for k in range(10)], np.arange(10))
    single = [d.asnumpy() for d, _ in multiscale_loader(dataset, 3, [4, 8], seed=2)]
    multi = [d.asnumpy() for d, _ in multiscale_loader(dataset, 3, [4, 8], seed=2, num_workers=2)]
    assert [a.shape for a in single] == [b.shape for b in multi]
    for a, b in zip(single, multi):
        assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_are_what_gluons_dataloader_gives_and_feed_a_hybridized_net(num_workers):
    # the batches lived on cpu_shared(0): a hybridized net on cpu(0) refused them ("CachedOp
    # requires all inputs to live on the same context"), and int labels became float32
    images = [_image(h, w, seed=i) for i, (h, w) in enumerate([(6, 6), (9, 7), (8, 8), (5, 9)])]
    labels = [0, 2, 1, 1]
    reference = next(iter(gluon.data.DataLoader(gluon.data.ArrayDataset(
        [_image(6, 6)] * 4, labels), batch_size=2, num_workers=num_workers)))
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, padding=1), mx.gluon.nn.GlobalAvgPool2D(), mx.gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    loader = multiscale_loader(gluon.data.ArrayDataset(images, labels), 2, [6, 8], seed=0,
                               num_workers=num_workers)
    for x, y in loader:
        assert (x.context, y.context) == (mx.cpu(0), mx.cpu(0))
        assert (x.dtype, y.dtype) == (reference[0].dtype, reference[1].dtype) == (np.float32, np.int64)
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        expected = loss_fn(net(mx.nd.array(x.asnumpy())), mx.nd.array(y.asnumpy()))
        assert_allclose(loss.asnumpy(), expected.asnumpy(), rtol=1e-6)
