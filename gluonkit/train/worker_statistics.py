"""BatchNorm's running statistics of a job of N workers, equal to those of one process.

In training, BatchNorm normalizes each micro-batch by its own statistics, so the micro-batches
of a :class:`~gluonkit.data.GlobalBatchSampler` give the same gradients on any number of
workers. Its running mean and variance are another matter: each device updates its own,
``x <- m x + (1 - m) s`` (momentum ``m``) for every micro-batch it runs, so a worker's hold
only its own micro-batches. Both updates are linear, so the statistics of one process that ran
every micro-batch in the global order are the sum of one term per micro-batch:
:class:`MergeRunningStatistics` lets each worker decay its statistics by ``m`` for every
micro-batch another worker runs (as if that micro-batch contributed 0) and, at every epoch's
end (before validation, checkpoint and export) and when training stops, adds them up over the
workers, taking out the starting value the workers all counted. Every worker then holds the
statistics of one process, device by device, to float rounding (a run stopped in mid-epoch
and resumed gets them to float rounding too, not bit for bit).

The layers are found in the graphs of the network's Gluon BatchNorm layers and of its
SymbolBlocks (GluonCV's SSD features: a backbone exported to a symbol graph plus
``mx.sym.BatchNorm`` layers), each with the momentum and ``use_global_stats`` of its operator.
"""
import json

import mxnet as mx
import numpy as np
from mxnet import gluon

from .callbacks import Callback

__all__ = ["MergeRunningStatistics"]

# MXNet's BatchNorm operators (their op names in a graph); each takes (data, gamma, beta,
# moving_mean, moving_var) and, without the attributes, momentum 0.9 and use_global_stats off
_BATCHNORM_OPS = ("BatchNorm", "_contrib_SyncBatchNorm", "_contrib_BatchNormWithReLU")
_DEFAULT_MOMENTUM = 0.9
_MAX_INPUTS = 64   # the most inputs tried on a SymbolBlock, which takes the number it was built on


def _graph(block):
    """The nodes (MXNet's JSON graph) of a BatchNorm layer or a SymbolBlock called on Symbols."""
    counts = range(1, _MAX_INPUTS + 1) if isinstance(block, gluon.SymbolBlock) else [1]
    for count in counts:
        try:   # forward, not __call__: no forward hook of the block sees the Symbols
            outputs = block.forward(*[mx.sym.var(f"input{i}") for i in range(count)])
        except AssertionError:   # a SymbolBlock given another number of inputs
            continue
        return json.loads(mx.sym.Group(_flat(outputs)).tojson())["nodes"]
    raise ValueError(f"MergeRunningStatistics cannot read the graph of the SymbolBlock {block.name!r}: it takes "
                     f"none of 1 to {_MAX_INPUTS} Symbols as inputs, so its BatchNorm statistics could not be "
                     f"merged; build it on a flat list of at most {_MAX_INPUTS} inputs.")


def _flat(outputs):
    """The Symbols of a forward's output, nested lists flattened."""
    if isinstance(outputs, mx.sym.Symbol):
        return [outputs]
    return [symbol for item in outputs for symbol in _flat(item)]


def _batchnorm_nodes(nodes):
    """``[(momentum, (moving_mean name, moving_var name)), ...]`` of the BatchNorm operators in
    ``nodes`` that update their running statistics in training."""
    found = []
    for node in nodes:
        options = node.get("attrs", {})
        if node["op"] in _BATCHNORM_OPS and options.get("use_global_stats", "0").lower() not in ("1", "true"):
            states = tuple(nodes[index]["name"] for index, _, _ in node["inputs"][3:5])
            found.append((float(options.get("momentum", _DEFAULT_MOMENTUM)), states))
    return found


def _running_statistics(net):
    """``[(parameter, momentum), ...]`` of the BatchNorm layers of ``net`` that update their
    running statistics in training: Gluon's layers and the BatchNorm operators in the graphs of
    its SymbolBlocks, each parameter once (a layer whose graph a SymbolBlock holds too)."""
    found = {}

    def visit(block):
        if isinstance(block, (gluon.nn.BatchNorm, gluon.nn.BatchNormReLU, gluon.SymbolBlock)):
            params = block.collect_params()
            for momentum, states in _batchnorm_nodes(_graph(block)):
                for name in states:
                    if name in params:   # not a graph input
                        found.setdefault(params[name], momentum)
    net.apply(visit)
    return list(found.items())


