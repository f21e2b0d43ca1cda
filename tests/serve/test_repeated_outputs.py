"""Networks whose outputs share a name in MXNet's graph (one tensor returned twice, one layer
applied to several inputs): model.onnx has every output model.json declares, named so, each
the network's own, in onnxruntime as in MXNet; an ONNX file whose outputs would not be the
metadata's is refused before anything is written."""
import json
import os
import subprocess

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from serve_env import serve_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

#: Run in the serving environment: the outputs of ``model.onnx`` on the inputs of ``case.npz``
#: (one array per graph input, by name), from onnxruntime itself (``runtime.npz``, in the
#: graph's order) and from ``gluonkit.serve`` (``serve.npz``, in the metadata's order); print
#: the graph's output names.
RUN = """
import json
import sys
import numpy as np
import onnxruntime
import gluonkit.serve
folder = sys.argv[1]
case = np.load(folder + "/case.npz")
runtime = onnxruntime.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
feed = {value.name: case[value.name] for value in runtime.get_inputs()}
np.savez(folder + "/runtime.npz", *runtime.run(None, feed))
model = gluonkit.serve.load(folder + "/model.onnx")
np.savez(folder + "/serve.npz", *model.run(*(feed[spec["name"]] for spec in model.inputs)))
print(json.dumps([value.name for value in runtime.get_outputs()]))
"""


class Twice(gluon.HybridBlock):
    """Returns one tensor twice: both outputs are the node ``..._dense0_fwd``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(3)

    def hybrid_forward(self, F, x):
        y = self.dense(x)
        return y, y


class Shared(gluon.HybridBlock):
    """One embedding applied to the anchor, the positive and the negative: three nodes, each
    named as the layer (``..._dense0_fwd``)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = gluon.nn.Dense(3)

    def hybrid_forward(self, F, anchor, positive, negative):
        return self.embed(anchor), self.embed(positive), self.embed(negative)


class Hidden(gluon.HybridBlock):
    """The first call of a shared layer inside the graph, the second an output: the converter
    named the output after the first call (its values were the anchor's)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = gluon.nn.Dense(3)

    def hybrid_forward(self, F, anchor, positive):
        return F.relu(self.embed(anchor)), self.embed(positive)


def _net(cls, inputs, hybridize):
    mx.random.seed(5)
    net = cls()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    rng = np.random.RandomState(0)
    case = {f"data{i}" if inputs > 1 else "data": rng.uniform(-1, 1, (4, 6)).astype(np.float32)
            for i in range(inputs)}
    expected = [o.asnumpy() for o in net(*(mx.nd.array(x) for x in case.values()))]
    return net, case, expected


def _onnx_outputs(python, folder, case):
    """(graph output names, onnxruntime's outputs, gluonkit.serve's outputs) of the export."""
    np.savez(folder / "case.npz", **case)
    done = subprocess.run([python, "-c", RUN, str(folder)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                              os.path.dirname(gluonkit.__file__))))
    assert done.returncode == 0, done.stderr[-2000:]
    arrays = [np.load(folder / f"{kind}.npz") for kind in ("runtime", "serve")]
    return (json.loads(done.stdout.strip().splitlines()[-1]),
            *([got[f"arr_{i}"] for i in range(len(got.files))] for got in arrays))


CASES = [(Twice, 1, {"first": list("abc"), "second": list("abc")}),
         (Shared, 3, None),
         (Hidden, 2, {"anchor": None, "positive": list("xyz")})]


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("cls, inputs, outputs", CASES, ids=[c[0].__name__ for c in CASES])
def test_every_output_is_its_own_in_onnxruntime_and_in_mxnet(serve_python, tmp_path, cls, inputs,
                                                              outputs, hybridize):
    net, case, expected = _net(cls, inputs, hybridize)
    prefix = tmp_path / "model"
    shapes = [(6,)] * inputs if inputs > 1 else (6,)
    metadata = gluonkit.export_model(net, str(prefix), shapes, outputs=outputs, onnx=True)
    declared = [spec["name"] for spec in metadata["outputs"]]
    assert len(declared) == len(expected)
    if cls is not Twice:        # the outputs differ, so another call's values would be caught
        assert not np.allclose(expected[0], expected[1], atol=1e-3)
    names, runtime, served = _onnx_outputs(serve_python, tmp_path, case)
    assert names == declared
    for got in (runtime, served):
        assert len(got) == len(expected)
        for out, want in zip(got, expected):
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    model = gluonkit.load_model(str(prefix))
    got = model.net(*(mx.nd.array(x) for x in case.values()))
    assert len(got) == len(expected)
    for out, want in zip(got, expected):
        np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-6)
    if outputs is None:
        return
    samples = [tuple(x[i] for x in case.values()) if inputs > 1 else case["data"][i]
               for i in range(4)]
    results = gluonkit.predict(str(prefix), samples, top_k=3)
    for name, spec in zip(declared, metadata["outputs"]):
        if spec["classes"] is None:
            continue
        scores = expected[declared.index(name)]
        probabilities = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
        for i, result in enumerate(results):
            top = result["outputs"][name]
            assert [t["class"] for t in top] == [spec["classes"][k] for k in np.argsort(-scores[i])]
            np.testing.assert_allclose([t["probability"] for t in top],
                                       np.sort(probabilities[i])[::-1], rtol=1e-5)
