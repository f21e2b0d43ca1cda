"""Seeded samplers save and restore their position: the next epoch after a load is the saved one."""
import numpy as np
import pytest

from gluonkit.data.buckets import BucketSampler
from gluonkit.data.multiscale import MultiScaleSampler

SHAPES = [(1, 4 + i % 5, 6 + i % 3) for i in range(23)]
SAMPLERS = {
    "bucket": lambda seed: BucketSampler(SHAPES, 4, buckets=3, seed=seed),
    "multiscale": lambda seed: MultiScaleSampler(23, 4, sizes=[8, 10, 12], seed=seed),
}


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_state_dict_continues_with_the_saved_epoch(kind):
    original = SAMPLERS[kind](3)
    first = [list(batch) for batch in original]
    state = original.state_dict()
    assert state == {"seed": 3, "epoch": 1}
    second = [list(batch) for batch in original]
    assert second != first

    other = SAMPLERS[kind](99)
    other.load_state_dict(state)
    assert [list(batch) for batch in other] == second
    assert other.state_dict() == original.state_dict() == {"seed": 3, "epoch": 2}


@pytest.mark.parametrize("state, error", [(None, ValueError), ({"seed": 3}, ValueError),
                                          ({"seed": None, "epoch": 0}, ValueError),
                                          ({"seed": -1, "epoch": 0}, ValueError),
                                          ({"seed": 3, "epoch": 1.5}, TypeError)])
def test_a_bad_state_is_refused_and_changes_nothing(state, error):
    sampler = SAMPLERS["bucket"](5)
    with pytest.raises(error):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == {"seed": 5, "epoch": 0}


def test_numpy_integers_are_accepted():
    sampler = SAMPLERS["multiscale"](1)
    sampler.load_state_dict({"seed": np.int64(7), "epoch": np.int32(2)})
    assert sampler.state_dict() == {"seed": 7, "epoch": 2}
    assert all(type(v) is int for v in sampler.state_dict().values())


ROLLOVER = {
    "bucket": lambda seed: BucketSampler(SHAPES, 4, buckets=3, last_batch="rollover", seed=seed),
    "multiscale": lambda seed: MultiScaleSampler(23, 4, sizes=[8, 10, 12], last_batch="rollover", seed=seed),
}


@pytest.mark.parametrize("kind", sorted(ROLLOVER))
def test_rollover_state_carries_the_samples_into_the_next_epoch(kind):
    original = ROLLOVER[kind](3)
    list(original)
    state = original.state_dict()
    assert sum(len(carried) for carried in state["rollover"]) > 0
    second = [list(batch) for batch in original]

    other = ROLLOVER[kind](3)   # same seed: without the carried samples its epoch 2 differs
    other.set_epoch(1)
    assert [list(batch) for batch in other] != second
    other = ROLLOVER[kind](99)
    other.load_state_dict(state)
    assert [list(batch) for batch in other] == second
    assert other.state_dict() == original.state_dict()


@pytest.mark.parametrize("carried", [[[0, 1, 2, 3]], [["a"]], [[23]], [[-1]], "x", [[0]] * 4])
def test_a_bad_rollover_state_is_refused_and_changes_nothing(carried):
    sampler = ROLLOVER["multiscale"](5)
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=r"state\['rollover'\] must hold 1 list\(s\) of fewer than 4 sample "
                                         r"indices below 23"):
        sampler.load_state_dict({"seed": 1, "epoch": 3, "rollover": carried})
    assert sampler.state_dict() == before


def test_a_rollover_state_is_refused_by_a_sampler_without_rollover():
    with pytest.raises(ValueError, match=r"state must be this sampler's state_dict\(\) \(\['epoch', 'seed'\]\)"):
        SAMPLERS["bucket"](5).load_state_dict({"seed": 1, "epoch": 0, "rollover": [[], [], []]})
