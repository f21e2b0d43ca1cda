"""fit's per-epoch ``time`` and ``samples_per_sec`` cover the devices' work, not only the host's."""
import time

import mxnet as mx
from mxnet import gluon, nd

import gluonkit


def _heavy_net():
    """Dense layers whose forward and backward take the CPU far longer than queueing them."""
    net = gluon.nn.HybridSequential()
    for _ in range(4):
        net.add(gluon.nn.Dense(1536))
    net.add(gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier(magnitude=0.5))
    net(nd.zeros((1, 1536)))
    return net


def test_the_epoch_time_covers_the_device_work():
    net = _heavy_net()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1e-4})
    data = [(nd.random.uniform(shape=(1536, 1536)), nd.zeros((1536,)))]   # one batch per epoch
    mx.nd.waitall()
    tic = time.perf_counter()
    history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, data, epochs=1,
                           progress=False)
    mx.nd.waitall()
    wall = time.perf_counter() - tic
    # One batch: before the clock waited for the devices, samples/s divided by the time the
    # host took to queue forward, backward and update (a few percent of the wall time here).
    assert history["time"][0] > 0.7 * wall, (history["time"][0], wall)
    assert history["samples_per_sec"][0] < 1536 / (0.7 * wall), (history["samples_per_sec"], wall)
