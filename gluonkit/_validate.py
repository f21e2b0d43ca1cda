"""Argument checks shared by the whole package: one message style, NumPy scalars welcome.

Every check returns the value converted to a plain Python type (so ``np.int64(3)`` becomes
``3``) or raises an exception whose message names the argument, the value received and
what is expected. Booleans are never accepted as numbers.

Example::

    >>> positive_int(np.int64(3), "accumulate", "micro-batches per update")
    3
    >>> positive_int(0, "accumulate")
    Traceback (most recent call last):
    ValueError: accumulate must be a positive integer, got 0.
"""
import math
import numbers

__all__ = ["is_int", "positive_int", "non_negative_int", "finite_real", "choice"]


def is_int(value):
    """Whether ``value`` is an integer (Python or NumPy), and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _what(name, meaning):
    return f"{name} ({meaning})" if meaning else name


def positive_int(value, name, meaning=None):
    """``value`` as an int >= 1, else ``ValueError``."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{_what(name, meaning)} must be a positive integer, got {value!r}.")
    return int(value)


def non_negative_int(value, name, meaning=None):
    """``value`` as an int >= 0, else ``ValueError``."""
    if not is_int(value) or value < 0:
        raise ValueError(f"{_what(name, meaning)} must be an integer >= 0, got {value!r}.")
    return int(value)


def finite_real(value, name, meaning=None, *, minimum=None):
    """``value`` as a finite float (``>= minimum`` if given), else ``ValueError``."""
    bad = (isinstance(value, bool) or not isinstance(value, numbers.Real)
           or not math.isfinite(value) or (minimum is not None and value < minimum))
    if bad:
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{_what(name, meaning)} must be a finite number{bound}, got {value!r}.")
    return float(value)


def choice(value, choices, name):
    """``value`` if it is one of ``choices``, else ``ValueError`` listing them."""
    if isinstance(value, (list, dict, set)) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}.")
    return value
