"""The recipes are examples users copy: they import only public gluonkit names, and a copy
taken out of the package runs as the command does."""
import ast
import os
import shutil
import subprocess
import sys

import pytest

import gluonkit.recipes
from gluonkit.recipes import classify

#: Every module of the recipes: the commands and the steps they share.
RECIPE_FILES = sorted(name for name in os.listdir(os.path.dirname(gluonkit.recipes.__file__))
                      if name.endswith(".py"))


def imported_names(path):
    """(module, name) of every import in a file; module '.' marks a relative import."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                yield module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None


@pytest.mark.parametrize("name", RECIPE_FILES)
def test_a_recipe_imports_only_public_gluonkit_names(name):
    found = list(imported_names(os.path.join(os.path.dirname(gluonkit.recipes.__file__), name)))
    relative = [module for module, _ in found if module.startswith(".")]
    private = [f"{module}.{item}" if item else module for module, item in found
               if module.startswith("gluonkit")
               and any(part.startswith("_") for part in module.split(".") + [item or ""])]
    assert not relative and not private, (relative, private)


def test_a_copy_of_the_classify_recipe_runs_outside_the_package(tmp_path):
    copy = tmp_path / "my_classify.py"
    shutil.copy(classify.__file__, copy)
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run([sys.executable, str(copy), "--limit", "64", "--epochs", "1", "--out",
                           str(tmp_path / "run"), "--no-progress"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "test accuracy: " in done.stdout
    assert (tmp_path / "run" / "model-symbol.json").is_file()
