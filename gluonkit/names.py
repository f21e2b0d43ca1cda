"""Structural parameter names, as ``save_parameters`` writes them, and how lists of them read.

:func:`select` is the one place in gluonkit that names parameters (``features.0.weight``,
``output.bias``); :func:`first_names` names a parameter shared by several blocks once.
:func:`brief_names` is the shared wording of name lists in messages, and :func:`shape_fits`
the shape test of anything that loads saved arrays into parameters by these names.

Example::

    >>> net = nn.HybridSequential()
    >>> net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    >>> list(select(net, r'bias$'))
    ['0.bias', '1.bias']
    >>> brief_names(select(net), limit=2)
    "'0.weight', '0.bias' and 2 more"
"""
import gc
import re

from mxnet import gluon

__all__ = ["select", "first_names", "network_names", "brief_names", "shape_fits"]


def select(block, pattern=None):
    """The parameters of ``block`` by structural name, those matching ``pattern`` if given.

    ``select(block)`` gives every parameter under the name ``save_parameters`` writes for it
    (``trunk.0.weight``); gluonkit names parameters this way everywhere.

    Parameters
    ----------
    block : Block
    pattern : str, optional
        A regular expression searched in each name (``re.search``); None selects all.

    Returns
    -------
    dict of str to Parameter
        In the block's registration order, the order ``save_parameters`` uses. A parameter
        shared between blocks appears under each of its names.

    Example::

        >>> net = nn.HybridSequential()
        >>> net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
        >>> list(select(net, r'weight$'))
        ['0.weight', '1.weight']
    """
    if not isinstance(block, gluon.Block):
        raise TypeError(f"block must be a gluon.Block, got {type(block).__name__}.")
    # Gluon computes the structural names only in this private method (save_parameters and
    # load_parameters use it too); gluonkit reads it here and nowhere else.
    params = block._collect_params_with_prefix()
    if pattern is None:
        return params
    if not isinstance(pattern, (str, re.Pattern)):
        raise TypeError(f"pattern must be a regular expression string, got {pattern!r}.")
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {err}.") from None
    chosen = {name: param for name, param in params.items() if regex.search(name)}
    if not params:
        raise ValueError(f"pattern {pattern!r} matches nothing: the block "
                         f"({type(block).__name__}) has no parameters; pass the block that "
                         "holds the layers you mean.")
    if not chosen:
        raise ValueError(f"pattern {pattern!r} matches none of the {len(params)} parameter names "
                         f"of the block, which are: {brief_names(params)}; pass a regular expression "
                         "that one of them contains (it is searched, not matched in full).")
    return chosen


def first_names(params):
    """``params`` (name -> Parameter) with each parameter once, under its first name.

    A parameter shared by two blocks is collected from both (``select(net)`` lists it under
    each structural name); gluonkit names it by the first.

    Example::

        >>> list(first_names({"a.weight": w, "b.weight": w, "b.bias": b}))
        ['a.weight', 'b.bias']
    """
    firsts = {}
    for name, param in params.items():
        firsts.setdefault(param, name)
    return {name: param for param, name in firsts.items()}


def network_names(params):
    """``{name: Parameter}`` under structural names for a ``block.collect_params()`` result.

    A ``ParameterDict`` keeps Gluon's internal names (``multitask0_dense2_weight``) and not
    the block that collected it; that block is found among the live blocks with the dict's
    prefix that hold all of its parameters (the most direct, if several), and names them as
    :func:`select` does. Returns None if no such block is alive. Searching the live objects takes a fraction of a second:
    call it once (a Trainer does, when built), not per step.

    Example::

        >>> list(network_names(net.collect_params(".*weight")))
        ['0.weight', '1.weight']
    """
    wanted = list(params.values())
    found = []
    for obj in gc.get_objects():
        if issubclass(type(obj), gluon.Block) and obj.prefix == params.prefix:
            names = {param: name for name, param in first_names(select(obj)).items()}
            if all(param in names for param in wanted):
                found.append({names[param]: param for param in wanted})
    # blocks made with prefix='' share it (a wrapper and its views): the one that names the
    # parameters most directly, with the shortest names, is the one that collected them
    return min(found, key=lambda named: sum(map(len, named)), default=None)


def brief_names(names, limit=8):
    """Up to ``limit`` names in their order, quoted and comma-separated, with a count of the rest.

    Example::

        >>> brief_names(['a.weight', 'a.bias', 'b.weight'], limit=2)
        "'a.weight', 'a.bias' and 1 more"
    """
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def shape_fits(shape, saved_shape):
    """Whether a parameter of ``shape`` can take an array of ``saved_shape``.

    ``shape`` may be None or hold 0 for dimensions not known yet (a deferred parameter, a
    fresh ``SymbolBlock``): any size fits there.

    Example::

        >>> shape_fits((16, 0), (16, 3)), shape_fits(None, (4,)), shape_fits((4,), (5,))
        (True, True, False)
    """
    if shape is None:
        return True
    return len(shape) == len(saved_shape) and all(d in (0, s) for d, s in zip(shape, saved_shape))
