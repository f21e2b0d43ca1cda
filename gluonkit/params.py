"""Reach into one part of a network: select, freeze, scale, average, load and list parameters.

Every function addresses parameters by their structural names, the names
``Block.save_parameters`` writes (``features.0.weight``, ``output.bias``), and takes an
optional regular expression that is searched in those names. The names themselves come
from :mod:`gluonkit.names`; :func:`select` and :func:`first_names` are public here too.

Example::

    freeze(net.features)                          # the backbone stops learning
    set_lr_mult(net, 10.0, pattern=r'^output\\.')  # the new head learns 10x faster
    load_into(net.features, 'pretrained.params')  # backbone weights from a whole network's file
    print(summary(net))
"""
import numbers
import os
import weakref

import mxnet as mx
import numpy as np

from .validate import context_list, finite_real
from .names import brief_names, first_names, select, shape_fits

__all__ = ["select", "freeze", "unfreeze", "set_lr_mult", "set_wd_mult", "average_grads",
           "load_into", "summary", "first_names"]

_NDARRAY_FILE_MAGIC = (0x112).to_bytes(8, "little")  # the header mx.nd.save writes


# grad_req of each parameter before freeze() set it to 'null', for unfreeze() to restore.
_FROZEN = weakref.WeakKeyDictionary()


def freeze(block, pattern=None):
    """Stop the selected parameters from learning (``grad_req='null'``).

    The previous ``grad_req`` (``'write'``, or ``'add'`` with an accumulating Trainer) is
    remembered for :func:`unfreeze`. Parameters that are already ``'null'``, such as
    BatchNorm's running statistics, are left alone. Note that in training mode BatchNorm
    still normalizes with the batch's statistics and updates its running ones: call
    ``gluonkit.nn.freeze_batchnorm(block)`` to keep them fixed too, with exact input
    gradients (not ``autograd.predict_mode()``: in MXNet 1.9.1 a BatchNorm's input gradient
    computed in prediction mode is wrong).

    Returns
    -------
    list of str
        The names whose ``grad_req`` changed, relative to ``block`` as ``select(block)``
        gives them (``freeze(net.features)`` -> ``['0.weight', ...]``; ``freeze(net,
        r'^features\\.')`` -> ``['features.0.weight', ...]``).

    Example::

        >>> freeze(net, r'^0\\.')
        ['0.weight', '0.bias']
    """
    changed = []
    for name, param in select(block, pattern).items():
        if param.grad_req != "null":
            _FROZEN[param] = param.grad_req
            param.grad_req = "null"
            changed.append(name)
    return changed


def unfreeze(block, pattern=None):
    """Let the selected parameters learn again, with the ``grad_req`` they had before freezing.

    If the parameter's Trainer accumulates gradients (``gluonkit.Trainer(accumulate=k)``
    with k > 1) it gets ``'add'``, as the Trainer needs. Parameters that :func:`freeze` did
    not freeze are left as they are. The gradient buffers start at zero.

    Returns
    -------
    list of str
        The names whose ``grad_req`` changed.

    Example::

        >>> unfreeze(net)
        ['0.weight', '0.bias']
    """
    changed = []
    for name, param in select(block, pattern).items():
        previous = _FROZEN.pop(param, None)
        if previous is not None and param.grad_req == "null":
            # Gluon links a parameter to its Trainer only through this private attribute.
            accumulating = getattr(param._trainer, "accumulate", 1) > 1
            param.grad_req = "add" if accumulating else previous
            changed.append(name)
    return changed


def _set_mult(block, attr, mult, pattern):
    """Set ``attr`` (``'lr_mult'`` or ``'wd_mult'``) of the selected parameters to ``mult``."""
    if isinstance(mult, bool) or not isinstance(mult, numbers.Real):
        raise TypeError(f"{attr} must be a number, got {mult!r}.")
    mult = finite_real(mult, attr, minimum=0)
    chosen = select(block, pattern)
    for param in chosen.values():
        setattr(param, attr, mult)
    return list(chosen)


