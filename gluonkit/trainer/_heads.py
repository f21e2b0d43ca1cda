"""Counts by head: one update from several losses, each normalized by its own window count.

A multi-task network's large-batch loss is ``L = sum over heads h of S_h / N_h``, where S_h
sums head h's per-sample losses over the window and N_h is head h's count over the window
(every micro-batch, device and worker). Its gradient is linear in the S_h, so each
micro-batch's backward is exact if it weighs its heads by 1 / N_h: the window's counts are
taken before its first micro-batch runs (``Trainer.begin_window``, one sum over the workers
per window), each micro-batch's loss is weighed by them (``Trainer.weigh_losses``), the
update is applied with a normalizer of 1, and ``step`` checks that the counts it is given
add up to those announced. No gradient buffer is added: a window costs one small reduction.
"""
import math

import mxnet as mx

from ..validate import check_count
from ._gradients import read
from ._window import whole

__all__ = ["HeadCounting", "HeadWindow", "check_head_state", "head_counts"]


def head_counts(counts, what):
    """``counts`` (a dict of head name -> count) with each count checked as ``step`` takes it.

    ``TypeError`` for anything but a non-empty dict with string keys; ``ValueError`` for a
    negative, NaN or infinite count, naming the head.
    """
    if not isinstance(counts, dict) or not counts or not all(isinstance(name, str) for name in counts):
        raise TypeError(f"{what} takes the counts by head as a dict of head name -> count, e.g. "
                        f"{{'mlm': n_tokens, 'nsp': n_sequences}}; got {_described(counts)}.")
    return {name: check_count(count, f"the count of head {name!r}") for name, count in counts.items()}


def _described(value):
    """``value`` named in one line for a message: an NDArray by its shape, a dict by its
    keys, anything else by its type."""
    if isinstance(value, mx.nd.NDArray):
        return f"an NDArray of shape {value.shape}"
    if isinstance(value, dict):
        return f"a dict of keys {list(value)!r}" if value else "an empty dict"
    if value is None:
        return "None"
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind}"


def _numbers(counts):
    """The counts as numbers, NDArray ones read in one wait."""
    arrays = [name for name, count in counts.items() if isinstance(count, mx.nd.NDArray)]
    values = dict(zip(arrays, read(*(counts[name] for name in arrays)))) if arrays else {}
    return {name: whole(values[name]) if name in values else count for name, count in counts.items()}


def _close(a, b):
    """Whether two sums of the same counts agree up to the rounding of their order."""
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


