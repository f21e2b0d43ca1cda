"""gluonkit's own benchmark networks and sizes, as configs of gluonkit-bench's contestants
(:mod:`gluonkit.bench.contestants`, where every contestant is defined).

A config here is the short form the scripts write: ``tool`` (a key of ``TOOLS``), ``net`` (a
key of ``NETWORKS``), ``devices``, ``device``, ``kvstore``, ``batch`` (samples per step over
all devices), ``accumulate``, ``on_nonfinite``, ``steps`` (batches per epoch), ``seed`` and,
optionally, ``static`` (hybridize with ``static_alloc`` and ``static_shape``).
"""
from gluonkit.bench import contestants
from gluonkit.bench.contestants import OPTIMIZER

__all__ = ["NETWORKS", "SIZES", "QUICK_SIZE", "CLASSES", "OPTIMIZER", "TOOLS", "bench_config", "build",
           "make_net", "make_data"]

# name: (gluonkit-bench network spec, input shape (channels, height, width))
NETWORKS = {
    "cnn": ({"source": "callable", "name": "gluonkit.recipes.models:small_cnn", "args": {}}, (1, 8, 8)),
    "cifar_resnet20_v1": ({"source": "zoo", "name": "cifar_resnet20_v1", "args": {}}, (3, 32, 32)),
    "resnet18_v1b": ({"source": "zoo", "name": "resnet18_v1b", "args": {}}, (3, 64, 64)),
}
# per network: (batch per device, batches per epoch) of a benchmark's epoch
SIZES = {"cnn": (64, 60), "cifar_resnet20_v1": (64, 8), "resnet18_v1b": (32, 4)}
QUICK_SIZE = (8, 3)
CLASSES = 10
# the scripts' tool names: gluonkit-bench's contestant
TOOLS = {"floor": "floor", "gluon": "gluon", "gluonkit": "gluonkit", "fit": "fit", "estimator": "estimator",
         "module": "module-ndarrayiter", "module-loader": "module"}


def bench_config(config):
    """The gluonkit-bench config of a script's ``config``."""
    spec, shape = NETWORKS[config["net"]]
    devices, accumulate = config.get("devices", 1), config.get("accumulate", 1)
    return {"tool": TOOLS[config.get("tool", "gluonkit")], "net": spec, "input_shapes": [list(shape)],
            "label_shape": [], "classes": CLASSES, "loss": "softmax", "dtype": "float32",
            "device": config.get("device", "cpu"), "devices": devices, "kvstore": config.get("kvstore", "device"),
            "batch": config.get("batch", 1) // devices, "accumulate": accumulate,
            "steps": max(1, config.get("steps", 1) // accumulate),
            "hybridize": "static" if config.get("static") else "dynamic", "seed": config["seed"],
            "on_nonfinite": config.get("on_nonfinite", "ignore")}


def build(config):
    """The contestant a script's config describes."""
    return contestants.build(bench_config(config))


def make_net(name, seed):
    """A network of ``NETWORKS``, not yet initialized (built after ``mx.random.seed(seed)``)."""
    import mxnet as mx

    from gluonkit.bench.network import build_network

    mx.random.seed(seed)
    return build_network(NETWORKS[name][0], CLASSES)


def make_data(name, samples, seed):
    """Synthetic images for the network ``name`` (normal noise) and random labels, as NumPy arrays."""
    (images,), labels = contestants.make_data(bench_config({"net": name, "seed": seed}), samples)
    return images, labels
