"""The error of a data file that cannot be used (defined in :mod:`gluonkit.errors`, which
the ONNX runtime imports without MXNet)."""
from ..errors import DataFileError

__all__ = ["DataFileError"]
