"""Generator states for exact resumption: Python's, NumPy's, and a reproducible MXNet seed."""
import hashlib
import random

import mxnet as mx
import numpy as np

__all__ = ["get_rng_state", "set_rng_state", "reseed_mxnet"]


def get_rng_state():
    """The Python and NumPy generator states, as ``set_rng_state`` takes them.

    MXNet's generator state cannot be read; see ``reseed_mxnet``.

    Example::

        >>> state = get_rng_state()
        >>> a = np.random.rand(); set_rng_state(state); a == np.random.rand()
        True
    """
    return {"python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state):
    """Restore generator states from ``get_rng_state`` (and seed MXNet if it holds a seed).

    Example::

        >>> set_rng_state({**get_rng_state(), "mxnet_seed": 7})
    """
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if state.get("mxnet_seed") is not None:
        mx.random.seed(state["mxnet_seed"])


def reseed_mxnet(salt=0):
    """Seed MXNet's generators from the Python and NumPy states and ``salt``; return the seed.

    The seed is a hash of the two states, which are read but not advanced. MXNet cannot
    report its own generator state, so exact resumption reseeds it at points that a resumed
    run passes through too: ``fit`` does it at the start of every epoch and when it takes a
    mid-epoch snapshot (``FitState.snapshot``).

    Example::

        >>> np.random.seed(0); a = reseed_mxnet(salt=3)
        >>> np.random.seed(0); a == reseed_mxnet(salt=3)
        True
    """
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    digest = hashlib.blake2b(digest_size=4)
    digest.update(repr(random.getstate()).encode())
    digest.update(keys.tobytes())
    digest.update(repr((pos, has_gauss, gauss, salt)).encode())
    seed = int.from_bytes(digest.digest(), "little") & 0x7FFFFFFF
    mx.random.seed(seed)
    return seed