def set_lr_mult(block, mult, pattern=None):
    """Set the learning-rate multiplier of the selected parameters.

    An optimizer applies ``learning_rate * lr_mult`` to each parameter; the change takes
    effect at the next ``Trainer.step``, also for a Trainer created before.

    Returns
    -------
    list of str
        The names set.

    Example::

        >>> set_lr_mult(net, 10.0, r'^1\\.')
        ['1.weight', '1.bias']
    """
    return _set_mult(block, "lr_mult", mult, pattern)


def set_wd_mult(block, mult, pattern=None):
    """Set the weight-decay multiplier of the selected parameters (e.g. 0 for biases).

    Returns
    -------
    list of str
        The names set.

    Example::

        >>> set_wd_mult(net, 0.0, r'bias$')
        ['0.bias', '1.bias']
    """
    return _set_mult(block, "wd_mult", mult, pattern)


def average_grads(block, pattern=None):
    """Replace each selected parameter's gradient on every context by the mean over contexts.

    For training without a kvstore (``Trainer(..., kvstore=None)``) or for inspecting
    gradients. Parameters with ``grad_req='null'``, not yet initialized, or on one context
    are left as they are.

    Returns
    -------
    list of str
        The names averaged (a shared parameter once).

    Example::

        >>> average_grads(net)    # after backward on cpu(0) and cpu(1)
        ['0.weight', '0.bias', '1.weight', '1.bias']
    """
    averaged = []
    for name, param in first_names(select(block, pattern)).items():
        if param.grad_req == "null" or _state(param) != "yes" or len(param.list_ctx()) < 2:
            continue
        grads = param.list_grad()
        home = grads[0].context
        mean = mx.nd.add_n(*(g.as_in_context(home) for g in grads)) / len(grads)
        for grad in grads:
            mean.copyto(grad)
        averaged.append(name)
    return averaged


def _load_file(filename):
    """The dict of arrays in an MXNet parameter file, with clear errors for anything else."""
    path = os.fspath(filename)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path!r} is a directory; pass the parameter file in it, "
                                "written by block.save_parameters(filename).")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"parameter file {path!r} does not exist; check the path, or write "
                                "the file with block.save_parameters(filename).")
    not_params = ValueError(f"{path!r} is not an MXNet parameter file; write one with "
                            "block.save_parameters(filename).")
    with open(path, "rb") as f:
        if f.read(8) != _NDARRAY_FILE_MAGIC:
            raise not_params
    try:
        saved = mx.nd.load(path)
    except mx.base.MXNetError:
        raise not_params from None
    if not isinstance(saved, dict) or not saved:
        raise ValueError(f"{path!r} holds no named arrays; write parameter files with "
                         "block.save_parameters(filename).")
    return saved


def _prefixes(params, saved):
    """For each prefix under which some of ``params`` appear in ``saved``: (fitting, present).

    ``present`` counts the parameters found under the prefix, ``fitting`` those whose shape
    also fits.
    """
    found = {}
    for key in saved:
        parts = key.split(".")
        for i in range(len(parts)):
            name = ".".join(parts[i:])
            if name in params:
                found.setdefault(".".join(parts[:i] + [""]) if i else "", set()).add(name)
    return {prefix: (sum(shape_fits(params[n].shape, saved[prefix + n].shape) for n in names),
                     len(names))
            for prefix, names in found.items()}


def _sub_block_prefixes(params):
    """The structural prefix of every sub-block that holds some of ``params`` (``'nested.'``)."""
    prefixes = set()
    for name in params:
        parts = name.split(".")
        prefixes.update(".".join(parts[:i]) + "." for i in range(1, len(parts)))
    return prefixes


def _within(params, sub):
    """The parameters of the sub-block at prefix ``sub``, under the sub-block's own names."""
    return {n[len(sub):]: p for n, p in params.items() if n.startswith(sub)}


def _placements(params, saved):
    """Every way ``saved`` maps onto ``params``, scored: (file prefix, sub-block) -> (fitting,
    present).

    A file saved by a network that contains the block stores a block's ``name`` as
    ``file_prefix + name`` (sub-block ``''``); a file saved by a sub-block of the block stores
    the names the block holds under ``sub_block`` (file prefix ``''``).
    """
    scores = {(prefix, ""): score for prefix, score in _prefixes(params, saved).items()}
    for sub in _sub_block_prefixes(params):
        inner = _within(params, sub)
        names = [k for k in saved if k in inner]
        if names:
            scores[("", sub)] = (sum(shape_fits(inner[k].shape, saved[k].shape) for k in names),
                                 len(names))
    return scores


