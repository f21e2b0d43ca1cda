"""Shared fixtures (context lists, hybridization, a fixed seed) and helpers.

Test modules import the helpers with ``from conftest import params_of``.
"""
import os
import random
import shutil
import signal
import subprocess

import mxnet as mx
import numpy as np
import pytest

from gluonkit.callbacks import Callback
from gluonkit.params import select

#: The clone's root (where the ``benchmarks`` and ``recipes`` folders are).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The environment of a process started in another directory: the clone first on the path.
CLONE_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))

ONE_CPU = [mx.cpu(0)]
TWO_CPUS = [mx.cpu(0), mx.cpu(1)]


class StopAt(Callback):
    """Ctrl-C (SIGINT) after batch ``batch`` of epoch ``epoch`` (0-based): fit stops after that
    step and ``ModelCheckpoint`` saves, as when a user interrupts a run."""

    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, state):
        if (state.epoch, state.batch) == self.at:
            os.kill(os.getpid(), signal.SIGINT)


def params_of(net):
    """Every parameter's value (its first context's copy) as NumPy, by structural name."""
    return {name: p.data(p.list_ctx()[0]).asnumpy() for name, p in select(net).items()}


def mobilenet_backbone_file(path):
    """Save at ``path`` a GluonCV mobilenet0.25 for the detect recipe's ``--pretrained-file``,
    He-initialized: its features depend on the image, as an ImageNet backbone's do (after a
    few steps from MXNet's default initialization they hardly do); returns ``path``."""
    from gluoncv.model_zoo import get_mobilenet

    base = get_mobilenet(0.25)
    base.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    base(mx.nd.zeros((1, 3, 32, 32)))
    base.save_parameters(str(path))
    return path


@pytest.fixture(params=[1, 2], ids=["1ctx", "2ctx"])
def ctx_list(request):
    """One and two CPU contexts (several devices are simulated as cpu(0), cpu(1))."""
    return [mx.cpu(i) for i in range(request.param)]


@pytest.fixture(params=[False, True], ids=["imperative", "hybrid"])
def hybridize(request):
    """Whether the network under test is hybridized."""
    return request.param


@pytest.fixture(autouse=True)
def seed():
    """Seed Python, NumPy and MXNet so every test is reproducible."""
    random.seed(0)
    np.random.seed(0)
    mx.random.seed(0)
    return 0


_RECIPE_TESTS = os.path.join(ROOT, "tests", "recipes")


@pytest.fixture(autouse=True)
def recipe_tests_run_in_tmp_path(request):
    """Recipe tests run with their ``tmp_path`` as the working directory: a recipe's default
    ``--out`` (``runs/classify``, ...) is then empty, whatever ``make run`` or an earlier
    test left in the checkout."""
    if os.path.commonpath([str(request.path), _RECIPE_TESTS]) == _RECIPE_TESTS:
        request.getfixturevalue("monkeypatch").chdir(request.getfixturevalue("tmp_path"))


_REQUIRE_UTS = "GLUONKIT_REQUIRE_NAMESPACE_TESTS"
OTHER_MACHINE = "other-machine"


def on_another_machine(argv):
    """``argv`` as a command that runs on a machine named :data:`OTHER_MACHINE`: a private UTS
    namespace (util-linux's ``unshare``, as root or in a user namespace) with that host name,
    the files and processes shared. Skips the test where that is not possible, unless
    ``GLUONKIT_REQUIRE_NAMESPACE_TESTS=1`` (as in CI) makes it fail."""
    unshare = shutil.which("unshare")
    command = [unshare, "--uts"] + ([] if os.geteuid() == 0 else ["--map-root-user"]) + \
        ["sh", "-c", f'hostname {OTHER_MACHINE} && exec "$@"', "sh"]
    if unshare is None or subprocess.run(command + ["true"], capture_output=True).returncode:
        message = ("cannot start a process under another host name here (needs util-linux's "
                   "unshare, and root or unprivileged user namespaces)")
        if os.environ.get(_REQUIRE_UTS) == "1":
            pytest.fail(f"{message}; {_REQUIRE_UTS}=1 forbids skipping.")
        pytest.skip(message)
    return command + list(argv)
