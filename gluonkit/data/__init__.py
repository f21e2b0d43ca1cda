"""Datasets: the embedded UCI handwritten digits."""
from .digits import digits

__all__ = ["digits"]
