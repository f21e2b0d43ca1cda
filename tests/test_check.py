"""The import-time version check names the installed version and the pip command that fixes it."""
import sys

import mxnet
import numpy
import pytest

from gluonkit._check import check_versions


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
