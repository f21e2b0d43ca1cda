"""Argument checks shared by gluonkit and its recipes: one message style, NumPy scalars welcome.

Every check returns the value converted to a plain Python type (so ``np.int64(3)`` becomes
``3``) or raises an exception whose message names the argument, the value received and
what is expected: ``TypeError`` for a value of the wrong type (booleans are never accepted
as numbers), ``ValueError`` for one out of range.

Example::

    >>> positive_int(np.int64(3), "accumulate", "micro-batches per update")
    3
    >>> positive_int(0, "accumulate")
    Traceback (most recent call last):
    ValueError: accumulate must be a positive integer, got 0.
"""
import argparse
import math
import numbers
import os

__all__ = ["is_int", "positive_int", "non_negative_int", "finite_real", "choice", "context_list",
           "check_count", "argument_type", "process_cpus"]


def is_int(value):
    """Whether ``value`` is an integer (Python or NumPy), and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _what(name, meaning):
    return f"{name} ({meaning})" if meaning else name


def _int(value, name, meaning, least, expected):
    if not is_int(value) or value < least:
        error = ValueError if is_int(value) else TypeError
        raise error(f"{_what(name, meaning)} must be {expected}, got {value!r}.")
    return int(value)


def positive_int(value, name, meaning=None):
    """``value`` as an int >= 1; ``TypeError`` if it is no integer, ``ValueError`` if below 1."""
    return _int(value, name, meaning, 1, "a positive integer")


def non_negative_int(value, name, meaning=None):
    """``value`` as an int >= 0; ``TypeError`` if it is no integer, ``ValueError`` if negative."""
    return _int(value, name, meaning, 0, "an integer >= 0")


def finite_real(value, name, meaning=None, *, minimum=None, above=None, hint=""):
    """``value`` as a finite float (``>= minimum``, ``> above`` if given); ``TypeError`` if it is
    no real number, ``ValueError`` if it is NaN, infinite or out of bounds (``hint`` ends the
    message, e.g. "; use 1.0 for none")."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not real or not math.isfinite(value) or (minimum is not None and value < minimum) \
            or (above is not None and value <= above):
        bound = f" >= {minimum}" if minimum is not None else f" > {above}" if above is not None else ""
        raise (ValueError if real else TypeError)(
            f"{_what(name, meaning)} must be a finite number{bound}, got {value!r}{hint}.")
    return float(value)


def choice(value, choices, name):
    """``value`` if it is one of ``choices``, else ``ValueError`` listing them."""
    if isinstance(value, (list, dict, set)) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}.")
    return value


def context_list(ctx, name="ctx"):
    """``ctx`` (a Context or a non-empty list or tuple of distinct Contexts) as a list.

    ``TypeError`` for anything else (a device given as a string), ``ValueError`` for an
    empty list or one that names a device twice.
    """
    import mxnet as mx   # here, not at the top: the other checks need no mxnet

    contexts = [ctx] if isinstance(ctx, mx.Context) else ctx
    if not isinstance(contexts, (list, tuple)):
        raise TypeError(f"{name} must be a Context or a list of them, got {ctx!r}; pass mx.cpu() or "
                        "mx.gpu(0) (not a string), or a list such as [mx.cpu(0), mx.cpu(1)].")
    if not contexts:
        raise ValueError(f"{name} is empty; pass at least one context, e.g. [mx.cpu()].")
    for context in contexts:
        if not isinstance(context, mx.Context):
            raise TypeError(f"{name} must hold mx.Context objects, got {ctx!r}; pass mx.cpu() or mx.gpu(0) "
                            "objects, one per device (use mx.cpu(i) or mx.gpu(i), not strings).")
    if len(set(contexts)) != len(contexts):
        raise ValueError(f"{name} names a context twice: {list(contexts)}; list each device once.")
    return list(contexts)


def check_count(count, name="batch_size"):
    """A count as a plain number (an int when given an integer), or a one-element NDArray as a
    float64 copy of it (not read: no wait).

    ``TypeError`` for anything that is no real number (a bool, a string, None), ``ValueError``
    for a negative, NaN or infinite one, each naming ``name`` and the value.
    """
    import mxnet as mx   # here, not at the top: the other checks need no mxnet

    if isinstance(count, mx.nd.NDArray):
        if count.size != 1:
            raise ValueError(f"{name} given as an NDArray must hold one element (the count of "
                             f"samples, positives, tokens or pixels), got shape {count.shape}; sum "
                             "it first, e.g. step(num_pos.sum()).")
        return count.reshape((1,)).astype("float64")
    meaning = ("the number of samples, positives, tokens or pixels the loss was normalized by, a sum "
               "of weights, or a one-element NDArray of it")
    if is_int(count) and count >= 0:
        return int(count)   # integers keep exact arithmetic
    return finite_real(count, name, meaning, minimum=0)


def argument_type(check, convert=int, expected="an integer"):
    """An argparse ``type``: the text converted (``convert``), then ``check(value, 'the
    value')``; a failed conversion is argparse's error ``expected EXPECTED, got 'TEXT'``."""
    def parse(text):
        try:
            return check(convert(text), "the value")
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err) if "must be" in str(err)
                                             else f"expected {expected}, got {text!r}") from None
    parse.__name__ = getattr(check, "__name__", "value")
    return parse


def process_cpus():
    """The number of CPUs this process may run on: its affinity (a container's or ``taskset``'s
    limit) where the system reports one, else the machine's count; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                   # no affinity on this platform (macOS, Windows)
        return os.cpu_count() or 1