def _expression(sub):
    """``block.nested.trunk[0]``: Python that reaches the sub-block at prefix ``sub``."""
    return "block" + "".join(f"[{part}]" if part.isdigit() else f".{part}"
                             for part in sub.rstrip(".").split("."))


def _choose_placement(params, saved, path):
    """The one (file prefix, sub-block) under which most of ``params`` fit (then: are present)."""
    ranked = _placements(params, saved)
    if not ranked:
        raise ValueError(f"none of the block's parameter names ({brief_names(params)}) appears "
                         f"in {path!r}, which holds {brief_names(saved)}.")
    best = max(ranked.values())
    tied = sorted(p for p, score in ranked.items() if score == best)
    if len(tied) == 1:
        return tied[0]
    subs = [sub for _, sub in tied if sub]
    if not subs:
        prefixes = [prefix for prefix, _ in tied]
        raise ValueError(f"the block's parameters fit equally well under the prefixes "
                         f"{brief_names(prefixes)} of {path!r}; choose one with "
                         f"load_into(..., prefix={prefixes[0]!r}).")
    places = [_expression(sub) if sub else "the block itself" if not prefix
              else f"prefix={prefix!r}" for prefix, sub in tied]
    raise ValueError(f"{path!r} fits {', '.join(places)} equally well; load it into the "
                     f"sub-block that saved it, e.g. load_into({_expression(subs[0])}, "
                     f"{path!r}).")


def _plan(params, saved, prefix, ctx, strict, path, target="the block"):
    """The (parameter, array) pairs to load; raises on any problem before anything is copied."""
    plan, missing, seen = [], [], set()
    for name, param in params.items():
        key = prefix + name
        if key not in saved:
            missing.append(name)
            continue
        if param in seen:
            continue
        seen.add(param)
        array = saved[key]
        if not shape_fits(param.shape, array.shape):
            raise ValueError(f"parameter {name!r} has shape {param.shape} but {path!r} stores "
                             f"{key!r} with shape {array.shape}; load a file saved by a network "
                             "that contains this block, or name the sub-block with prefix=.")
        want, have = np.dtype(param.dtype).name, np.dtype(array.dtype).name
        if want != have:
            raise ValueError(f"parameter {name!r} is {want} but {path!r} stores {key!r} as "
                             f"{have}; cast the block first, e.g. block.cast({have!r}).")
        if ctx is not None and _state(param) != "no" and set(param.list_ctx()) != set(ctx):
            raise ValueError(f"parameter {name!r} lives on {param.list_ctx()} but ctx={ctx}; "
                             "pass ctx=None to load onto its contexts, or call "
                             "block.reset_ctx(ctx) first.")
        plan.append((param, array))
    # a shared parameter saved under only one of its names is not missing
    missing = [n for n in missing if params[n] not in seen]
    extra = [k for k in saved if k.startswith(prefix) and k[len(prefix):] not in params]
    if strict and (missing or extra):
        raise ValueError(f"loading {path!r} into {target} with prefix {prefix!r}: "
                         + (f"missing in the file: {brief_names(missing)}. " if missing else "")
                         + (f"in the file but not in the block: {brief_names(extra)}. "
                            if extra else "")
                         + "Pass strict=False to load the parameters that match.")
    if not plan:
        raise ValueError(f"no parameter of the block is stored in {path!r} under prefix "
                         f"{prefix!r}; the file holds {brief_names(saved)}.")
    return plan


