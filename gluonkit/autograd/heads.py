"""Backward over one or several heads, given as an NDArray, a list or a dict of named heads.

:func:`backward` is ``mx.autograd.backward`` with every head gradient checked against its
head (shape, dtype; another context is copied), gradients given for a head listed twice
summed, and a head outside the recorded graph named in the error.
"""
import mxnet as mx
import numpy as np

__all__ = ["backward"]


def _flatten_heads(heads, head_grads):
    """Labels, heads and head gradients (None where omitted) as three aligned lists."""
    if isinstance(heads, mx.nd.NDArray):
        if head_grads is not None and not isinstance(head_grads, mx.nd.NDArray):
            raise TypeError(f"heads is a single NDArray, so head_grads must be an NDArray or "
                            f"None, got {type(head_grads).__name__}.")
        return ["heads"], [heads], [head_grads]
    if isinstance(heads, dict):
        labels = [f"heads[{name!r}]" for name in heads]
        if head_grads is None:
            head_grads = {}
        if not isinstance(head_grads, dict):
            raise TypeError(f"heads is a dict, so head_grads must be a dict with some of its "
                            f"keys {list(heads)} (or None), got {type(head_grads).__name__}.")
        unknown = [name for name in head_grads if name not in heads]
        if unknown:
            raise KeyError(f"head_grads has key(s) {unknown} that name no head; the heads are "
                           f"{list(heads)}.")
        return labels, list(heads.values()), [head_grads.get(name) for name in heads]
    if isinstance(heads, (list, tuple)):
        labels = [f"heads[{i}]" for i in range(len(heads))]
        if head_grads is None:
            head_grads = [None] * len(heads)
        if not isinstance(head_grads, (list, tuple)):
            raise TypeError(f"heads is a {type(heads).__name__}, so head_grads must be a list "
                            f"or tuple of the same length (or None), got "
                            f"{type(head_grads).__name__}.")
        if len(head_grads) != len(heads):
            raise ValueError(f"{len(heads)} heads but {len(head_grads)} head_grads; pass one "
                             "gradient per head, None for ones.")
        return labels, list(heads), list(head_grads)
    raise TypeError(f"heads must be an NDArray, a list/tuple or a dict of NDArrays, got "
                    f"{type(heads).__name__}.")


def _checked_grad(label, head, grad):
    """``grad`` for ``head``: None stays None (ones); otherwise checked, moved to its context."""
    if not isinstance(head, mx.nd.NDArray):
        raise TypeError(f"{label} must be an NDArray, got {type(head).__name__}.")
    if grad is None:
        return None
    if not isinstance(grad, mx.nd.NDArray):
        raise TypeError(f"head_grads for {label} must be an NDArray or None, got "
                        f"{type(grad).__name__}; wrap it with mx.nd.array(...).")
    if grad.shape != head.shape:
        raise ValueError(f"head_grads for {label} has shape {grad.shape} but the head has shape "
                         f"{head.shape}; pass a gradient of the head's shape, or None for ones.")
    if grad.dtype != head.dtype:
        raise TypeError(f"head_grads for {label} has dtype {np.dtype(grad.dtype).name} but the "
                        f"head has dtype {np.dtype(head.dtype).name}; cast it with "
                        f".astype('{np.dtype(head.dtype).name}').")
    if grad.context != head.context:
        grad = grad.as_in_context(head.context)
    return grad


def _merge_repeated(heads, grads):
    """Each distinct head once, with the sum of the gradients given for it (None = ones).

    MXNet keeps only one of the gradients of a head listed twice; here they add up, as for
    two heads that are equal copies.
    """
    merged = {}
    for head, grad in zip(heads, grads):
        merged.setdefault(head.handle.value, (head, []))[1].append(grad)
    unique_heads, summed = [], []
    with mx.autograd.pause():
        for head, given in merged.values():
            unique_heads.append(head)
            if len(given) == 1:
                summed.append(given[0])
            else:
                summed.append(mx.nd.add_n(*(mx.nd.ones_like(head) if g is None else g
                                            for g in given)))
    return unique_heads, summed


def backward(heads, head_grads=None, retain_graph=False, train_mode=True):
    """Compute the gradients of one or several heads, with their head gradients checked.

    Parameters
    ----------
    heads : NDArray, list/tuple of NDArray or dict of str to NDArray
        The recorded outputs to differentiate.
    head_grads : NDArray, list/tuple or dict, optional
        The gradients with respect to the heads, in the structure of ``heads``. None, a None
        entry or a key missing from the dict means ones, as for a loss. Each must have the
        shape and dtype of its head; one on another context is copied to the head's context.
    retain_graph : bool, default False
        Keep the recorded graph for another backward.
    train_mode : bool, default True
        Whether to run the backward in training mode.

    Example::

        >>> with mx.autograd.record():
        ...     out = {"score": net(x), "aux": aux_net(x)}
        >>> backward(out, {"score": g})      # "aux" gets ones
    """
    labels, head_list, grad_list = _flatten_heads(heads, head_grads)
    if not head_list:
        raise ValueError("heads is empty; pass at least one recorded NDArray.")
    grads = [_checked_grad(label, head, grad)
             for label, head, grad in zip(labels, head_list, grad_list)]
    for flag, name in ((retain_graph, "retain_graph"), (train_mode, "train_mode")):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {flag!r}.")
    unique_heads, grads = _merge_repeated(head_list, grads)
    try:
        mx.autograd.backward(unique_heads, None if all(g is None for g in grads) else grads,
                             retain_graph=bool(retain_graph), train_mode=bool(train_mode))
    except mx.base.MXNetError as err:
        if "not in a computational graph" not in str(err):
            raise
        missing = [label for label, head in zip(labels, head_list) if not _in_graph(head)]
        if len(missing) == 1:
            which = f"{missing[0]} is"
        elif missing:
            which = f"{', '.join(missing)} are"
        else:  # no head can be blamed alone
            which = f"{labels[0]} is" if len(labels) == 1 else f"one of {', '.join(labels)} is"
        raise RuntimeError(f"{which} not in a recorded graph: compute the heads inside "
                           "`with autograd.record():`, and pass retain_graph=True to every "
                           "backward but the last through the same graph.") from None


def _in_graph(head):
    """Whether ``head`` is part of a recorded graph (building its symbol fails otherwise)."""
    try:
        mx.autograd.get_symbol(head)
    except mx.base.MXNetError:
        return False
    return True

