"""The Horovod engine: Horovod's all-reduce and broadcast behind the kvstore interface the
Trainer drives, so that ``kvstore='horovod'`` keeps every promise of ``dist_sync``.

Horovod is optional: it is imported when a Trainer asks for it, with an error that says how
to install it. Each rank is one process (``horovodrun -np N``); a rank may hold several
devices, whose gradients are summed on its first device before the all-reduce.
"""
import os
import zlib

import mxnet as mx

__all__ = ["Horovod", "INSTALL", "import_horovod", "is_horovod", "launched_ranks"]

INSTALL = ("pip install wheel && HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
           "HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 pip install --no-cache-dir --no-build-isolation "
           "horovod==0.28.1")
# what horovodrun (Gloo) or mpirun (Open MPI, MPICH, Intel MPI) sets in each rank's environment
_LAUNCHED_BY = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def launched_ranks():
    """The number of ranks of the job ``horovodrun`` or ``mpirun`` started this process in (from
    their environment), or None outside such a job."""
    for rank, size in zip(_LAUNCHED_BY, ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")):
        if rank in os.environ:
            value = os.environ.get(size, "")
            return int(value) if value.isdigit() else 1
    return None


def is_horovod(kvstore):
    """Whether ``kvstore`` asks for Horovod: the name 'horovod' (any case) or the engine itself."""
    return (isinstance(kvstore, str) and kvstore.lower() == "horovod") or isinstance(kvstore, Horovod)


def import_horovod():
    """``horovod.mxnet``, or an ImportError that says how to install it."""
    try:
        import horovod.mxnet as hvd
    except ImportError as err:
        raise ImportError(f"kvstore='horovod' needs Horovod built for MXNet, which is not installed "
                          f"({err}). Install it with `{INSTALL}` (mxnet first; about a minute), or "
                          "`make horovod` in a clone of gluonkit.") from None
    return hvd


class Horovod(mx.kv.KVStoreBase):
    """Sums and broadcasts over the ranks of a job started by ``horovodrun``.

    ``pushpull`` of one key or of a list of keys is one (grouped) all-reduce that SUMS over
    the ranks (Horovod's trainer averages); ``broadcast`` sends rank 0's value to every rank.
    Updates run on the ranks (``is_capable('optimizer')`` is False).

    Example::

        trainer = gluonkit.Trainer(net.collect_params(), "sgd", kvstore="horovod")
    """

    def __init__(self):
        hvd = import_horovod()
        if not any(name in os.environ for name in _LAUNCHED_BY):
            raise RuntimeError("kvstore='horovod' needs a job started by horovodrun (HOROVOD_RANK is not "
                               "set), e.g. `horovodrun --gloo -np 2 -H localhost:2 python train.py`; use "
                               "kvstore='device' in a single process.")
        hvd.init()
        self._hvd = hvd
        self._broadcasts = 0   # names the broadcasts, in the same order on every rank

    @property
    def type(self):
        """str: 'horovod'."""
        return "horovod"

    @property
    def rank(self):
        """int: This process's rank, 0 .. ``num_workers`` - 1."""
        return self._hvd.rank()

    @property
    def num_workers(self):
        """int: Number of ranks in the job."""
        return self._hvd.size()

    @staticmethod
    def is_capable(capability):
        """False: the optimizer runs on the ranks, never in the engine."""
        return False

    def init(self, key, value):
        """Nothing to do: Horovod keeps no values (kept for the kvstore interface)."""

    def broadcast(self, key, value, out, priority=0):
        """Rank 0's ``value`` into ``out`` (an array or a list, e.g. one per device) on every rank."""
        buffer = value.copy()
        self._broadcasts += 1
        self._hvd.broadcast_(buffer, root_rank=0, name=f"gluonkit.broadcast.{self._broadcasts}", priority=priority)
        for array in out if isinstance(out, (list, tuple)) else [out]:
            buffer.copyto(array)

    def pushpull(self, key, value, out=None, priority=0):
        """Sum ``value`` over the ranks, in place (or into ``out``), in one all-reduce.

        ``key`` is a key or a list of keys; ``value`` an array or a list of arrays (one per
        device of this rank, summed first), or a list of those for a list of keys. The
        all-reduce is named by its keys: Horovod then negotiates a set of keys once and
        replays the plan at every later update (a new name would be negotiated each time).
        """
        keys = tuple(key) if isinstance(key, (list, tuple)) else (key,)
        values = value if isinstance(key, (list, tuple)) else [value]
        outs = values if out is None else (out if isinstance(key, (list, tuple)) else [out])
        heads = [_local_sum(v) for v in values]
        name = f"gluonkit.sum.{len(keys)}.{zlib.crc32(repr(keys).encode()):08x}"
        self._hvd.grouped_allreduce_(heads, op=self._hvd.Sum, name=name, priority=priority)
        for head, destination in zip(heads, outs):
            for array in destination if isinstance(destination, (list, tuple)) else [destination]:
                if array is not head:
                    head.copyto(array)

    def set_optimizer(self, optimizer):
        raise ValueError("Horovod does not run optimizers: the update runs on every rank "
                         "(leave update_on_kvstore unset).")


def _local_sum(arrays):
    """The first array, holding the sum of ``arrays`` (one per device of this rank)."""
    if not isinstance(arrays, (list, tuple)):
        return arrays
    head = arrays[0]
    if len(arrays) > 1:
        mx.nd.add_n(*(a.as_in_context(head.context) for a in arrays)).copyto(head)
    return head