def load_into(block, filename, ctx=None, strict=True, prefix=None):
    """Load ``block``'s parameters from a file saved by it or by any network that contains it.

    The prefix under which the block's parameters are stored is found from the file: ``''``
    for the block's own file, ``'features.'`` for ``net.features`` in ``net``'s file (at any
    depth), or the prefix of a block with the same relative names and shapes in another
    network's file. A file saved by a sub-block of ``block`` (``net.nested.save_parameters``,
    then ``load_into(net, ...)``) is loaded into that sub-block; a file that fits several
    places equally well (twin sub-blocks) is refused, naming them. Everything is checked
    before anything is copied: on any error the block's parameters are unchanged.

    Parameters
    ----------
    block : Block
    filename : str or path
        A file written by ``save_parameters``.
    ctx : Context or list of Context, optional
        Where to initialize parameters that are not yet; initialized ones keep their contexts.
    strict : bool, default True
        Raise ``ValueError`` if a block parameter is missing from the file, or the file
        holds names under the prefix that the block does not have.
    prefix : str, optional
        The prefix to use, e.g. ``'backbone.'``; needed when several sub-blocks of the file
        fit equally well.

    Returns
    -------
    str
        The prefix used, ``''`` or ending with ``'.'``: the file's names are the block's under
        it; for a sub-block's file, the sub-block's prefix in ``block`` (``'nested.'``).

    Example::

        >>> net.save_parameters('whole.params')
        >>> load_into(net.features, 'whole.params')
        'features.'
    """
    params = select(block)
    if not params:
        raise ValueError(f"block {block.name!r} has no parameters to load.")
    if not isinstance(filename, (str, os.PathLike)):
        raise TypeError(f"filename must be a path (str or os.PathLike), got {filename!r}.")
    ctx = None if ctx is None else context_list(ctx)
    if not isinstance(strict, (bool, np.bool_)):
        raise TypeError(f"strict must be True or False, got {strict!r}.")
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str such as 'backbone.', got {prefix!r}.")
    path = os.fspath(filename)
    saved = _load_file(path)
    sub = ""
    if prefix is None:
        prefix, sub = _choose_placement(params, saved, path)
    elif prefix and not prefix.endswith("."):
        prefix += "."
    plan = _plan(_within(params, sub), saved, prefix, ctx, strict, path,
                 _expression(sub) if sub else "the block")
    block.collect_params().load_dict({param.name: array for param, array in plan}, ctx=ctx,
                                     allow_missing=True, filename=path)
    return sub or prefix


def _state(param):
    """'yes' if initialized, 'deferred' if waiting for its shape, else 'no'."""
    # Gluon has no public query for this: its own methods read these private fields.
    if param._data is not None:
        return "yes"
    return "deferred" if param._deferred_init else "no"


def _size(shape):
    """The number of values in ``shape``, or None while a dimension is unknown."""
    if shape is None or 0 in shape:
        return None
    return int(np.prod(shape, dtype=np.int64))


def _shape_text(shape):
    """``(16, ?, 3, 3)``: the shape with unknown dimensions as ``?``."""
    if shape is None:
        return "?"
    dims = [str(d) if d else "?" for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def summary(block):
    """A table of the block's parameters: name, shape, size, grad_req, lr_mult, wd_mult,
    initialized.

    Unknown dimensions of deferred parameters show as ``?``, with their size unknown. The
    totals count a shared parameter once and split trainable (``grad_req != 'null'``) from
    frozen and non-trainable values.

    Example::

        >>> print(summary(net))     # the two-layer net of select's example
        name      shape   size  grad_req  lr_mult  wd_mult  initialized
        0.weight  (4, 3)    12  write           1        1  yes
        ...
        total: 26 values in 4 parameters (26 trainable, 0 not trainable)
    """
    rows, counted = [], {}
    for name, param in select(block).items():
        size = _size(param.shape)
        rows.append((name, _shape_text(param.shape), "?" if size is None else f"{size:,}",
                     param.grad_req, f"{param.lr_mult:g}", f"{param.wd_mult:g}", _state(param)))
        counted.setdefault(param, size)
    header = ("name", "shape", "size", "grad_req", "lr_mult", "wd_mult", "initialized")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    right = (False, False, True, False, True, True, False)
    lines = ["  ".join(cell.rjust(w) if r else cell.ljust(w)
                       for cell, w, r in zip(row, widths, right)).rstrip()
             for row in [header] + rows]
    known = {p: s for p, s in counted.items() if s is not None}
    trainable = sum(s for p, s in known.items() if p.grad_req != "null")
    total = sum(known.values())
    unknown = len(counted) - len(known)
    lines.append(f"total: {total:,} values in {len(counted)} parameters ({trainable:,} trainable, "
                 f"{total - trainable:,} not trainable)"
                 + (f"; {unknown} of unknown size" if unknown else ""))
    return "\n".join(lines)
