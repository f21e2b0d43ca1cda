"""The same training work under each tool: a hand-written Gluon loop, gluonkit.Trainer, gluonkit.fit,
the Module API, and forward+backward alone (the floor).

Every contestant trains one network, initialized from the same seed, on the same synthetic
inputs (normal noise; labels as the loss takes them) with SGD (momentum, weight decay).
``build(config)`` returns an object with ``setup()`` (one warm-up epoch: hybridization's
compilation, the kernels, the memory pools) and ``run()`` (one timed epoch), as
:func:`gluonkit.bench.harness.serve` expects. ``run`` returns what the epoch did, counted
where it happened: ``samples`` (drawn by the loader's sampler; for the Module, its batches
times their size; for the floor, the batches it ran) and ``updates`` (the optimizer's update
count, or the Module's batches), so that a test can see that the contestants did equal work.

A config is a dict:

- ``tool``: a key of ``TOOLS``;
- ``net`` (a :mod:`gluonkit.bench.network` spec), ``input_shapes`` (one per input),
  ``label_shape``, ``classes``, ``loss`` (a key of ``LOSSES``), ``dtype``;
- ``device`` ('cpu' or 'gpu'), ``devices`` (a count), ``kvstore``;
- ``batch`` (samples per device and micro-batch), ``accumulate`` (micro-batches per update),
  ``steps`` (updates per epoch), ``hybridize`` ('none', 'dynamic' or 'static'), ``seed``;
- optionally ``on_nonfinite`` (gluonkit.Trainer's, default 'ignore').
"""
import logging
import os
import shutil
import tempfile
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import gluonkit
from .network import LOSSES, build_network, initialize

__all__ = ["TOOLS", "DEFAULT_TOOLS", "OPTIMIZER", "DISTINCT_SAMPLES", "contexts", "applies", "make_network",
           "make_data", "make_loader", "forward_backward", "build"]

OPTIMIZER = ("sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})
#: name: what the row is called
TOOLS = {
    "floor": "forward+backward only (the floor)",
    "gluon": "hand-written Gluon loop + gluon.Trainer",
    "gluonkit": "Gluon loop + gluonkit.Trainer",
    "fit": "gluonkit.fit",
    "module": "Module.fit, same DataLoader, no metric",
    "module-ndarrayiter": "Module.fit on an NDArrayIter, no metric",
    "estimator": "Gluon Estimator.fit (its default metrics)",
}
#: the contestants run unless others are asked for
DEFAULT_TOOLS = ("floor", "gluon", "gluonkit", "fit", "module")
#: at most this many different samples are held in memory; an epoch cycles through them
DISTINCT_SAMPLES = 256


def contexts(device, count):
    """``count`` contexts of kind 'cpu' or 'gpu'."""
    return [mx.Context(device, i) for i in range(count)]


def applies(tool, config, hybrid=True):
    """Why ``tool`` cannot train this config the same way as the others (a str), or None if it
    can; ``hybrid``: whether the network is a HybridBlock."""
    if tool == "estimator":
        return None if len(config["input_shapes"]) == 1 and config["accumulate"] == 1 else \
            "the Estimator takes one input and no accumulation"
    if not tool.startswith("module"):
        return None
    if not hybrid:
        return "Module.fit needs a HybridBlock, to export its graph"
    if config["loss"] != "softmax":
        return "Module.fit's SoftmaxOutput is the softmax loss only"
    if len(config["input_shapes"]) != 1:
        return "Module.fit is fed by DataLoaderIter, one input"
    if config["accumulate"] != 1:
        return "Module.fit updates after every batch (no accumulation)"
    if config["dtype"] != "float32":
        return "float32 only"
    return None


def make_network(config, ctx):
    """The config's network, initialized on ``ctx`` (from the config's seed), cast to its
    dtype and hybridized as it asks."""
    mx.random.seed(config["seed"])
    net = build_network(config["net"], config["classes"])
    initialize(net, config["net"], ctx)
    # the deferred initialization happens now, before anything else draws from MXNet's generator;
    # in training mode, as oneDNN's inference pass may keep a weight in a layout of its own,
    # which a dist kvstore cannot send (the same running statistics in every contestant)
    with autograd.train_mode():
        net(*[mx.nd.zeros([2] + list(shape), ctx=ctx[0]) for shape in config["input_shapes"]])
    if config["dtype"] != "float32":
        net.cast(config["dtype"])
    if config["hybridize"] != "none":
        net.hybridize(**({"static_alloc": True, "static_shape": True} if config["hybridize"] == "static" else {}))
    return net


def make_data(config, samples):
    """Synthetic inputs (a list of arrays, one per input) and labels as NumPy arrays."""
    rng = np.random.RandomState(config["seed"])
    inputs = [rng.standard_normal([samples] + list(shape)).astype(config["dtype"])
              for shape in config["input_shapes"]]
    if LOSSES[config["loss"]][1] == "classes":
        labels = rng.randint(0, config["classes"], samples)
    elif config["loss"] == "sigmoid":
        labels = rng.randint(0, 2, [samples] + list(config["label_shape"]))
    else:
        labels = rng.standard_normal([samples] + list(config["label_shape"]))
    return inputs, labels.astype(config["dtype"])


class _CountingSampler(gluon.data.Sampler):
    """``length`` indices in order over ``size`` samples (cycling), counting those drawn."""

    def __init__(self, length, size):
        self._length, self._size, self.drawn = length, size, 0

    def __iter__(self):
        for index in range(self._length):
            self.drawn += 1
            yield index % self._size

    def __len__(self):
        return self._length


def make_loader(arrays, batch, length):
    """A DataLoader over the arrays (inputs, then labels): ``length`` samples in order, full
    batches of ``batch``; its ``sampler`` counts the samples drawn."""
    sampler = _CountingSampler(length, len(arrays[0]))
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(*arrays), batch_size=batch,
                                   sampler=sampler, last_batch="discard")
    loader.sampler = sampler
    return loader


