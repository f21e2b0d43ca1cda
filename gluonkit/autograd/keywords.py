"""The keyword values of a custom operator as one string, and back with their Python types.

MXNet hands every attribute of a ``Custom`` node to the operator as a string (``'2.5'``,
``'[1, 2]'``, ``'None'``). :func:`encode_keywords` writes a call's keywords as one JSON
string in which tuples are tagged, so that :func:`decode_keywords` gives back int, float,
bool, None, str, lists and tuples exactly as they were passed.

Example::

    >>> text = encode_keywords({"scale": 2, "size": (3, 3), "mode": None})
    >>> decode_keywords(text)
    {'mode': None, 'scale': 2, 'size': (3, 3)}
"""
import json

import numpy as np

__all__ = ["encode_keywords", "decode_keywords"]

_SCALARS = (bool, int, float, str)
# NumPy scalars, as MXNet's own operators take them; they arrive as the Python value they hold
_NUMPY_SCALARS = (np.bool_, np.integer, np.floating, np.str_)
_TUPLE_TAG = "tuple"


def _encode(value, where):
    """``value`` as a JSON-ready structure where tuples are tagged objects."""
    if isinstance(value, _NUMPY_SCALARS):
        value = value.item()
    if value is None or type(value) in _SCALARS:
        return value
    if type(value) is list:
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) is tuple:
        return {_TUPLE_TAG: [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    raise TypeError(f"{where} is {value!r} of type {type(value).__name__}, which cannot be "
                    "serialized; pass int, float, bool, str, None (or a NumPy scalar) or a "
                    "list/tuple of them.")


def _decode(value):
    """Inverse of :func:`_encode`."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return tuple(_decode(v) for v in value[_TUPLE_TAG])
    return value


def encode_keywords(kwargs):
    """``kwargs`` (name -> value) as one JSON string, the same for equal keywords.

    NumPy scalars (``np.float32(2.0)``, ``np.int64(3)``) are written as the Python value they
    hold. Raises ``TypeError`` naming the keyword (and the position inside a list or tuple)
    whose value is not int, float, bool, str, None, a NumPy scalar or a list/tuple of them.
    """
    return json.dumps({k: _encode(v, f"keyword {k!r}") for k, v in kwargs.items()},
                      sort_keys=True)


def decode_keywords(text):
    """The keywords that :func:`encode_keywords` wrote as ``text``, with their Python types."""
    return {k: _decode(v) for k, v in json.loads(text).items()}