class MergeRunningStatistics(Callback):
    """A ``fit`` callback that gives every worker the BatchNorm running statistics of one process
    running all micro-batches of ``sampler`` (a :class:`~gluonkit.data.GlobalBatchSampler`) in
    order; a no-op on one worker.

    Put it before ``ModelCheckpoint`` in the callbacks, so that checkpoints hold the merged
    statistics. The network must be initialized (shapes known) before the Trainer is
    created, so that the Trainer's first update does not copy worker 0's statistics over the
    others' (a ``ValueError`` says so).

    Example::

        >>> loader = gluonkit.data.global_loader(data, 64, 16, kv.rank, kv.num_workers, seed=0)
        >>> sampler = loader.batch_sampler.sampler
        >>> fit(net, loss, trainer, loader, epochs=2,
        ...     callbacks=[MergeRunningStatistics(sampler), ModelCheckpoint('ckpt')])
    """

    def __init__(self, sampler):
        for name in ("own_micro_batches", "micro_batch_ranges", "batch_size", "accumulate"):
            if not hasattr(sampler, name):
                raise TypeError(f"sampler must be a gluonkit.data.GlobalBatchSampler, got {sampler!r}.")
        self.sampler = sampler
        self._stats = []
        self._own, self._ranges = [], []
        self._done = self._since = 0   # micro-batches accounted for; the last merge's position
        self._base = None               # the statistics at the last merge, one copy per array
        self._last_batch = None
        self._in_epoch = False

    def _active(self, state):
        return state.trainer.num_workers > 1 and bool(self._stats)

    def on_train_begin(self, state):
        if state.trainer.num_workers == 1:
            return
        self._stats = _running_statistics(state.net)
        deferred = [param.name for param, _ in self._stats if param._data is None]
        if deferred:
            raise ValueError(f"MergeRunningStatistics: {deferred[0]} is not initialized yet; give the network its "
                             "shapes before creating the Trainer (the layers' input sizes, or net.infer_shape and "
                             "initialize), or its first update copies worker 0's statistics over the others'.")
        if self._active(state):
            self._epoch_structure()
            self._take_base(0)

    def _epoch_structure(self):
        self._own, self._ranges = self.sampler.own_micro_batches(), self.sampler.micro_batch_ranges()

    def _arrays(self):
        return [(array, momentum) for param, momentum in self._stats for array in param.list_data()]

    def _take_base(self, position):
        self._base = [array.copy() for array, _ in self._arrays()]
        self._done = self._since = position

    def _decay_to(self, position):
        """Decay every statistic by ``m`` for each micro-batch from the one accounted for to
        ``position`` (another worker's: it contributes 0 here)."""
        gap = position - self._done
        if gap:
            for array, momentum in self._arrays():
                array *= momentum ** gap
        self._done = position

    def _merge(self, state, position):
        """Add the statistics up over the workers at global micro-batch ``position``."""
        self._decay_to(position)
        arrays = self._arrays()
        values = np.concatenate([array.asnumpy().astype("float64").reshape(-1) for array, _ in arrays])
        total = state.trainer.sum_over_workers(values)
        begin, extra = 0, state.trainer.num_workers - 1
        for (array, momentum), base in zip(arrays, self._base):
            end = begin + array.size
            merged = mx.nd.array(total[begin:end].reshape(array.shape), dtype="float64")
            merged = merged - extra * momentum ** (position - self._since) * base.astype("float64")
            merged.astype(array.dtype).copyto(array)
            begin = end
        self._take_base(position)

    def _global_batch_end(self, index):
        """The global micro-batches up to the end of the global batch that holds micro-batch ``index``."""
        batch = self._ranges[index][0] // self.sampler.batch_size
        return sum(1 for begin, _ in self._ranges if begin // self.sampler.batch_size <= batch)

    def on_epoch_begin(self, state):
        self._in_epoch, self._last_batch = True, 0
        if self._active(state):
            self._epoch_structure()
            self._take_base(0)
            self._decay_to(self._own[0] if self._own else 0)

    def on_resume(self, state):
        if not self._active(state):
            return
        done = state.position[1]   # batches done in the epoch resumed (state.batch is set once it resumes)
        if not done:
            return   # at an epoch's end: the next epoch's on_epoch_begin starts from the statistics loaded
        self._epoch_structure()
        self._last_batch, self._in_epoch = done, True
        # a checkpoint holds merged statistics, taken at the end of the last update
        position = self._global_batch_end(self._own[done - 1]) if done <= len(self._own) else 0
        self._take_base(position)
        if done < len(self._own):
            self._decay_to(self._own[done])

    def on_batch_end(self, state):
        if not self._active(state) or state.batch == self._last_batch:
            return   # a flushing worker's share of another's update: no micro-batch ran here
        self._last_batch = index = state.batch
        self._done = self._own[index - 1] + 1
        if index < len(self._own):
            self._decay_to(self._own[index])

    def on_train_data_end(self, state):
        self._in_epoch = False
        if self._active(state):
            self._merge(state, len(self._ranges))

    def on_train_end(self, state):
        if not (self._in_epoch and self._active(state)):
            return
        # stopped in mid-epoch after an update every worker made: rank 0 ran the latest global batch
        own_end = self._global_batch_end(self._own[state.batch - 1]) if state.batch else 0
        position = int(state.trainer.sum_over_workers([own_end if state.trainer.rank == 0 else 0])[0])
        self._merge(state, position)
        self._in_epoch = False
