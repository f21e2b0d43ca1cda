"""Global batches: every worker's micro-batches, their samples and augmentations, whatever the count."""
import doctest
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from mxnet import gluon
from numpy.testing import assert_array_equal

from gluonkit.data import GlobalBatchSampler, global_loader


class Jittered(gluon.data.Dataset):
    """Sample i: i plus a draw from NumPy's generator (the loader seeds it per sample)."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        return np.float64(i) + np.random.rand(2)


def micro_batches_by_index(workers, epochs=2, batch=8, micro=3):
    """{(epoch, global micro-batch index): samples} over every worker's loader."""
    found = {}
    for rank in range(workers):
        loader = global_loader(Jittered(), batch, micro, rank, workers, seed=4)
        own = loader.batch_sampler.sampler.own_micro_batches()
        for epoch in range(epochs):
            batches = [b.asnumpy() for b in loader]
            assert len(batches) == len(own)
            found.update({(epoch, index): b for index, b in zip(own, batches)})
    return found


@pytest.mark.parametrize("workers", [2, 3])
def test_micro_batch_j_holds_the_same_samples_augmented_the_same_way_on_any_number_of_workers(workers):
    one = micro_batches_by_index(1)
    many = micro_batches_by_index(workers)
    assert sorted(one) == sorted(many)
    for key, samples in one.items():
        assert_array_equal(many[key], samples, err_msg=str(key))
    epoch0 = np.concatenate([one[(0, i)] for i in range(len(one) // 2)])
    assert sorted(epoch0[:, 0].astype(int)) == list(range(23))      # every sample once an epoch
    assert not np.array_equal(epoch0, np.concatenate([one[(1, i)] for i in range(len(one) // 2)]))


@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, 60), batch=st.integers(1, 20), micro=st.integers(1, 20), workers=st.integers(1, 4))
def test_the_workers_shares_cover_each_global_batch_once_and_accumulate_counts_a_full_one(length, batch, micro,
                                                                                           workers):
    micro = min(micro, batch)
    if -(-batch // micro) < workers:
        with pytest.raises(ValueError, match="fewer than the") as refused:
            GlobalBatchSampler(length, batch, micro, 0, workers)
        fix = re.search(r"pass a micro-batch of at most (\d+)\.$", str(refused.value))
        if fix is None:   # no micro-batch gives every worker one
            assert batch < workers and str(refused.value).endswith(f"batch_size of at least {workers}, or run "
                                                                    "fewer workers.")
            return
        largest = int(fix.group(1))   # the largest micro-batch that fits, the one named
        assert GlobalBatchSampler(length, batch, largest, 0, workers).micro_batches_per_batch >= workers
        assert largest == batch or -(-batch // (largest + 1)) < workers
        assert GlobalBatchSampler.largest_micro_batch(batch, workers) == largest
        return
    samplers = [GlobalBatchSampler(length, batch, micro, r, workers, seed=1) for r in range(workers)]
    ranges = samplers[0].micro_batch_ranges()
    assert sorted(i for s in samplers for i in s.own_micro_batches()) == list(range(len(ranges)))
    assert sum(s.share() for s in samplers) == length
    assert sum(s.accumulate for s in samplers) == -(-batch // micro)
    assert all(len(list(s)) == len(s) for s in samplers)
    assert samplers[0].updates_per_epoch == -(-length // batch)


def test_bad_settings_are_refused_with_the_value_and_the_fix():
    with pytest.raises(ValueError, match="rank 2 is not one of the 2 workers"):
        GlobalBatchSampler(10, 4, 2, rank=2, workers=2)
    with pytest.raises(ValueError, match="micro_batch 8 is larger than the global batch_size 4"):
        GlobalBatchSampler(10, 4, 8)
    with pytest.raises(ValueError, match=r"pass a micro-batch of at most 3\.$"):   # 3 and 1: one for each
        GlobalBatchSampler(10, 4, 4, 0, 2)
    with pytest.raises(ValueError, match="'keep' or 'discard'"):
        GlobalBatchSampler(10, 4, 2, last_batch="rollover")


def test_its_state_resumes_the_order_of_the_next_epoch_on_any_worker():
    first = GlobalBatchSampler(30, 8, 4, 0, 2, seed=9)
    list(first)
    state = first.state_dict()
    expected = list(first)
    other = GlobalBatchSampler(30, 8, 4, 1, 2, seed=0)
    other.load_state_dict(state)
    same_rank = GlobalBatchSampler(30, 8, 4, 0, 2, seed=0)
    same_rank.load_state_dict(state)
    assert list(same_rank) == expected
    assert sorted(i for b in list(other) for i in b) != sorted(i for b in expected for i in b)
    with pytest.raises(ValueError, match="GlobalBatchSampler.state_dict"):
        other.load_state_dict({"seed": 1})


def _sized_micro_batches(workers, sizes, interval, epochs=2):
    """{(epoch, global micro-batch index): [(index, size), ...]} over every worker's sampler."""
    found = {}
    for rank in range(workers):
        sampler = GlobalBatchSampler(29, 8, 2, rank, workers, seed=5, sizes=sizes, interval=interval)
        for epoch in range(epochs):
            found.update({(epoch, index): batch for index, batch in zip(sampler.own_micro_batches(), sampler)})
    return found


@pytest.mark.parametrize("interval", [1, 2])
def test_sizes_give_every_global_batch_one_size_the_same_on_any_number_of_workers(interval):
    sizes = [32, (48, 64), 96]
    one = _sized_micro_batches(1, sizes, interval)
    for workers in (2, 3):
        assert _sized_micro_batches(workers, sizes, interval) == one
    plain = GlobalBatchSampler(29, 8, 2, seed=5)
    ranges = plain.micro_batch_ranges()
    for epoch in range(2):
        order = plain.order(epoch)
        per_batch = {}
        for index, (begin, end) in enumerate(ranges):
            batch = one[(epoch, index)]
            assert [i for i, _ in batch] == [int(i) for i in order[begin:end]]   # the plain order
            assert len({size for _, size in batch}) == 1
            per_batch[begin // 8] = batch[0][1]
        drawn = [per_batch[b] for b in range(len(per_batch))]
        assert set(drawn) <= {(32, 32), (48, 64), (96, 96)}
        assert all(drawn[b] == drawn[b - b % interval] for b in range(len(drawn)))   # one size per interval
        assert drawn == GlobalBatchSampler(29, 8, 2, seed=5, sizes=sizes, interval=interval).batch_sizes(epoch)
    assert GlobalBatchSampler(29, 8, 2, seed=5).batch_sizes(0) is None


def test_an_interval_without_sizes_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"^interval=2 is the global batches per input size drawn from sizes, but "
                                         r"sizes is None; pass sizes=\[\.\.\.\] too, or leave interval out\.$"):
        GlobalBatchSampler(10, 4, 2, interval=2)
    with pytest.raises(ValueError, match=r"interval=3 .* sizes is None"):
        global_loader(Jittered(), 4, 2, interval=3)
    assert GlobalBatchSampler(10, 4, 2, sizes=[32], interval=2).batch_sizes(0) == [(32, 32)] * 3


@pytest.mark.parametrize("documented", [GlobalBatchSampler, global_loader])
def test_the_docstring_example_runs_as_pasted(documented):
    runner = doctest.DocTestRunner()
    for example in doctest.DocTestFinder(recurse=False).find(documented, globs={}):   # nothing imported for it
        runner.run(example)
    assert runner.summarize(verbose=False) == (0, runner.tries) and runner.tries >= 6


def test_bad_sizes_are_refused_by_value():
    with pytest.raises(ValueError, match=r"size \(32, 0\) must be a positive int or a \(height, width\) pair"):
        GlobalBatchSampler(10, 4, 2, sizes=[(32, 0)])
    with pytest.raises(ValueError, match=r"size 32.5 must be a positive int or a \(height, width\) pair"):
        GlobalBatchSampler(10, 4, 2, sizes=[32.5])
    with pytest.raises(ValueError, match="sizes is empty"):
        GlobalBatchSampler(10, 4, 2, sizes=[])
    with pytest.raises(ValueError, match="interval"):
        GlobalBatchSampler(10, 4, 2, sizes=[32], interval=0)