def forward_backward(net, loss_fn, inputs, labels):
    """Record the forward pass and loss of every device's slice, then back-propagate them all.
    ``inputs`` is a list over the network's inputs of lists over the devices."""
    with autograd.record():
        losses = [loss_fn(net(*xs), y) for xs, y in zip(zip(*inputs), labels)]
    autograd.backward(losses)
    return losses


class _Contestant:
    """The data and the network of a config; subclasses define how an epoch is trained."""

    def __init__(self, config):
        self.config = config
        self.ctx = contexts(config["device"], config["devices"])
        self.batch = config["batch"] * config["devices"]          # one micro-batch, all devices
        self.micro_steps = config["steps"] * config["accumulate"]
        self.samples = self.micro_steps * self.batch
        self.inputs, self.labels = make_data(config, min(self.samples, max(DISTINCT_SAMPLES, self.batch)))
        self.net = make_network(config, self.ctx)
        self.loss_fn = getattr(gluon.loss, LOSSES[config["loss"]][0])()

    def make_trainer(self, kind, **options):
        """A ``gluon.Trainer`` or ``gluonkit.Trainer`` with the config's settings; ``options``
        (keyword arguments of ``gluonkit.Trainer``, e.g. ``clip_global_norm``) override them."""
        c = self.config
        if kind == "gluon":
            return gluon.Trainer(self.net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]),
                                 kvstore=c["kvstore"])
        settings = dict({"kvstore": c["kvstore"], "accumulate": c["accumulate"],
                         "on_nonfinite": c.get("on_nonfinite", "ignore")}, **options)
        return gluonkit.Trainer(self.net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), **settings)

    def make_loader(self):
        return make_loader(self.inputs + [self.labels], self.batch, self.samples)

    def setup(self):
        return self.run()


