"""What the blocks that keep several views of one network share: the view store, flattening.

A view is a block that runs some or all of a network under a cached graph of its own while
sharing the network's parameters (:class:`~gluonkit.nn.Branches` routes,
:class:`~gluonkit.nn.ShapeCache` graphs per input shape).
"""
from collections import OrderedDict

__all__ = ["Views", "flatten"]


def flatten(nested):
    """The leaves of a nested list/tuple (of outputs or inputs), in order."""
    if isinstance(nested, (list, tuple)):
        return [leaf for item in nested for leaf in flatten(item)]
    return [nested]


class Views:
    """Views by key, least recently used first; beyond ``limit`` (if given) the oldest go.

    ``on_drop(view)``, if given, is called on every view dropped (beyond the limit or by
    :meth:`clear`): a Gluon block lives in a reference cycle (with its name scope), so a view
    let go waits for Python's cycle collector, with its compiled graph and that graph's
    memory, unless it is released when dropped.

    Not a dict or list on purpose: Gluon would take the views held in one for children the
    owner forgot to register, and warn.
    """

    def __init__(self, limit=None, on_drop=None):
        self._limit = limit
        self._on_drop = on_drop
        self._by_key = OrderedDict()

    def _drop(self, view):
        if self._on_drop is not None:
            self._on_drop(view)

    def get(self, key):
        """The view under ``key`` (now the most recently used), or None."""
        view = self._by_key.get(key)
        if view is not None:
            self._by_key.move_to_end(key)
        return view

    def put(self, key, view):
        """Keep ``view`` under ``key``, dropping the least recently used beyond the limit."""
        self._by_key[key] = view
        while self._limit is not None and len(self._by_key) > self._limit:
            self._drop(self._by_key.popitem(last=False)[1])

    def keys(self):
        """The keys, least recently used first."""
        return list(self._by_key)

    def last(self):
        """The most recently used view, or None."""
        return next(reversed(self._by_key.values()), None)

    def clear(self):
        views = list(self._by_key.values())
        self._by_key.clear()
        for view in views:
            self._drop(view)

    def __iter__(self):
        return iter(list(self._by_key.values()))
