"""The same training work under each tool: a Gluon loop, gluonkit, the Estimator, the Module API.

Every contestant trains one network, initialized from the same seed, on the same synthetic
images with SGD (momentum, weight decay) and the softmax cross-entropy loss, hybridized.
``build(config)`` returns an object with ``setup()`` (build, then one warm-up epoch) and
``run()`` (one epoch; returns the number of samples), as ``_harness.serve`` expects.

A config is a dict: ``tool`` (a key of ``TOOLS``), ``net`` (a key of ``NETWORKS``),
``devices``, ``device`` ('cpu' or 'gpu'), ``kvstore``, ``batch`` (samples per step over all
devices), ``accumulate``, ``on_nonfinite``, ``steps`` (batches per epoch), ``seed`` and,
optionally, ``static`` (hybridize with ``static_alloc`` and ``static_shape``).
"""
import logging
import os
import shutil
import tempfile

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import gluonkit
from gluonkit.recipes.models import small_cnn

# name: input shape (channels, height, width)
NETWORKS = {
    "cnn": (1, 8, 8),                   # the recipes' small CNN on digit-sized images
    "cifar_resnet20_v1": (3, 32, 32),
    "resnet18_v1b": (3, 64, 64),
}
# per network: (batch per device, batches per epoch) of a benchmark's epoch
SIZES = {"cnn": (64, 60), "cifar_resnet20_v1": (64, 8), "resnet18_v1b": (32, 4)}
QUICK_SIZE = (8, 3)
CLASSES = 10
OPTIMIZER = ("sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})
TOOLS = ("floor", "gluon", "gluonkit", "fit", "estimator", "module", "module-loader")


def contexts(device, count):
    """``count`` contexts of kind 'cpu' or 'gpu'."""
    return [mx.Context(device, i) for i in range(count)]


def make_net(name, seed):
    """A network of ``NETWORKS`` (GluonCV ones with pretrained=False), not yet initialized."""
    mx.random.seed(seed)
    if name == "cnn":
        return small_cnn(CLASSES)
    from gluoncv.model_zoo import get_model

    return get_model(name, pretrained=False, classes=CLASSES)


def make_data(net, samples, seed):
    """Synthetic images for ``net`` (normal noise) and random labels, as NumPy arrays."""
    rng = np.random.RandomState(seed)
    images = rng.standard_normal((samples,) + NETWORKS[net]).astype(np.float32)
    return images, rng.randint(0, CLASSES, samples).astype(np.float32)


def initialized_net(config, ctx):
    """The config's network, initialized on ``ctx`` and hybridized (with static memory and
    shapes when the config's ``static`` is true: the switch the README recommends)."""
    net = make_net(config["net"], config["seed"])
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(**({"static_alloc": True, "static_shape": True} if config.get("static") else {}))
    return net


def make_loader(images, labels, batch):
    """A DataLoader over the arrays, in order, full batches only."""
    return gluon.data.DataLoader(gluon.data.ArrayDataset(images, labels), batch_size=batch,
                                 last_batch="discard")


def forward_backward(net, loss_fn, xs, ys):
    """Record the forward pass and loss of every slice, then back-propagate them all."""
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
    autograd.backward(losses)
    return losses


def train_step(net, loss_fn, trainer, split, ctx, x, y):
    """One step of a hand-written loop: split the batch, forward, backward, ``trainer.step``."""
    forward_backward(net, loss_fn, split(x, ctx), split(y, ctx))
    trainer.step(x.shape[0])


def _gluon_split(data, ctx):
    return gluon.utils.split_and_load(data, ctx)


class _Contestant:
    """The data and the network of a config; subclasses define how an epoch is trained."""

    def __init__(self, config):
        self.config = config
        self.ctx = contexts(config["device"], config["devices"])
        self.batch = config["batch"]
        self.samples = config["steps"] * self.batch
        self.images, self.labels = make_data(config["net"], self.samples, config["seed"])
        self.net = initialized_net(config, self.ctx)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def make_trainer(self, kind, **options):
        """A ``gluon.Trainer`` or ``gluonkit.Trainer`` with the config's settings; ``options``
        (keyword arguments of ``gluonkit.Trainer``, e.g. ``clip_global_norm``) override them."""
        c = self.config
        if kind == "gluon":
            return gluon.Trainer(self.net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]),
                                 kvstore=c["kvstore"])
        settings = dict({"kvstore": c["kvstore"], "accumulate": c["accumulate"],
                         "on_nonfinite": c["on_nonfinite"]}, **options)
        return gluonkit.Trainer(self.net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]), **settings)

    def setup(self):
        return self.run()


