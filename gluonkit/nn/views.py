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

    Not a dict or list on purpose: Gluon would take the views held in one for children the
    owner forgot to register, and warn.
    """

    def __init__(self, limit=None):
        self._limit = limit
        self._by_key = OrderedDict()

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
            self._by_key.popitem(last=False)

    def keys(self):
        """The keys, least recently used first."""
        return list(self._by_key)

    def last(self):
        """The most recently used view, or None."""
        return next(reversed(self._by_key.values()), None)

    def clear(self):
        self._by_key.clear()

    def __iter__(self):
        return iter(list(self._by_key.values()))
