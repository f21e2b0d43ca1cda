"""The Horovod engine: Horovod's all-reduce and broadcast behind the kvstore interface the
Trainer drives, so that ``kvstore='horovod'`` keeps every promise of ``dist_sync``.

Horovod is optional: it is imported when a Trainer asks for it, with an error that says how
to install it. Each rank is one process (``horovodrun -np N``); a rank may hold several
devices, whose gradients are summed on its first device before the all-reduce.
"""
import os
import zlib

import mxnet as mx

from ..validate import finite_real

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
                          f"({err}). Install it with `{INSTALL}` (mxnet first; 1 to 18 minutes on 2 cores), or "
                          "`make horovod` in a clone of gluonkit.") from None
    return hvd


class Horovod(mx.kv.KVStoreBase):
    """Sums and broadcasts over the ranks of a job started by ``horovodrun``.

    ``pushpull`` of one key or of a list of keys is one (grouped) all-reduce that SUMS over
    the ranks (Horovod's trainer averages); ``broadcast`` sends rank 0's value to every rank.
    Updates run on the ranks (``is_capable('optimizer')`` is False).

    Gradients may travel compressed, as with ``hvd.DistributedTrainer``: ``compression=
    hvd.Compression.fp16`` sends them as float16 and ``gradient_predivide_factor=f`` divides
    them by ``f`` before the sum (against float16 overflow), and the update multiplies them back.
    What the ranks agree on (counts, flags) is always summed exactly, in float64. Process
    sets are not supported: every rank of the job takes part.

    Parameters
    ----------
    compression : hvd.Compression.none or hvd.Compression.fp16, optional
        How gradients travel; by default as they are.
    gradient_predivide_factor : float, default 1.0
        A finite number > 0.

    Example::

        trainer = gluonkit.Trainer(net.collect_params(), "sgd", kvstore="horovod")
        trainer = gluonkit.Trainer(net.collect_params(), "sgd",
                                   kvstore=Horovod(compression=hvd.Compression.fp16))
    """

    def __init__(self, compression=None, gradient_predivide_factor=1.0):
        hvd = import_horovod()
        compressions = (hvd.Compression.none, hvd.Compression.fp16)
        if compression is not None and compression not in compressions:
            raise TypeError(f"compression must be hvd.Compression.none or hvd.Compression.fp16, got "
                            f"{compression!r}.")
        self._predivide = finite_real(gradient_predivide_factor, "gradient_predivide_factor",
                                      "what gradients are divided by before the sum", above=0,
                                      hint="; use 1.0 for none")
        if not any(name in os.environ for name in _LAUNCHED_BY):
            raise RuntimeError("kvstore='horovod' needs a job started by horovodrun (HOROVOD_RANK is not "
                               "set), e.g. `horovodrun --gloo -np 2 -H localhost:2 python train.py`; use "
                               "kvstore='device' in a single process.")
        hvd.init()
        self._hvd = hvd
        self._compression = compression or hvd.Compression.none
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

    @property
    def gradient_predivide_factor(self):
        """float: What gradients are divided by before the sum (the update multiplies it back)."""
        return self._predivide

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

    def pushpull(self, key, value, out=None, priority=0, gradients=False):
        """Sum ``value`` over the ranks, in place (or into ``out``), in one all-reduce.

        ``key`` is a key or a list of keys; ``value`` an array or a list of arrays (one per
        device of this rank, summed first), or a list of those for a list of keys. The
        all-reduce is named by its keys: Horovod then negotiates a set of keys once and
        replays the plan at every later update (a new name would be negotiated each time).
        ``gradients=True`` applies ``compression`` and divides by ``gradient_predivide_factor``
        before the sum (the update multiplies it back, as Horovod's trainer does); other values
        are summed exactly.
        """
        keys = tuple(key) if isinstance(key, (list, tuple)) else (key,)
        values = value if isinstance(key, (list, tuple)) else [value]
        outs = values if out is None else (out if isinstance(key, (list, tuple)) else [out])
        heads = [_local_sum(v) for v in values]
        name = f"gluonkit.sum.{len(keys)}.{zlib.crc32(repr(keys).encode()):08x}"
        compression = self._compression if gradients else self._hvd.Compression.none
        factor = self._predivide if gradients else 1.0
        wire = [compression.compress(head) for head in heads]
        self._hvd.grouped_allreduce_([w for w, _ in wire], op=self._hvd.Sum, name=name, priority=priority,
                                     prescale_factor=1.0 / factor)
        for head, (sent, dtype) in zip(heads, wire):
            if sent is not head:
                compression.decompress(sent, dtype).copyto(head)
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
