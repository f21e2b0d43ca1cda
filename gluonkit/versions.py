"""Check at import that mxnet and numpy are versions gluonkit works with."""
import sys

from gluonkit.commands import running_command

__all__ = ["check_versions", "check_at_import"]

_MXNET = "1.9.1"
_FIX = 'pip install "mxnet=={mx}" "numpy>=1.16,<1.24"   (GPU: "mxnet-cu112=={mx}" instead of "mxnet")'


def _release(version):
    """Return the leading numeric components of a version string as a tuple of ints."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def check_versions():
    """Raise ``ImportError`` with the pip command that fixes an unsupported mxnet or numpy.

    numpy is checked first: mxnet 1.9.1 itself fails to import on numpy >= 1.24.
    """
    fix = _FIX.format(mx=_MXNET)
    import numpy

    if not (1, 16) <= _release(numpy.__version__) < (1, 24):
        raise ImportError(
            f"gluonkit needs numpy>=1.16,<1.24 (mxnet {_MXNET} uses aliases removed in numpy 1.24), "
            f"but numpy {numpy.__version__} is installed. Fix: {fix}")
    try:
        import mxnet
    except ImportError as err:
        raise ImportError(f"gluonkit needs mxnet {_MXNET}, which is not importable ({err}). "
                          f"Fix: {fix}") from err
    if _release(mxnet.__version__)[:2] != (1, 9):
        raise ImportError(f"gluonkit needs mxnet {_MXNET}, but mxnet {mxnet.__version__} is installed. "
                          f"Fix: {fix}")


def check_at_import():
    """:func:`check_versions`; a gluonkit command prints the message as one line and exits 1.

    A program that imports gluonkit gets the ``ImportError`` itself; a command's user gets
    the fix without a traceback through the import machinery.
    """
    try:
        check_versions()
    except ImportError as err:
        command = running_command()
        if command is None:
            raise
        sys.exit(f"{command}: {err}")
