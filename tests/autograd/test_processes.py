"""custom_op across processes: an exported model served elsewhere, a script that exits."""
import importlib
import json
import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
from mxnet import autograd as mx_autograd
from mxnet import nd
from numpy.testing import assert_allclose

import gluonkit


WAVE_MODULE = textwrap.dedent("""
    from mxnet import nd
    from gluonkit.autograd import custom_op


    @custom_op
    def wave(x, *, freq=1.0):
        return nd.sin(x * freq) + x


    @wave.backward
    def _(dy, x, *, freq=1.0):
        return dy * (nd.cos(x * freq) * freq + 1)
""")

SERVING = textwrap.dedent("""
    import sys
    import numpy as np
    import mxnet as mx
    from gluonkit.autograd import custom_op

    # a serving process with operators of its own, defined before the model's module
    @custom_op
    def other(x):
        return x * 2

    @other.backward
    def _(dy, x):
        return dy * 2

    @custom_op
    def another(x, *, k=1):
        return x + k

    @another.backward
    def _(dy, x, *, k=1):
        return dy

    other(mx.nd.ones(2)).wait_to_read()
    import wave_ops  # noqa: F401  (registers the model's operator)

    out = sys.argv[1]
    net = mx.gluon.SymbolBlock.imports(out + "/model-symbol.json", ["data"],
                                       out + "/model-0000.params")
    x = mx.nd.array(np.load(out + "/x.npy"))
    x.attach_grad()
    with mx.autograd.record():
        y = net(x)
    y.backward()
    np.save(out + "/y.npy", y.asnumpy())
    np.save(out + "/dx.npy", x.grad.asnumpy())
""")


def test_exported_custom_op_loads_in_a_process_that_defined_other_ops_first(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "wave_ops.py").write_text(WAVE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wave_ops", raising=False)
    wave_ops = importlib.import_module("wave_ops")
    try:
        net = _WaveNet(wave_ops.wave)
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize()
        x = nd.random.uniform(-1, 1, shape=(4, 3))
        x.attach_grad()
        with mx_autograd.record():
            y = net(x)
        y.backward()
        net.export(str(tmp_path / "model"))
        assert '"gluonkit.wave_ops.wave"' in (tmp_path / "model-symbol.json").read_text()
        np.save(tmp_path / "x.npy", x.asnumpy())
        (tmp_path / "serve.py").write_text(SERVING)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(tmp_path), os.path.dirname(os.path.dirname(gluonkit.__file__))]))
        result = subprocess.run([sys.executable, str(tmp_path / "serve.py"), str(tmp_path)],
                                env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        assert_allclose(np.load(tmp_path / "y.npy"), y.asnumpy(), rtol=1e-6, atol=1e-7)
        assert_allclose(np.load(tmp_path / "dx.npy"), x.grad.asnumpy(), rtol=1e-6, atol=1e-7)
    finally:
        del sys.modules["wave_ops"]


class _WaveNet(mx.gluon.nn.HybridBlock):
    def __init__(self, wave, **kwargs):
        super().__init__(**kwargs)
        self._wave = wave
        with self.name_scope():
            self.dense = mx.gluon.nn.Dense(5)

    def hybrid_forward(self, F, x):
        return self._wave(self.dense(x), freq=2.0)


UNREAD_OUTPUT = textwrap.dedent("""
    import mxnet as mx
    from mxnet import nd
    from gluonkit.autograd import custom_op

    @custom_op
    def scaled_sin(x, *, scale=1.0):
        return nd.sin(x) * scale

    @scaled_sin.backward
    def _(dy, x, *, scale=1.0):
        return dy * nd.cos(x) * scale

    x = nd.ones((2, 3))
    with mx.autograd.record():
        y = scaled_sin(x, scale=2.5)          # never read: still pending at exit
    with open("done.txt", "w") as f:
        f.write("reached the end")
""")


def test_a_script_that_never_reads_a_custom_op_output_exits(tmp_path):
    # MXNet's exit hook stops the custom-operator threads before it waits for the engine's
    # pending work, so this script hung at exit; gluonkit waits for that work first.
    (tmp_path / "unread.py").write_text(UNREAD_OUTPUT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(gluonkit.__file__)))
    result = subprocess.run([sys.executable, "unread.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "done.txt").read_text() == "reached the end"


INVERSE_SCRIPT = textwrap.dedent("""
    import json
    import mxnet as mx
    from mxnet import nd
    from gluonkit.autograd import custom_op

    @custom_op
    def inv(a):
        return nd.linalg.inverse(a)

    @inv.backward
    def _(dy, a):
        b = nd.linalg.inverse(a)
        return -nd.linalg.gemm2(nd.linalg.gemm2(b, dy, transpose_a=True), b, transpose_b=True)

    a = nd.array([[2.0, 1.0], [0.5, 3.0]])
    a.attach_grad()
    with mx.autograd.record():
        b = inv(a)
    b.backward()
    print(json.dumps([b.asnumpy().tolist(), a.grad.asnumpy().tolist()]))
    mx.nd.waitall()

    class Inverse(mx.gluon.HybridBlock):
        def hybrid_forward(self, F, x):
            return inv(x)

    net = Inverse()
    net.hybridize(static_alloc=True)
    print(json.dumps(net(a).asnumpy().tolist()))
    mx.nd.waitall()
    print("waited")
""")


def test_an_inverse_leaves_no_error_for_waitall_or_the_exit_hook(tmp_path):
    # the output shapes were found by running inv on a zero matrix, asynchronously: its
    # failure ("non-convertible") surfaced at the next waitall and again at exit
    (tmp_path / "inverse.py").write_text(INVERSE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(gluonkit.__file__)))
    result = subprocess.run([sys.executable, "inverse.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "non-convertible" not in result.stderr and "Exception" not in result.stderr, \
        result.stderr[-3000:]
    lines = result.stdout.splitlines()
    b, grad = (np.array(v) for v in json.loads(lines[0]))
    ref = np.linalg.inv(np.array([[2.0, 1.0], [0.5, 3.0]]))
    assert_allclose(b, ref, rtol=1e-6)
    assert_allclose(grad, -(ref.T @ np.ones((2, 2)) @ ref.T), rtol=1e-5)
    assert_allclose(np.array(json.loads(lines[1])), ref, rtol=1e-6)   # hybridized
    assert lines[2] == "waited"
