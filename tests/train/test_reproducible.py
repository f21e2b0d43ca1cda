"""A fit run seeded as MXNet users seed it (np.random.seed, mx.random.seed) is the same run in
every process, with any number of data workers, and resumed as never stopped."""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from gluonkit.callbacks import ModelCheckpoint

# One epoch of fit on a network with deferred initialization and dropout, seeded as GluonCV's
# scripts seed (Python's random left to the OS), its first weight saved to argv[1].
RUN = """
import sys
import mxnet as mx
import numpy as np
from mxnet import gluon
import gluonkit

out, mx_seed, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
np.random.seed(0)
mx.random.seed(mx_seed)
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dropout(0.5), gluon.nn.Dense(10))
net.initialize()
trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
data = gluon.data.ArrayDataset(*gluonkit.data.digits()[:400])
train = gluon.data.DataLoader(data, batch_size=32, shuffle=True, num_workers=workers)
gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, train, epochs=2, progress=False)
np.save(out, np.concatenate([p.data().asnumpy().ravel() for p in net.collect_params().values()]))
"""


def _run_in_a_process(tmp_path, name, mx_seed=0, workers=0):
    out = tmp_path / f"{name}.npy"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    done = subprocess.run([sys.executable, "-c", RUN, str(out), str(mx_seed), str(workers)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)


def test_two_processes_seeded_as_mxnet_users_seed_train_the_same_parameters(tmp_path):
    first, second = _run_in_a_process(tmp_path, "first"), _run_in_a_process(tmp_path, "second")
    assert np.array_equal(first, second)
    # MXNet's seed decides the run too: another one initializes and drops out otherwise
    other = _run_in_a_process(tmp_path, "other", mx_seed=1)
    assert np.abs(other - first).max() > 1e-2


def test_data_workers_leave_the_run_as_it_is(tmp_path):
    assert np.array_equal(_run_in_a_process(tmp_path, "none"),
                          _run_in_a_process(tmp_path, "two", workers=2))


def _net_and_trainer():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dropout(0.5), gluon.nn.Dense(10))
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    return net, trainer


def _fit(net, trainer, epochs, callbacks=()):
    data = gluon.data.ArrayDataset(*gluonkit.data.digits()[:200])
    train = gluon.data.DataLoader(data, batch_size=32, shuffle=True)
    gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, train, epochs=epochs,
                 callbacks=callbacks, progress=False)


def _weights(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


def test_a_run_resumed_at_an_epochs_end_reseeds_as_the_run_never_stopped(tmp_path):
    """Dropout in the epochs after the resume draws what the run never stopped drew: the
    reseeds take the number the run drew from MXNet as it began from the checkpoint."""
    np.random.seed(0), mx.random.seed(0)
    never, trainer = _net_and_trainer()
    _fit(never, trainer, epochs=3)

    np.random.seed(0), mx.random.seed(0)
    net, trainer = _net_and_trainer()
    _fit(net, trainer, epochs=1, callbacks=[ModelCheckpoint(str(tmp_path), resume=True)])
    np.random.seed(7), mx.random.seed(7)          # a new process would start elsewhere
    resumed, trainer = _net_and_trainer()
    resumed(mx.nd.zeros((1, 1, 8, 8)))            # shapes, before the checkpoint is loaded
    _fit(resumed, trainer, epochs=3, callbacks=[ModelCheckpoint(str(tmp_path), resume=True)])
    for a, b in zip(_weights(never), _weights(resumed)):
        assert np.array_equal(a, b)


def test_seed_all_seeds_python_numpy_and_mxnet_and_refuses_what_numpy_cannot_take():
    import random

    gluonkit.seed_all(3)
    first = (random.random(), np.random.rand(), mx.nd.random.uniform().asscalar())
    gluonkit.seed_all(3)
    assert (random.random(), np.random.rand(), mx.nd.random.uniform().asscalar()) == first
    with pytest.raises(ValueError, match=r"seed must be an integer from 0 to 2\*\*32 - 1 .* got -1"):
        gluonkit.seed_all(-1)
    with pytest.raises(TypeError, match="got '0'"):
        gluonkit.seed_all("0")
