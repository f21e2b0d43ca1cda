"""fit's per-epoch ``time`` and ``samples_per_sec`` cover the devices' work, not only the host's.

The devices' work is simulated by a clock that only moves on when fit waits for the devices
(``mx.nd.waitall``): the epoch's time includes that wait exactly when fit waits before it
reads the clock.
"""
import time

import mxnet as mx
import numpy as np
from mxnet import gluon, nd

import gluonkit

DEVICE_SECONDS = 1000.0   # what the devices still had queued when the host finished the epoch


class DeviceClock:
    """A perf_counter that moves on 1 ms per read, and by DEVICE_SECONDS at every wait."""

    def __init__(self):
        self.now = 0.0
        self.waits = 0

    def perf_counter(self):
        self.now += 0.001
        return self.now

    def waitall(self, real_waitall):
        real_waitall()
        self.waits += 1
        self.now += DEVICE_SECONDS


def test_the_epoch_time_and_rate_include_waiting_for_the_devices(monkeypatch):
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    data = [(nd.array(np.ones((8, 4))), nd.zeros((8,)))] * 2
    clock, real_waitall = DeviceClock(), mx.nd.waitall
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(mx.nd, "waitall", lambda: clock.waitall(real_waitall))
    history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, data, epochs=1,
                           progress=False)
    assert clock.waits >= 1
    assert history["time"][0] >= DEVICE_SECONDS
    assert history["samples_per_sec"][0] <= 16 / DEVICE_SECONDS
