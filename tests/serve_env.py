"""The serving environment of the tests of ``gluonkit.serve`` (:mod:`benchmarks.serving_env`:
onnxruntime, numpy 2, Pillow and OpenCV, no mxnet; built once and reused).

Test modules import it with ``from serve_env import serve_python, run_serve``. Where it cannot
be built (no network) the tests that need it skip, unless ``GLUONKIT_REQUIRE_SERVE_TESTS=1``
(CI) makes them fail."""
import json
import os
import subprocess

import pytest

from benchmarks.serving_env import serving_python
from conftest import ROOT

REQUIRE = "GLUONKIT_REQUIRE_SERVE_TESTS"


@pytest.fixture(scope="module")   # the environment itself is built once and reused
def serve_python():
    """The serving environment's Python."""
    try:
        return serving_python()
    except (subprocess.SubprocessError, OSError) as err:
        detail = getattr(err, "stderr", b"") or b""
        message = (f"the serving environment cannot be built ({err}; "
                   f"{detail.decode(errors='replace').strip()[-300:]})")
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{message}; {REQUIRE}=1 forbids skipping.")
        pytest.skip(message)


def run_serve(python, *args, **kwargs):
    """Run ``python -m gluonkit.serve ARGS`` with this clone's gluonkit on the path."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([python, "-m", "gluonkit.serve", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300, **kwargs)


#: Run in the serving environment: compare what onnxruntime gives for ``model.onnx`` on the
#: inputs saved in ``case.npz`` ('input', then the MXNet outputs 'expected0', ...) and write
#: the outputs to ``got.npz``.
RUN_ONNX = """
import sys
import numpy as np
import onnxruntime
folder = sys.argv[1]
case = np.load(folder + "/case.npz")
runtime = onnxruntime.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
outputs = runtime.run(None, {runtime.get_inputs()[0].name: case["input"]})
np.savez(folder + "/got.npz", *outputs)
"""


def run_onnx(python, folder, inputs):
    """The outputs of ``folder/model.onnx`` on ``inputs`` in onnxruntime (a list of arrays)."""
    import numpy as np

    np.savez(os.path.join(folder, "case.npz"), input=inputs)
    result = subprocess.run([python, "-c", RUN_ONNX, str(folder)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    got = np.load(os.path.join(folder, "got.npz"))
    return [got[f"arr_{i}"] for i in range(len(got.files))]


def serve_json(python, model, *args):
    """What ``gluonkit-serve MODEL ARGS --json`` prints, parsed; the command must succeed."""
    result = run_serve(python, model, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
