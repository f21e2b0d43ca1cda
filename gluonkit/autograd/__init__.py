"""Backward over named heads with checked head gradients; custom operators with keywords.

``backward`` is ``mx.autograd.backward`` for heads given as an NDArray, a list or a dict,
with every head gradient checked against its head. ``custom_op`` turns a forward function
written with NDArray operators into an operator with a hand-written backward that runs
imperatively under ``autograd.record()``, inside hybridized blocks, and after ``export``.

Modules
-------
heads
    :func:`backward`: head flattening, head-gradient checks, heads listed twice.
keywords
    The keyword values of a custom operator encoded as one string and decoded with their
    Python types (MXNet passes every operator attribute as a string).
custom
    :func:`custom_op` and :class:`CustomOperator`: registration under a stable name, shape
    and dtype inference, and the kernel MXNet runs.
"""
from .custom import CustomOperator, custom_op
from .heads import backward

__all__ = ["backward", "custom_op", "CustomOperator"]
