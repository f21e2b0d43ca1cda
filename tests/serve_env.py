"""The serving environment of the tests of ``gluonkit.serve``: a virtual environment of its
own with onnxruntime, numpy 2 and Pillow, and no mxnet, built once and reused (under
~/.cache/gluonkit, or ``GLUONKIT_SERVE_ENV``).

Test modules import it with ``from serve_env import serve_python, run_serve``. Where it cannot be built (no network) the tests that need it skip,
unless ``GLUONKIT_REQUIRE_SERVE_TESTS=1`` (CI) makes them fail."""
import fcntl
import hashlib
import os
import subprocess
import sys

import pytest

from conftest import ROOT

#: What the serving environment holds: what ``gluonkit[serve]`` needs, numpy 2 to prove it.
REQUIREMENTS = ["onnxruntime>=1.16", "numpy>=2", "pillow"]
REQUIRE = "GLUONKIT_REQUIRE_SERVE_TESTS"


def _folder():
    key = hashlib.sha256(" ".join(REQUIREMENTS + [sys.version]).encode()).hexdigest()[:12]
    default = os.path.join(os.path.expanduser("~"), ".cache", "gluonkit", f"serve-env-{key}")
    return os.environ.get("GLUONKIT_SERVE_ENV", default)


def _build(folder):
    """Build the environment in ``folder`` (once: a lock keeps parallel runs apart)."""
    python = os.path.join(folder, "bin", "python")
    ready = os.path.join(folder, ".ready")
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(ready):
            subprocess.run([sys.executable, "-m", "venv", "--clear", folder], check=True,
                           capture_output=True, timeout=300)
            subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            *REQUIREMENTS], check=True, capture_output=True, timeout=900)
            open(ready, "w").close()
    return python


@pytest.fixture(scope="session")
def serve_python():
    """The serving environment's Python."""
    try:
        return _build(_folder())
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
session = onnxruntime.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
outputs = session.run(None, {session.get_inputs()[0].name: case["input"]})
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