class HeadWindow:
    """The counts by head of the window begun (``totals``: summed over the workers), what this
    worker announced, what ``step`` was given so far, and the heads weighed since the last step.

    Outside a window begun with counts by head, ``totals`` is None and the Trainer counts
    one number per micro-batch, as it always did.
    """

    def __init__(self):
        self.totals = None    # {head: count over the window and the workers}
        self.local = None     # {head: this worker's count for the window}
        self.stepped = {}     # {head: the numbers step() was given}
        self.arrays = {}      # {head: [the NDArray counts step() was given, unread]}
        self.weighed = set()  # the heads weigh_losses weighed since the last step
        self.seen = set()     # the heads weigh_losses weighed in the window
        self.names = ()       # the heads of the windows this worker began (kept between windows)

    def begin(self, counts, sum_over_workers):
        """Take ``counts`` (this worker's, for the whole window) and sum them over the workers
        (one reduction; every worker gives the same head names, 0 for a head it has none of)."""
        # the NDArray counts read, then checked as the numbers are, before anything changes
        local = head_counts(_numbers(head_counts(counts, "begin_window")), "begin_window")
        names = sorted(local)
        summed = sum_over_workers([local[name] for name in names])
        self.totals = {name: whole(float(total)) for name, total in zip(names, summed)}
        self.local, self.stepped, self.arrays, self.weighed, self.seen = local, {}, {}, set(), set()
        self.names = tuple(names)

    def join(self, sum_over_workers):
        """Out of data (distributed ``flush``): take part with counts of 0 in the window the
        other workers begin, when this worker has counted by head and has none begun."""
        if self.totals is None and self.names:
            self.begin(dict.fromkeys(self.names, 0), sum_over_workers)

    def weigh(self, losses):
        """An NDArray whose sum is ``sum over heads of sum(losses[h]) / N_h`` (a head of window
        count 0 left out): the weighed losses added elementwise where they have one shape. In a
        window whose every head counts 0, the losses times 0: a gradient of zeros, and the update
        drops the window as it drops a plain count of 0."""
        if not isinstance(losses, dict) or not losses:
            raise TypeError(f"weigh_losses takes the losses by head as a dict of head name -> per-sample "
                            f"losses (an NDArray), got {_described(losses)}.")
        unknown = [name for name in losses if name not in self.totals]
        if unknown:
            raise KeyError(f"weigh_losses got a loss for head(s) {', '.join(map(repr, unknown))}, but the "
                           f"window was begun with counts for {', '.join(map(repr, self.totals))}; give "
                           "begin_window a count for every head that has a loss.")
        self.weighed.update(losses)
        self.seen.update(losses)
        if not any(self.totals.values()):
            return mx.nd.add_n(*(value.sum() for value in losses.values())) * 0
        by_shape = {}   # losses of one shape are weighed and added elementwise: fewer operators
        for name, value in losses.items():
            if self.totals[name] > 0:
                by_shape.setdefault(value.shape, []).append(value * (1.0 / self.totals[name]))
        if not by_shape:   # only heads of count 0: a zero tied to no parameter, none gets a gradient
            zero = mx.nd.zeros((1,), ctx=next(iter(losses.values())).context)
            zero.attach_grad()
            return zero * 1
        groups = [mx.nd.add_n(*terms) if len(terms) > 1 else terms[0] for terms in by_shape.values()]
        return groups[0] if len(groups) == 1 else mx.nd.add_n(*(group.sum() for group in groups))

    def check_step(self, counts):
        """``counts`` checked for one micro-batch (before anything changes)."""
        counts = head_counts(counts, "step")
        unknown = [name for name in counts if name not in self.totals]
        if unknown:
            raise KeyError(f"step got a count for head(s) {', '.join(map(repr, unknown))}, which no loss "
                           f"of the window carries (its heads: {', '.join(map(repr, self.totals))}); use "
                           "the names given to begin_window and weigh_losses.")
        missing = [name for name, count in counts.items()
                   if name not in self.weighed and (isinstance(count, mx.nd.NDArray) or count > 0)]
        if missing:
            raise ValueError(f"step got a count for head(s) {', '.join(map(repr, missing))} whose loss this "
                             "micro-batch did not compute (weigh_losses got none); give weigh_losses that "
                             "head's losses, or a count of 0 for it.")
        return counts

    def add(self, counts):
        """Count one micro-batch's checked ``counts``; the weighed heads start afresh."""
        for name, count in counts.items():
            if isinstance(count, mx.nd.NDArray):
                self.arrays.setdefault(name, []).append(count)
            else:
                self.stepped[name] = self.stepped.get(name, 0) + count
        self.weighed = set()

    def check_window(self):
        """``ValueError`` if a head announced above 0 never had its loss weighed, or if the counts
        given to step do not add up to those begin_window got."""
        unweighed = [name for name, count in self.local.items() if count > 0 and name not in self.seen]
        if unweighed:
            detail = ", ".join(f"{name!r} ({self.local[name]})" for name in unweighed)
            raise ValueError(f"begin_window announced a count above 0 for head(s) {detail}, but no "
                             "micro-batch of the window gave weigh_losses its loss. The window was dropped, "
                             "no update was applied; give weigh_losses that head's losses, or announce 0 "
                             "for it.")
        given = _numbers(self._given())
        wrong = [name for name in self.local if not _close(given.get(name, 0), self.local[name])]
        if wrong:
            detail = ", ".join(f"{name!r}: {given.get(name, 0)} stepped, {self.local[name]} announced"
                               for name in wrong)
            raise ValueError(f"The counts given to step() in this window differ from those begin_window got "
                             f"({detail}): its losses were weighed by the announced counts. The window was "
                             "dropped, no update was applied; announce the counts of the micro-batches the "
                             "window runs.")

    def end(self):
        """Close the window: the next one begins anew."""
        self.totals, self.local, self.stepped, self.arrays = None, None, {}, {}
        self.weighed, self.seen = set(), set()

    def state(self):
        """The window begun as JSON values, or None."""
        if self.totals is None:
            return None
        return {"totals": dict(self.totals), "local": dict(self.local), "stepped": _numbers(self._given())}

    def _given(self):
        """The counts step() was given, by head: a number, or an NDArray of the NDArray ones and
        the numbers."""
        given = dict(self.stepped)
        for name, arrays in self.arrays.items():
            given[name] = mx.nd.add_n(*(a.as_in_context(mx.cpu()) for a in arrays)) + given.get(name, 0)
        return given

    def load(self, state):
        """Resume ``state()``'s window (None: no window begun)."""
        if state is None:
            self.end()
            return
        self.totals, self.local = dict(state["totals"]), dict(state["local"])
        self.stepped, self.arrays, self.weighed = dict(state["stepped"]), {}, set()
        self.seen = {name for name, count in self.stepped.items() if count > 0}   # step checked them
        self.names = tuple(sorted(self.totals))


