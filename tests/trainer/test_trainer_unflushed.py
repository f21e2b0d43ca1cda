"""A loop of one's own that forgets trainer.flush() is told so, where it can be known."""
import subprocess
import sys
import textwrap

import pytest

from conftest import CLONE_ENV

LOOP = textwrap.dedent("""
    import sys
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluonkit

    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=3)
    loss_fn = gluon.loss.L2Loss()
    for epoch in range(2):
        for _ in range(4):                              # 4 batches: a window of 3, then 1 pending
            x = mx.nd.ones((2, 4))
            with autograd.record():
                loss = loss_fn(net(x), mx.nd.zeros((2, 3)))
            loss.backward()
            trainer.step(2)
        if sys.argv[1] == "flush":
            trainer.flush()
    if sys.argv[1] == "checkpoint":
        gluonkit.Checkpoint(sys.argv[2]).save(net, trainer, epoch=2)
    print("done")
""")


@pytest.mark.parametrize("ending", ["forgot", "flush", "checkpoint"])
def test_a_window_never_applied_is_reported_at_exit(tmp_path, ending):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    result = subprocess.run([sys.executable, str(script), ending, str(tmp_path / "ckpt")], env=CLONE_ENV,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warned = "never applied: call trainer.flush() at the end of each epoch" in result.stderr
    assert warned == (ending == "forgot"), result.stderr
    if warned:   # the second epoch's last batch: the first one's was taken into a window of 3
        assert "Trainer ended with 2 micro-batch(es)" in result.stderr