class _Floor(_Contestant):
    """Forward and backward of one micro-batch already on the devices, once per micro-batch of
    an epoch: no optimizer, no data loading."""

    def __init__(self, config):
        super().__init__(config)
        self._xs = [gluonkit.split_and_load(x[:self.batch], self.ctx) for x in self.inputs]
        self._ys = gluonkit.split_and_load(self.labels[:self.batch], self.ctx)

    def run(self):
        for _ in range(self.micro_steps):
            forward_backward(self.net, self.loss_fn, self._xs, self._ys)
        return {"samples": self.samples, "updates": 0}


class _Trained(_Contestant):
    """A contestant with an optimizer: ``run`` counts the samples drawn and the updates made."""

    def run(self):
        drawn, updates = self.loader.sampler.drawn, self.trainer.optimizer.num_update
        self.epoch()
        return {"samples": self.loader.sampler.drawn - drawn,
                "updates": self.trainer.optimizer.num_update - updates}


class _GluonLoop(_Trained):
    """The loop a user writes with ``gluon.Trainer``: ``split_and_load`` every input, forward,
    backward, ``trainer.step``; with accumulation, gradients added (``grad_req='add'``) over
    the micro-batches, one step on their samples, then zeroed."""

    def __init__(self, config):
        super().__init__(config)
        self.trainer = self.make_trainer("gluon")
        self.loader = self.make_loader()
        if config["accumulate"] > 1:
            for param in self.net.collect_params().values():
                if param.grad_req != "null":
                    param.grad_req = "add"

    def epoch(self):
        accumulate, seen = self.config["accumulate"], 0
        for index, (*inputs, y) in enumerate(self.loader):
            xs = [gluon.utils.split_and_load(x, self.ctx) for x in inputs]
            forward_backward(self.net, self.loss_fn, xs, gluon.utils.split_and_load(y, self.ctx))
            seen += y.shape[0]
            if (index + 1) % accumulate == 0:
                self.trainer.step(seen)
                seen = 0
                if accumulate > 1:
                    self.net.collect_params().zero_grad()


class _GluonkitLoop(_Trained):
    """The same loop with ``gluonkit.split_and_load`` and ``gluonkit.Trainer`` (which
    accumulates itself: ``step`` after every micro-batch)."""

    def __init__(self, config):
        super().__init__(config)
        self.trainer = self.make_trainer("gluonkit")
        self.loader = self.make_loader()

    def epoch(self):
        for *inputs, y in self.loader:
            xs = [gluonkit.split_and_load(x, self.ctx) for x in inputs]
            forward_backward(self.net, self.loss_fn, xs, gluonkit.split_and_load(y, self.ctx))
            self.trainer.step(y.shape[0])


class _Fit(_Trained):
    """``gluonkit.fit`` for one epoch with a ``gluonkit.Trainer`` (no progress bar; several
    inputs through a ``batch_fn``)."""

    def __init__(self, config):
        super().__init__(config)
        self.trainer = self.make_trainer("gluonkit")
        self.loader = self.make_loader()
        self._batch_fn = self._several_inputs if len(config["input_shapes"]) > 1 else None

    def _several_inputs(self, net, batch, ctx):
        *inputs, y = batch
        xs = [gluonkit.split_and_load(x, ctx) for x in inputs]
        ys = gluonkit.split_and_load(y, ctx)
        return [self.loss_fn(net(*parts), part) for parts, part in zip(zip(*xs), ys)], y.shape[0]

    def epoch(self):
        gluonkit.fit(self.net, None if self._batch_fn else self.loss_fn, self.trainer, self.loader,
                     epochs=1, ctx=self.ctx, progress=False, batch_fn=self._batch_fn)


class _NoMetric(mx.metric.EvalMetric):
    """A metric that computes nothing: Module.fit's default accuracy waits for every batch's
    outputs on the host, work the other contestants do not do."""

    def __init__(self):
        super().__init__("none")

    def update(self, labels, preds):
        pass


