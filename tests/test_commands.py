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


def test_python_m_and_a_script_beside_a_clone_named_gluonkit_import_the_package(tmp_path):
    # `make` installs the checkout on sys.path (editable_mode=compat): a clone folder named
    # gluonkit in the working folder is not taken for an empty namespace package of that name
    where = folder_with_a_clone(tmp_path)
    done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.classify", "--help"], cwd=str(where),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: gluonkit-classify")
    (where / "train.py").write_text("import gluonkit\nprint(gluonkit.Trainer.__module__)\n")
    done = subprocess.run([sys.executable, "train.py"], cwd=str(where), env=clean_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gluonkit.trainer.trainer"


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


@pytest.mark.parametrize("orig_argv, script, expected", [
    (["python", "-m", "gluonkit.recipes.classify", "--epochs", "1"], "-m", "python -m gluonkit.recipes.classify"),
    (["python", "-u", "-X", "importtime", "-m", "gluonkit.recipes.detect"], "-m", "python -m gluonkit.recipes.detect"),
    (["python", "-um", "gluonkit.recipes.predict"], "-m", "python -m gluonkit.recipes.predict"),
    (["python", "-mgluonkit.recipes.multitask"], "-m", "python -m gluonkit.recipes.multitask"),
    (["python", "envcheck.py", "-m", "gluonkit.mytool"], "envcheck.py", None),   # the script's own options
    (["python", "-c", "code", "-m", "gluonkit.recipes.classify"], "-c", None),
    (["python", "-m", "mytool.recipes.classify"], "-m", None),
    (["python", "gluonkit-myexperiment.py"], "gluonkit-myexperiment.py", None),   # not one of the commands
    (["python", "/venv/bin/gluonkit-classify"], "/venv/bin/gluonkit-classify", "gluonkit-classify"),
    (["python", "myproj/recipes/classify.py"], "myproj/recipes/classify.py", None),  # not a clone of gluonkit
])
def test_only_gluonkits_own_commands_count_as_commands(monkeypatch, orig_argv, script, expected):
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", [script])
    assert running_command() == expected


def test_a_clones_recipe_wrappers_are_commands(tmp_path, monkeypatch):
    where = folder_with_a_clone(tmp_path) / "gluonkit"
    (where / "gluonkit" / "recipes").mkdir(parents=True)
    (where / "gluonkit" / "recipes" / "classify.py").write_text("")
    script = str(where / "recipes" / "classify.py")
    monkeypatch.setattr(sys, "orig_argv", ["python", script])
    monkeypatch.setattr(sys, "argv", [script])
    assert running_command() == os.path.join("python recipes", "classify.py")


def test_a_program_of_ones_own_keeps_its_environment(tmp_path):
    """A script that imports the recipes, with gluonkit-like words among its own options."""
    (tmp_path / "envcheck.py").write_text(
        "import os, gluonkit.recipes.classify\n"
        "print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('OMP_WAIT_POLICY'))\n")
    done = subprocess.run([sys.executable, "envcheck.py", "-m", "gluonkit.mytool"], cwd=str(tmp_path),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None"]


def test_ranks_share_the_cpus_of_their_machine(monkeypatch):
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    cpus = len(os.sched_getaffinity(0))
    assert usable_cpus() == max(1, cpus // 2)
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "x")
    assert usable_cpus() == cpus
