"""The simulated hosts the ssh launcher tests run on (made once per test module)."""
import os
import subprocess

import pytest

from simulated_hosts import SimulatedHosts, missing

REQUIRE = "GLUONKIT_REQUIRE_SSH_TESTS"


def _cannot(reason):
    message = (f"the ssh launcher tests cannot simulate two hosts here: {reason}. Run them as root with "
               f"openssh-server, iproute2 and rsync installed, as .ci/run does (it also sets {REQUIRE}=1).")
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{message} {REQUIRE}=1 forbids skipping them.")
    pytest.skip(message)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Two hosts (network namespaces with their own sshd); skipped with the reason where impossible."""
    reason = missing()
    if reason:
        _cannot(reason)
    try:
        made = SimulatedHosts(tmp_path_factory.mktemp("hosts"))
    except (subprocess.CalledProcessError, RuntimeError, OSError) as err:
        detail = getattr(err, "stderr", None) or err
        _cannot(f"making them failed ({str(detail).strip()})")
    yield made
    made.close()
