"""Seeded sampling shared by the bucketing and multi-scale samplers."""
import numpy as np
from mxnet import gluon

from .._validate import is_int, non_negative_int

__all__ = ["seed_or_draw", "Order", "SeededEpochs"]


def seed_or_draw(seed):
    """``seed`` checked, or one drawn from NumPy's global generator (so np.random.seed fixes it)."""
    if seed is None:
        return int(np.random.randint(2 ** 31))
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}.")
    return int(seed)


class Order(gluon.data.Sampler):
    """A sampler over a list of indices whose order is set anew for each epoch."""

    def __init__(self, indices):
        self.order = list(indices)

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


class SeededEpochs(gluon.data.Sampler):
    """A sampler whose every epoch is drawn from (seed, epoch) alone, so a run can resume."""

    @property
    def epoch(self):
        """int: The epoch the next iteration yields (counted from 0)."""
        return self._epoch

    def set_epoch(self, epoch):
        """Make the next iteration yield epoch ``epoch``'s order (to resume a run)."""
        self._epoch = non_negative_int(epoch, "epoch")

    def state_dict(self):
        """dict: The seed and the epoch the next iteration yields; ``fit`` checkpoints it."""
        return {"seed": self._seed, "epoch": self._epoch}

    def load_state_dict(self, state):
        """Continue from ``state_dict()``: the next iteration yields the saved epoch's order."""
        if not isinstance(state, dict) or set(state) != {"seed", "epoch"}:
            raise ValueError(f"state must be a sampler's state_dict() ({{'seed': ..., 'epoch': ...}}), "
                             f"got {state!r}.")
        if state["seed"] is None:
            raise ValueError("state['seed'] is None; pass what state_dict() returned.")
        seed, epoch = seed_or_draw(state["seed"]), non_negative_int(state["epoch"], "state['epoch']")
        self._seed, self._epoch = seed, epoch

    def _next_epoch_rng(self):
        """The generator of the epoch about to be yielded; moves on to the next epoch."""
        rng = np.random.default_rng([self._seed, self._epoch])
        self._epoch += 1
        return rng
