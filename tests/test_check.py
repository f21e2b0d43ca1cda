"""The import-time version check names the installed version and the pip command that fixes it."""
import os
import subprocess
import sys

import mxnet
import numpy
import pytest

import gluonkit
from gluonkit.versions import check_versions


def test_supported_versions_pass():
    check_versions()


@pytest.mark.parametrize("version", ["1.24.0", "2.0.1", "1.15.4"])
def test_wrong_numpy_names_version_and_fix(monkeypatch, version):
    monkeypatch.setattr(numpy, "__version__", version)
    with pytest.raises(ImportError, match=rf"numpy {version} is installed.*pip install \"mxnet==1.9.1\" \"numpy>=1.16,<1.24\""):
        check_versions()


@pytest.mark.parametrize("version", ["2.0.0", "1.8.0.post0"])
def test_wrong_mxnet_names_version_and_fix(monkeypatch, version):
    monkeypatch.setattr(mxnet, "__version__", version)
    with pytest.raises(ImportError, match=rf"mxnet {version} is installed.*pip install \"mxnet==1.9.1\""):
        check_versions()


def test_missing_mxnet_gives_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "mxnet", None)
    with pytest.raises(ImportError, match=r"not importable.*pip install \"mxnet==1.9.1\""):
        check_versions()


NUMPY_124 = '__version__ = "1.24.0"\n'


def _with_numpy_124(tmp_path):
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text(NUMPY_124)
    root = os.path.dirname(os.path.dirname(os.path.abspath(gluonkit.__file__)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), root]))


CLONE_WRAPPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "recipes", "detect.py")


@pytest.mark.parametrize("command, name", [
    (["-m", "gluonkit.recipes.classify"], "python -m gluonkit.recipes.classify"),
    (["-m", "gluonkit.recipes.multitask", "--help"], "python -m gluonkit.recipes.multitask"),
    ([CLONE_WRAPPER], os.path.join("python recipes", "detect.py"))])
def test_a_command_prints_the_version_check_as_one_line(tmp_path, command, name):
    result = subprocess.run([sys.executable, *command], cwd=tmp_path, env=_with_numpy_124(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"{name}: gluonkit needs numpy>=1.16,<1.24 (mxnet 1.9.1 uses aliases "
        "removed in numpy 1.24), but numpy 1.24.0 is installed. Fix: pip install "
        "\"mxnet==1.9.1\" \"numpy>=1.16,<1.24\"   (GPU: \"mxnet-cu112==1.9.1\" instead of \"mxnet\")"]


def test_a_program_that_uses_gluonkit_gets_the_import_error(tmp_path):
    result = subprocess.run([sys.executable, "-c", "from gluonkit import Trainer"], cwd=tmp_path,
                            env=_with_numpy_124(tmp_path), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "ImportError: gluonkit needs numpy>=1.16,<1.24")
