"""Per-sample seeds: the same augmentations in any process, a state that resumes them."""
import random

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from numpy.testing import assert_array_equal

from gluonkit.data import (MultiScaleDataset, MultiScaleSampler, SeededDataset, SeededSamples,
                           bucket_loader, multiscale_loader, sample_generators, seeded_loader)


class Jittered(gluon.data.Dataset):
    """Sample i: i plus one draw from Python's generator and three from NumPy's, as GluonCV's
    transforms draw from both."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.float64(i + random.random()) + np.random.rand(3)


def expected_batches(sampler_batches, seed, epoch):
    """What a seeded loader's batches hold, by hand: each sample drawn under its key."""
    batches, position = [], 0
    for batch in sampler_batches:
        samples = []
        for i in batch:
            with sample_generators((seed, epoch, position)):
                samples.append(Jittered()[i])
            position += 1
        batches.append(np.stack(samples))
    return batches


def test_a_key_gives_the_same_draws_and_the_callers_generators_are_left_as_they_were():
    random.seed(5)
    np.random.seed(5)
    before = (random.random(), np.random.rand())
    random.seed(5)
    np.random.seed(5)
    with sample_generators((1, 2, 3)):
        first = (random.random(), np.random.rand())
    with sample_generators((1, 2, 3)):
        again = (random.random(), np.random.rand())
    with sample_generators((1, 2, 4)):
        other = (random.random(), np.random.rand())
    assert (random.random(), np.random.rand()) == before       # as if the blocks never ran
    assert first == again and other != first
    assert first[0] != first[1]                                   # two streams, not one


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_hold_each_sample_drawn_under_its_own_key_with_any_workers(workers):
    np.random.seed(0)
    order = gluon.data.BatchSampler(gluon.data.RandomSampler(10), 4, "keep")
    loader = seeded_loader(Jittered(), order, seed=7, num_workers=workers)
    for epoch in range(2):
        np.random.seed(epoch)
        got = [batch.asnumpy() for batch in loader]
        np.random.seed(epoch)                 # the order RandomSampler drew for that epoch
        want = expected_batches(list(order), 7, epoch)
        assert len(got) == len(want) == 3
        for a, b in zip(got, want):
            assert_array_equal(a, b)


def test_two_epochs_differ_and_the_state_resumes_the_second():
    sampler = MultiScaleSampler(10, 4, [8], seed=3)
    loader = seeded_loader(MultiScaleDataset(Jittered(), lambda sample, size: sample), sampler, seed=3)
    first = [b.asnumpy() for b in loader]
    state = loader.batch_sampler.state_dict()
    assert state == {"seed": 3, "epoch": 1, "sampler": {"seed": 3, "epoch": 1}}
    second = [b.asnumpy() for b in loader]
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))

    fresh = seeded_loader(MultiScaleDataset(Jittered(), lambda sample, size: sample),
                          MultiScaleSampler(10, 4, [8], seed=99), seed=99)
    fresh.batch_sampler.load_state_dict(state)
    for a, b in zip([b.asnumpy() for b in fresh], second, strict=True):
        assert_array_equal(a, b)


def test_a_state_that_does_not_fit_is_refused_and_changes_nothing():
    samples = SeededSamples(MultiScaleSampler(10, 4, [8], seed=3), seed=3)
    for bad in [{"seed": 3, "epoch": 1}, {"seed": -1, "epoch": 0, "sampler": None},
                {"seed": 3, "epoch": "one", "sampler": None},
                {"seed": 3, "epoch": 1, "sampler": {"seed": 3, "epoch": -2}}]:
        with pytest.raises((TypeError, ValueError)):
            samples.load_state_dict(bad)
        assert samples.state_dict() == {"seed": 3, "epoch": 0, "sampler": {"seed": 3, "epoch": 0}}
    plain = SeededSamples(gluon.data.BatchSampler(gluon.data.SequentialSampler(10), 4), seed=3)
    with pytest.raises(ValueError, match="takes none"):
        plain.load_state_dict({"seed": 3, "epoch": 1, "sampler": {"seed": 3, "epoch": 1}})
    assert plain.state_dict() == {"seed": 3, "epoch": 0, "sampler": None}


