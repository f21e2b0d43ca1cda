"""The commands start once, from any folder, with MXNet's thread settings set before it loads."""
import os
import shutil
import subprocess
import sys

import pytest

from gluonkit.commands import running_command, thread_settings, usable_cpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
COMMANDS = ["classify", "multitask", "detect", "predict"]
# a command prints this when it sees MXNet being imported (run_watched)
WATCH = """
import os, runpy, sys
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "mxnet":
            print("mxnet imported with", os.environ.get("OMP_NUM_THREADS"),
                  os.environ.get("OMP_WAIT_POLICY"), flush=True)
sys.meta_path.insert(0, Watch())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    return {**env, **extra}


def folder_with_a_clone(tmp_path):
    """A folder holding a clone of gluonkit named ``gluonkit``, as ``git clone URL gluonkit``
    leaves it (its top-level ``recipes/`` beside the package)."""
    clone = tmp_path / "gluonkit"
    shutil.copytree(os.path.join(ROOT, "recipes"), clone / "recipes")
    shutil.copy(os.path.join(ROOT, "setup.cfg"), clone / "setup.cfg")
    return tmp_path


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_runs_from_the_folder_that_holds_a_clone_named_gluonkit(tmp_path, name):
    where = folder_with_a_clone(tmp_path)
    done = subprocess.run([os.path.join(BIN, f"gluonkit-{name}"), "--help"], cwd=str(where),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: gluonkit-{name}")


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_imports_mxnet_once_with_the_thread_settings_already_set(tmp_path, name):
    """The console script itself, run with a watch on imports: MXNet is imported once, after
    the command set one thread per usable CPU and passive waiting."""
    script = os.path.join(BIN, f"gluonkit-{name}")
    done = subprocess.run([sys.executable, "-c", WATCH, script, "--help"], cwd=str(tmp_path),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    imports = [line for line in done.stdout.splitlines() if line.startswith("mxnet imported")]
    assert imports == [f"mxnet imported with {usable_cpus()} PASSIVE"]


def test_the_users_thread_settings_are_kept(tmp_path):
    script = os.path.join(BIN, "gluonkit-classify")
    done = subprocess.run([sys.executable, "-c", WATCH, script, "--help"], cwd=str(tmp_path),
                          env=clean_env(OMP_NUM_THREADS="3", OMP_WAIT_POLICY="ACTIVE"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mxnet imported with 3 ACTIVE" in done.stdout.splitlines()


@pytest.mark.parametrize("module", ["gluonkit.recipes.classify", "gluonkit.recipes.predict"])
def test_python_m_starts_once(tmp_path, module):
    """``python -m`` loads MXNet once: the profile of imports lists it once."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=str(tmp_path),
                          env=clean_env(PYTHONPROFILEIMPORTTIME="1"), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    mxnet_imports = [line for line in done.stderr.splitlines() if line.rstrip().endswith("| mxnet")
                     or line.rstrip().split("|")[-1].strip() == "mxnet"]
    assert len(mxnet_imports) == 1, mxnet_imports


def test_a_program_that_imports_gluonkit_is_no_command():
    assert running_command() is None                   # pytest imports it
    assert thread_settings() == {"OMP_NUM_THREADS": str(usable_cpus()), "OMP_WAIT_POLICY": "PASSIVE"}


def test_ranks_share_the_cpus_of_their_machine(monkeypatch):
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    cpus = len(os.sched_getaffinity(0))
    assert usable_cpus() == max(1, cpus // 2)
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "x")
    assert usable_cpus() == cpus