class _Module(_Contestant):
    """``mx.mod.Module.fit`` for one epoch on the network exported by Gluon (same weights),
    fed by the same DataLoader (``mx.contrib.io.DataLoaderIter``), without a metric."""

    def __init__(self, config):
        from mxnet.contrib.io import DataLoaderIter

        super().__init__(config)
        symbol, args, auxs = _export(self.net, self.inputs[0][:1], self.ctx[0])
        output = mx.sym.SoftmaxOutput(symbol, name="softmax")   # label: 'softmax_label'
        quiet = logging.getLogger("gluonkit.bench.module")       # refits warn "already bound"
        quiet.setLevel(logging.ERROR)
        # and that the parameters are initialized already (this process runs this contestant only)
        warnings.filterwarnings("ignore", message="Parameters already initialized")
        self._module = mx.mod.Module(output, data_names=("data",), label_names=("softmax_label",),
                                     context=self.ctx, logger=quiet)
        self._params = args, auxs
        self.loader = self.make_loader()
        self._iter = DataLoaderIter(self.loader, dtype=config["dtype"])
        self._batches = self._samples = 0

    def _count(self, _):
        self._batches += 1
        self._samples += self.batch

    def run(self):
        samples, batches = self._samples, self._batches
        self._iter.reset()
        args, auxs = self._params
        self._module.fit(self._iter, num_epoch=1, kvstore=self.config["kvstore"], eval_metric=_NoMetric(),
                         optimizer=OPTIMIZER[0], optimizer_params=dict(OPTIMIZER[1]),
                         arg_params=args, aux_params=auxs, batch_end_callback=self._count)
        return {"samples": self._samples - samples, "updates": self._batches - batches}


class _ModuleOnNDArrayIter(_Module):
    """``Module.fit`` on an ``mx.io.NDArrayIter`` over the same arrays: batches sliced out of
    one NDArray, no per-sample Python (the Module's own data path)."""

    def __init__(self, config):
        super().__init__(config)
        self._iter = mx.io.NDArrayIter(self.inputs[0], self.labels, self.batch, label_name="softmax_label",
                                       last_batch_handle="discard")
        self._epoch_batches = self.micro_steps

    def run(self):
        work = {"samples": 0, "updates": 0}
        while work["updates"] < self._epoch_batches:   # the arrays may hold fewer samples than an epoch
            part = super().run()
            work = {key: work[key] + part[key] for key in work}
        return work


class _Estimator(_Contestant):
    """``mxnet.gluon.contrib.estimator.Estimator.fit`` for one epoch, its default handlers."""

    def __init__(self, config):
        from mxnet.gluon.contrib.estimator import Estimator

        super().__init__(config)
        self.trainer = self.make_trainer("gluon")
        self._estimator = Estimator(self.net, self.loss_fn, trainer=self.trainer, context=self.ctx)
        self._estimator.logger.setLevel(logging.WARNING)   # it logs each epoch to stdout
        self.loader = self.make_loader()

    def run(self):
        drawn, updates = self.loader.sampler.drawn, self.trainer.optimizer.num_update
        self._estimator.fit(self.loader, epochs=1)
        return {"samples": self.loader.sampler.drawn - drawn,
                "updates": self.trainer.optimizer.num_update - updates}


def _export(net, sample, ctx):
    """``net``'s symbol and parameters, hybridized, through ``export`` and back."""
    net.hybridize()   # (again, for a network the config leaves imperative)
    net(mx.nd.array(sample, ctx=ctx))
    directory = tempfile.mkdtemp(prefix="gluonkit-bench-")
    try:
        prefix = os.path.join(directory, "net")
        net.export(prefix)
        symbol = mx.sym.load(prefix + "-symbol.json")
        saved = mx.nd.load(prefix + "-0000.params")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    auxs = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    return symbol, args, auxs


_CLASSES = {"floor": _Floor, "gluon": _GluonLoop, "gluonkit": _GluonkitLoop, "fit": _Fit, "module": _Module,
            "module-ndarrayiter": _ModuleOnNDArrayIter, "estimator": _Estimator}


def build(config):
    """The contestant a config describes (built in its own worker process)."""
    if config["tool"] not in _CLASSES:
        raise ValueError(f"unknown tool {config['tool']!r}; one of {', '.join(TOOLS)}.")
    return _CLASSES[config["tool"]](config)