def test_gluonkits_loaders_seed_their_samples_on_request_and_keep_their_sampler_reachable():
    images = gluon.data.ArrayDataset(mx.nd.arange(10 * 16).reshape(10, 1, 4, 4), list(range(10)))

    def noisy(sample, size):
        return sample[0] + np.random.rand(), sample[1]

    for workers in (0, 2):
        loader = multiscale_loader(images, 4, [4], seed=1, transform=noisy, sample_seeds=True,
                                   num_workers=workers)
        assert isinstance(loader.batch_sampler.sampler, MultiScaleSampler)
        got = np.concatenate([batch[0].asnumpy() for batch in loader])
        order = [i for batch in MultiScaleSampler(10, 4, [4], seed=1) for i, _ in batch]
        for position, i in enumerate(order):
            with sample_generators((1, 0, position)):
                assert_array_equal(got[position], images[i][0].asnumpy() + np.random.rand())
    buckets = bucket_loader(images, 4, 1, seed=1, sample_seeds=True)
    assert buckets.batch_sampler.sampler.buckets.shapes == [(4, 4)]


def test_misuse_is_refused_in_one_line_naming_what_was_given():
    rolling = gluon.data.BatchSampler(gluon.data.RandomSampler(10), 4, "rollover")
    with pytest.raises(ValueError, match="last_batch='rollover' carries samples .* no state holds"):
        SeededSamples(rolling, seed=0)
    with pytest.raises(TypeError, match="a sampler of batches .* got None"):
        SeededSamples(None)
    with pytest.raises(TypeError, match="yielded 0, not a batch"):
        list(SeededSamples(gluon.data.SequentialSampler(3), seed=0))
    with pytest.raises(TypeError, match=r"items \(index, key\) from a SeededSamples, got 3"):
        SeededDataset(Jittered())[3]
    with pytest.raises(ValueError, match="thread_pool=True.*use worker processes"):
        seeded_loader(Jittered(), gluon.data.BatchSampler(gluon.data.SequentialSampler(10), 4),
                      seed=0, num_workers=2, thread_pool=True)
    for key in ["abc", (1.5,), (-1,), ()]:
        with pytest.raises(ValueError, match="key must be a tuple of non-negative ints"):
            with sample_generators(key):
                pass
    samples = SeededSamples(gluon.data.BatchSampler(gluon.data.SequentialSampler(10), 4), seed=3)
    with pytest.raises(ValueError, match=r"state\['seed'\] must be a non-negative int, got -3"):
        samples.load_state_dict({"seed": -3, "epoch": 0, "sampler": None})
    with pytest.raises(ValueError, match=r"state\['epoch'\] is 10{30}"):
        samples.load_state_dict({"seed": 3, "epoch": 10 ** 30, "sampler": None})
    assert samples.state_dict() == {"seed": 3, "epoch": 0, "sampler": None}


def test_fit_refuses_to_resume_with_a_loader_of_another_kind(tmp_path):
    import gluonkit
    from gluonkit.callbacks import ModelCheckpoint

    data = gluon.data.ArrayDataset(np.random.RandomState(0).rand(12, 3).astype("float32"),
                                   np.arange(12, dtype="float32"))
    seeded = seeded_loader(data, gluon.data.BatchSampler(gluon.data.RandomSampler(12), 4, "keep"), seed=0)
    plain = gluon.data.DataLoader(data, batch_size=4, shuffle=True)

    def run(loader, folder, epochs):
        net = gluon.nn.Dense(1)
        net.initialize(mx.init.Constant(0.1))
        trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
        return gluonkit.fit(net, gluon.loss.L2Loss(), trainer, loader, epochs=epochs, progress=False,
                            callbacks=[ModelCheckpoint(str(folder), resume=True)])

    for name, first, then, says in [("seeded", seeded, plain, "holds a sampler's state"),
                                    ("plain", plain, seeded, r"train_data's sampler \(SeededSamples\) has a state")]:
        folder = tmp_path / name
        run(first, folder, 1)
        with pytest.raises(gluonkit.CheckpointError, match=says):
            run(then, folder, 2)
