"""Atomic writes on a disk that fills up: a real 64 KiB tmpfs, mounted in a private mount
namespace (so nothing outside the test's process sees it). The error names the file, the
previous file stays whole and no scratch file is left."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import CLONE_ENV

REQUIRE = "GLUONKIT_REQUIRE_MOUNT_TESTS"
FULL = "[Errno 28] No space left on device; free some space there or write elsewhere"


def on_a_full_disk(tmp_path, argv, size="64k"):
    """Run ``argv`` (its first '{disk}' replaced) where ``tmp_path/disk`` is a tmpfs of ``size``."""
    disk = tmp_path / "disk"
    disk.mkdir()
    unshare = shutil.which("unshare")
    namespace = [unshare, "--mount", "--propagation", "private"] + \
        ([] if os.geteuid() == 0 else ["--map-root-user"])
    mount = ["sh", "-c", f'mount -t tmpfs -o size={size} gluonkit-test "$0" && exec "$@"', str(disk)]
    if unshare is None or subprocess.run(namespace + mount + ["true"], capture_output=True).returncode:
        message = (f"cannot mount a small tmpfs in a private mount namespace here (needs util-linux's "
                   f"unshare, and root or unprivileged user namespaces), as .ci/run does with "
                   f"{REQUIRE}=1")
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{message}; {REQUIRE}=1 forbids skipping.")
        pytest.skip(message)
    argv = [str(disk) if arg == "{disk}" else arg for arg in argv]
    return disk, subprocess.run(namespace + mount + argv, capture_output=True, text=True, timeout=300,
                                env=CLONE_ENV)


WRITER = textwrap.dedent("""
    import json, os, sys
    from gluonkit.atomic import atomic_create, atomic_write
    disk, found = sys.argv[1], {}
    atomic_write(disk, "model.params", lambda f: f.write(b"previous"))
    big = lambda f: f.write(b"x" * (1 << 20))
    for name, write in [("write", lambda: atomic_write(disk, "model.params", big)),
                        ("create", lambda: atomic_create(disk, ["a.ckpt"], big))]:
        try:
            write()
        except OSError as err:
            found[name] = [err.errno, str(err)]
    found["files"] = sorted(os.listdir(disk))
    found["kept"] = open(os.path.join(disk, "model.params"), "rb").read().decode()
    print(json.dumps(found))
""")


def test_a_full_disk_names_the_file_and_keeps_the_previous_one(tmp_path):
    disk, done = on_a_full_disk(tmp_path, [sys.executable, "-c", WRITER, "{disk}"])
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["write"] == [28, f"{FULL}: '{disk / 'model.params'}'"]
    assert found["create"] == [28, f"{FULL}: '{disk}'"]          # the name is chosen after writing
    assert found["files"] == ["model.params"] and found["kept"] == "previous"


def test_a_command_on_a_full_disk_prints_one_line_naming_the_path(tmp_path):
    disk, done = on_a_full_disk(tmp_path, [sys.executable, "-m", "gluonkit.recipes.classify", "--limit",
                                           "64", "--epochs", "1", "--no-progress", "--out", "{disk}"],
                                size="24k")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"gluonkit-classify: {FULL}: '{disk / 'checkpoints'}'"