def check_head_state(state):
    """``ValueError`` unless ``state`` is None or what ``HeadWindow.state`` gives."""
    if state is None:
        return
    tables = ("totals", "local", "stepped")
    if not (isinstance(state, dict) and all(isinstance(state.get(key), dict) for key in tables)
            and all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                    and 0 <= v < math.inf for key in tables for k, v in state[key].items())):
        raise ValueError("the state's 'heads' must be None or a dict of 'totals', 'local' and 'stepped' "
                         "counts by head; pass what Trainer.state_dict() returned.")


class HeadCounting:
    """``begin_window``, ``weigh_losses`` and ``window_counts`` of ``gluonkit.Trainer`` (a mixin;
    its only user): the window's counts by head live in the Trainer's ``_heads`` (a
    :class:`HeadWindow`), its micro-batches in ``_window``."""

    def begin_window(self, counts):
        """Begin a window whose losses are normalized head by head: ``counts`` is each head's
        count over the micro-batches this worker runs in it (before the first one runs).

        The counts are summed over the workers (one small reduction per window): each head's
        loss is then weighed by 1 / (its count over the window and the workers) by
        ``weigh_losses``, and the update applies the weighed gradient as it is. The window's
        ``step`` calls give each micro-batch's counts by head, which must add up to ``counts``.
        A head whose count over the window is 0 contributes nothing: its loss is left out, so
        its own parameters get no gradient and no update; a window whose every head counts 0 is
        dropped at its update with a warning, as a plain count of 0 is. See docs/trainer.md,
        "Counts by head".

        Parameters
        ----------
        counts : dict
            Head name -> this worker's count for the window (a number >= 0 or a one-element
            NDArray, read now and checked as a number). With several workers, every worker
            gives the same names (0 for a head it has nothing of).

        Returns
        -------
        dict
            The counts by head summed over the workers (the N_h of the window).

        Example::

            trainer.begin_window({"main": 64, "aux": int(has_aux.sum().asscalar())})
            with autograd.record():
                loss = trainer.weigh_losses({"main": main_loss, "aux": aux_loss * has_aux})
            loss.backward()
            trainer.step({"main": 64, "aux": int(has_aux.sum().asscalar())})
        """
        if self._window.steps and self._heads.totals is None:
            raise ValueError(f"begin_window was called with {self._window.steps} micro-batch(es) counted "
                             "by a plain number pending; counts by head and a plain number cannot share a "
                             "window. Apply it first (trainer.flush()).")
        if self._window.steps:
            raise RuntimeError(f"begin_window was called with {self._window.steps} micro-batch(es) of the "
                               "window begun before still pending; step the rest of that window, or apply "
                               "it with trainer.flush().")
        self._heads.begin(counts, self.sum_over_workers)
        return dict(self._heads.totals)

    def weigh_losses(self, losses):
        """The loss to backward for this micro-batch (or one device's share of it): each head's
        per-sample losses summed and divided by its count over the window.

        Parameters
        ----------
        losses : dict
            Head name -> per-sample losses (an NDArray of any shape; a sample without the
            head's label contributes 0, e.g. the loss times a 0/1 mask). Only names given
            to ``begin_window``.

        Returns
        -------
        NDArray
            Its sum is ``sum over heads h of losses[h].sum() / N_h``; recorded when called
            inside ``autograd.record()``, so ``backward()`` gives that sum's gradient. Losses of
            one shape are weighed and added elementwise (the per-sample weighed loss, fewer
            operators than one sum per head); with several shapes it is the sum itself. In a
            window whose every head counts 0 it is the losses' sum times 0 (zero gradients: the
            update drops the window).
        """
        if self._heads.totals is None:
            raise RuntimeError("weigh_losses needs the window's counts by head first: call "
                               "trainer.begin_window({'head': count, ...}) before the window's first "
                               "micro-batch.")
        return self._heads.weigh(losses)

    @property
    def window_counts(self):
        """dict or None: The counts by head of the window begun (summed over the workers), or
        None when no window was begun with counts by head (after each update, or a resume of
        a window saved mid-way, it is None or the resumed window's)."""
        return None if self._heads.totals is None else dict(self._heads.totals)

    def _count_heads(self, counts):
        """``(counts, total)``: a micro-batch's counts by head, checked, and their sum, as the
        window counts it."""
        if not isinstance(counts, dict):
            raise ValueError(f"step({counts!r}) was given a plain count in a window begun with counts "
                             "by head; counts by head and a plain number cannot share a window. Give "
                             "step a dict of counts by head, as begin_window got.")
        if self._heads.totals is None:
            if self._window.steps:
                raise ValueError(f"step({counts!r}) was given counts by head in a window of "
                                 f"{self._window.steps} micro-batch(es) counted by a plain number; they "
                                 "cannot share a window. Apply it first (trainer.flush()).")
            raise RuntimeError(f"step({counts!r}) got counts by head, but no window was begun with them: "
                               "call trainer.begin_window(counts) before the window's first micro-batch and "
                               "weigh its losses with trainer.weigh_losses(losses).")
        counts = self._heads.check_step(counts)
        numbers = sum(c for c in counts.values() if not isinstance(c, mx.nd.NDArray))
        arrays = [c.as_in_context(mx.cpu()) for c in counts.values() if isinstance(c, mx.nd.NDArray)]
        return counts, mx.nd.add_n(*arrays) + numbers if arrays else numbers

    def _apply_window(self, ignore_stale_grad, active=True):
        """Apply the pending window; one begun with counts by head is checked first and applied
        with a normalizer of 1 (its losses were weighed already)."""
        if self._heads.totals is None:
            return self._apply(ignore_stale_grad, active)
        self._check_heads()
        return self._apply(ignore_stale_grad, active, normalizer=1)

    def _check_heads(self):
        """End the window of counts by head; drop it if its steps' counts differ from those
        announced (its losses were weighed by the announced ones)."""
        try:
            self._heads.check_window()
        except ValueError:
            self._window.take()
            self._selected = None
            self._finish([p for p in self._params if p._data is not None and p.grad_req != "null"])
            self._window.restore_statistics()
            raise
        finally:
            self._heads.end()