class _Floor(_Contestant):
    """Forward and backward of one batch already on the devices: no optimizer, no data loading."""

    def __init__(self, config):
        super().__init__(config)
        self._xs = gluonkit.split_and_load(self.images[:self.batch], self.ctx)
        self._ys = gluonkit.split_and_load(self.labels[:self.batch], self.ctx)

    def run(self):
        for _ in range(self.config["steps"]):
            forward_backward(self.net, self.loss_fn, self._xs, self._ys)
        return self.samples


class _Loop(_Contestant):
    """A hand-written loop over a DataLoader with ``gluon.Trainer`` or ``gluonkit.Trainer``."""

    def __init__(self, config):
        super().__init__(config)
        self.trainer = self.make_trainer(config["tool"])
        self._split = _gluon_split if config["tool"] == "gluon" else gluonkit.split_and_load
        self._loader = make_loader(self.images, self.labels, self.batch)

    def run(self):
        for x, y in self._loader:
            train_step(self.net, self.loss_fn, self.trainer, self._split, self.ctx, x, y)
        return self.samples


class _Fit(_Contestant):
    """``gluonkit.fit`` for one epoch with a ``gluonkit.Trainer`` (no progress bar)."""

    def __init__(self, config):
        super().__init__(config)
        self._trainer = self.make_trainer("gluonkit")
        self._loader = make_loader(self.images, self.labels, self.batch)

    def run(self):
        gluonkit.fit(self.net, self.loss_fn, self._trainer, self._loader, epochs=1, ctx=self.ctx,
                     progress=False)
        return self.samples


class _Estimator(_Contestant):
    """``mxnet.gluon.contrib.estimator.Estimator.fit`` for one epoch, its default handlers."""

    def __init__(self, config):
        from mxnet.gluon.contrib.estimator import Estimator

        super().__init__(config)
        self._estimator = Estimator(self.net, self.loss_fn, trainer=self.make_trainer("gluon"),
                                    context=self.ctx)
        self._estimator.logger.setLevel(logging.WARNING)   # it logs each epoch to stdout
        self._loader = make_loader(self.images, self.labels, self.batch)

    def run(self):
        self._estimator.fit(self._loader, epochs=1)
        return self.samples


class _Module(_Contestant):
    """``mx.mod.Module.fit`` for one epoch on the network exported by Gluon (same weights)."""

    def __init__(self, config):
        super().__init__(config)
        symbol, args, auxs = _export(self.net, self.images[:1], self.ctx[0])
        output = mx.sym.SoftmaxOutput(symbol, name="softmax")   # label: 'softmax_label'
        quiet = logging.getLogger("gluonkit.benchmarks.module")   # refits warn "already bound"
        quiet.setLevel(logging.ERROR)
        self._module = mx.mod.Module(output, data_names=("data",), label_names=("softmax_label",),
                                     context=self.ctx, logger=quiet)
        self._params = args, auxs
        self._iter = mx.io.NDArrayIter(self.images, self.labels, self.batch,
                                       label_name="softmax_label", last_batch_handle="discard")

    def run(self):
        self._iter.reset()
        args, auxs = self._params
        self._module.fit(self._iter, num_epoch=1, kvstore=self.config["kvstore"],
                         optimizer=OPTIMIZER[0], optimizer_params=dict(OPTIMIZER[1]),
                         arg_params=args, aux_params=auxs)
        return self.samples


class _ModuleOnLoader(_Module):
    """``Module.fit`` fed by the Gluon contestants' DataLoader (``mx.contrib.io.DataLoaderIter``)."""

    def __init__(self, config):
        from mxnet.contrib.io import DataLoaderIter

        super().__init__(config)
        self._iter = DataLoaderIter(make_loader(self.images, self.labels, self.batch))


def _export(net, sample, ctx):
    """The hybridized ``net``'s symbol and parameters, through ``export`` and back."""
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


_CLASSES = {"floor": _Floor, "gluon": _Loop, "gluonkit": _Loop, "fit": _Fit,
            "estimator": _Estimator, "module": _Module, "module-loader": _ModuleOnLoader}


def build(config):
    """The contestant a config describes (built in its own worker process)."""
    if config["tool"] not in _CLASSES:
        raise ValueError(f"unknown tool {config['tool']!r}; one of {', '.join(TOOLS)}.")
    return _CLASSES[config["tool"]](config)
