"""Branches: a trunk with named branches, routes through some of them, deferred-init safety."""
import keyword

from mxnet import symbol
from mxnet.base import MXNetError
from mxnet.gluon import HybridBlock, Parameter
from mxnet.gluon.utils import shape_is_known
from mxnet.ndarray import NDArray

from ..names import brief_names, select
from .views import Views, flatten

__all__ = ["Branches"]


def _tuples(outputs):
    """Outputs with lists made tuples: a hybridized block regroups its outputs as lists."""
    if isinstance(outputs, (list, tuple)):
        return tuple(_tuples(out) for out in outputs)
    return outputs


def _run(trunk, branches, inputs):
    """Trunk on the inputs (if any), then every branch on the trunk's output."""
    features = trunk(*inputs) if trunk is not None else inputs
    if not isinstance(features, (list, tuple)):
        features = (features,)
    return tuple(branch(*features) for branch in branches)


def _infer_shapes(block, in_shapes, what):
    """Shapes of ``block``'s parameters (a dict by name) and outputs for inputs of ``in_shapes``.

    Builds the block's graph on symbols and runs shape inference: nothing is computed. An input
    the graph does not read (a head that reads only some of the trunk's outputs) gets no shape:
    MXNet refuses a shape for a name its graph does not have.
    """
    inputs = [symbol.var(f"data{i}") for i in range(len(in_shapes))]
    graph = symbol.Group(flatten(block(*inputs)))
    read = set(graph.list_arguments())
    try:
        arg_shapes, out_shapes, aux_shapes = graph.infer_shape_partial(
            **{var.name: shape for var, shape in zip(inputs, in_shapes) if var.name in read})
    except MXNetError:
        sized = all(shape_is_known(param.shape) for param in select(block).values())
        if not sized and len({shape[1:] for shape in in_shapes}) > 1:
            raise ValueError(f"cannot infer the shapes of {what}: its inputs of shapes "
                             f"{', '.join(map(str, in_shapes))} cannot all feed its layers (a "
                             "layer applied to several of them takes one input size); give "
                             "them the same shape, or each its own layers.") from None
        raise ValueError(f"cannot infer the shapes of {what} from its input shapes "
                         f"{list(in_shapes)}: the input sizes its layers were given do not fit "
                         "them; give its layers the sizes of the trunk's outputs, or leave their "
                         "input sizes (in_units, in_channels) out to have them inferred.") from None
    shapes = dict(zip(graph.list_arguments(), arg_shapes))
    shapes.update(zip(graph.list_auxiliary_states(), aux_shapes))
    unknown = [name for name, param in select(block).items()
               if not shape_is_known(shapes.get(param.name, param.shape))]
    if unknown or not all(map(shape_is_known, out_shapes)):
        raise ValueError(f"cannot infer the shapes of {what} from its input shapes "
                         f"{list(in_shapes)}: those of {brief_names(unknown) or 'its outputs'} "
                         "stay unknown; give its layers their input sizes (in_units, "
                         "in_channels).")
    return shapes, out_shapes


def _initialized(param):
    """Whether ``param`` was initialized (it may still wait for its shape)."""
    try:
        param.list_ctx()  # raises for a parameter that was never initialized
    except RuntimeError:
        return False
    return True


def _refuse_uninitialized(block, call):
    """Raise the error of ``call`` (how the user called ``block``) made before ``initialize()``
    (or after initializing only some blocks), naming the parameters without a value by
    structural name, and the branches holding them."""
    params = select(block)
    missing = [name for name, param in params.items() if not _initialized(param)]
    if missing:
        parts = ["the trunk" if part == "trunk" else f"branch {part!r}"
                 for part in dict.fromkeys(name.partition(".")[0] for name in missing)]
        where = " and ".join(filter(None, [", ".join(parts[:-1]), parts[-1]]))
        when = ("before initialize()" if len(missing) == len(params)
                else "on a network initialized in part")
        raise RuntimeError(f"{call} was called {when}: parameter"
                           f"{'s' if len(missing) > 1 else ''} {brief_names(missing, limit=2)} "
                           f"(of {where}) {'have' if len(missing) > 1 else 'has'} no value; "
                           "call net.initialize() before the first call.") from None


def _waiting(param):
    """Whether ``param`` waits for its shape: initialized, with dimensions still unknown."""
    return not shape_is_known(param.shape) and _initialized(param)


class _Route(HybridBlock):
    """The trunk and some branches of a :class:`Branches` network, sharing its parameters.

    Its children are the network's own trunk and branch blocks, as attributes of the same
    names, so its parameters save under the same structural names as the network's. A dotted
    name (``'heads.aux'``) reaches into a branch that is itself a :class:`Branches`: that
    child is then the inner network's route through the rest of the names.
    """

    def __init__(self, owner, names):
        super().__init__(prefix=f"{owner.prefix}route_{'_'.join(names).replace('.', '_')}_")
        self._names = names
        self._inner = {}   # branch -> the names within it ([''] for the whole branch)
        for name in names:
            branch, _, inner = name.partition(".")
            self._inner.setdefault(branch, []).append(inner)
        self._complete = owner._complete_deferred_init
        self._waiting = owner._waiting_branches
        self._owner_forward = owner._forward_route
        self._owner_hybrid_forward = owner._hybrid_forward_route
        self.trunk = owner.trunk
        self.params.update(owner.params)   # a subclass's own parameters, passed as its own
        for name, value in vars(owner).items():
            if isinstance(value, Parameter):
                setattr(self, name, value)
        for branch in self._inner:
            setattr(self, branch, self._child(owner, branch))

    def _child(self, owner, branch):
        """The block that computes ``branch``: the branch, or its route through inner names."""
        inner = self._inner[branch]
        return getattr(owner, branch) if inner == [""] else getattr(owner, branch).route(*inner)

    @property
    def _whole(self):
        """The branches this route computes whole (the others it leaves out or enters)."""
        return [branch for branch, inner in self._inner.items() if inner == [""]]

    @property
    def _call(self):
        """How the user calls this route, for messages: ``route('digit', 'aux')``."""
        return f"route({', '.join(map(repr, self._names))})"

    def __repr__(self):
        trunk = "trunk -> " if self.trunk is not None else ""
        return f"Route({trunk}{', '.join(self._names)})"

    def forward(self, x, *args):
        if not isinstance(x, NDArray):
            self._refuse_to_be_traced_with_branches_waiting()
        self._complete_deferred_init((x,) + args)
        return self._owner_forward(self, x, *args)

    def _forward_graph(self, x, *args):
        """This route's own (cached) graph: the network's ``forward`` ends here for a route."""
        try:
            return _tuples(super().forward(x, *args))
        except MXNetError as err:
            if "no inputs in computation graph" not in str(err):
                raise
            raise RuntimeError(
                f"hybridized {self!r} has a graph that reads neither its inputs nor any "
                "parameter (its branches ignore the trunk's output), which MXNet cannot "
                "compile; make a branch read the trunk's output (F.zeros_like(x) rather than "
                "F.zeros(shape)), or call the route without hybridize().") from None
        except RuntimeError:
            _refuse_uninitialized(self, self._call)
            raise

    def _refuse_to_be_traced_with_branches_waiting(self):
        """A graph traced through this route leaves out the other branches: if they still wait
        for their shapes, the graph of the block that traces it cannot give them any, and Gluon
        fails with a bare "shape cannot be inferred" naming an internal parameter name."""
        waiting = list(self._waiting(skip=self._whole))
        if waiting:
            raise RuntimeError(
                f"route{self._names} is traced inside another hybridized block while the "
                f"branches {', '.join(map(repr, waiting))} it leaves out still wait for their "
                "shapes, which that block's graph cannot give them; call the network (or the "
                "route) once on a batch before that block's first call, e.g. net(x), or give "
                "those layers their input sizes (in_units, in_channels).")

    def _complete_deferred_init(self, inputs):
        """Finish the deferred initialization of the trunk and of every branch, those this route
        skips too, from the input arrays (Gluon's own, in a hybridized route, would give a shape
        to every input, which MXNet refuses for an input its graph does not read). A traced
        call (Symbols) cannot, so a block that runs the route in a graph of its own
        (:class:`~gluonkit.nn.ShapeCache`) calls this with the arrays."""
        if isinstance(inputs[0], NDArray):
            self._complete(inputs, call=self._call)

    def hybrid_forward(self, F, x, *args, **params):
        blocks = [getattr(self, branch) for branch in self._inner]
        outputs = self._owner_hybrid_forward(self, blocks, F, (x,) + args, params)
        by_name = {}
        for (branch, inner), out in zip(self._inner.items(), outputs):
            if inner == [""]:
                by_name[branch] = out
            else:
                by_name.update(zip((f"{branch}.{n}" for n in inner),
                                   out if len(inner) > 1 else (out,)))
        outputs = tuple(by_name[name] for name in self._names)
        return outputs[0] if len(outputs) == 1 else outputs


class Branches(HybridBlock):
    """A trunk followed by named branches, each fed the trunk's output.

    Subclass it, build the trunk and add the branches in ``__init__``. Calling the network
    returns every branch's output; :meth:`route` gives a view that computes the trunk and only
    some branches, sharing all parameters, with its own cached graph once hybridized (a
    hybridized block replays the graph traced at its first call, so a Python flag that picks a
    branch would be ignored: pick a route instead).

    After ``initialize()`` the first forward through any route completes the deferred
    initialization of every branch, from the trunk's output shape by symbolic shape inference;
    inactive branches never run on data. So ``save_parameters`` and ``Trainer.step`` work even
    when a branch has not been used yet. A route called inside another hybridized block is
    traced, not run: call the network once on a batch before that block's first call.

    A subclass may override ``hybrid_forward`` (or ``forward``) and call the base one: routes
    run the override too, and take one output per branch they compute from it.

    Parameters
    ----------
    trunk : HybridBlock, optional
        Shared layers run before the branches; without one, branches get the inputs. It can
        also be assigned later as ``self.trunk``. Its parameters save as ``trunk.*``.
    prefix, params :
        As for ``HybridBlock``.

    Example::

        class MultiTask(Branches):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                with self.name_scope():
                    self.trunk = nn.HybridSequential()
                    self.trunk.add(nn.Dense(64, activation='relu'))
                    self.add('digit', nn.Dense(10))
                    self.add('parity', nn.Dense(2))

        net = MultiTask()
        net.initialize()
        net.hybridize()
        digit, parity = net(x)
        digit = net.route('digit')(x)   # parity's parameters are initialized too
    """

    def __init__(self, trunk=None, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self._names = []
        self._routes = Views()
        self._hybrid_args = None
        self._unshaped = None   # the parameters whose shapes were unknown at the last call
        # the route whose call runs through forward, if any (in a list: a Block attribute
        # would make the route a child of this network)
        self._route_called = []
        self._computed = None       # the branch blocks hybrid_forward computes, if not all
        self.trunk = trunk

    def __setattr__(self, name, value):
        if name == "trunk" and value is not None and not isinstance(value, HybridBlock):
            raise TypeError(f"the trunk must be a HybridBlock, got {type(value).__name__}; "
                            "wrap plain layers in a mxnet.gluon.nn.HybridSequential.")
        super().__setattr__(name, value)
        # a trunk or branch replaced later (a new head for fine-tuning) replaces it in the routes
        if name == "trunk" or name in getattr(self, "_names", ()):
            self._unshaped = None
            for route in self._routes:
                if name == "trunk":
                    route.trunk = value
                elif name in route._inner:
                    setattr(route, name, route._child(self, name))

    @property
    def names(self):
        """The branch names, in the order they were added."""
        return tuple(self._names)

    def add(self, name, block):
        """Register ``block`` as the branch ``name``, fed by the trunk's output.

        The branch becomes the attribute ``self.<name>`` and its parameters save as
        ``<name>.*``.

        Example::

            net.add('parity', nn.Dense(2))
        """
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
                or name.startswith("_"):
            raise ValueError(f"branch name {name!r} is not usable: use a Python identifier "
                             "that does not start with '_', such as 'digit' or 'head_1'.")
        if name in self._names:
            raise ValueError(f"a branch named {name!r} already exists (branches: "
                             f"{self.names}); give each branch its own name.")
        if hasattr(self, name):
            raise ValueError(f"branch name {name!r} clashes with the attribute "
                             f"{type(self).__name__}.{name}; choose another name.")
        if not isinstance(block, HybridBlock):
            raise TypeError(f"branch {name!r} must be a HybridBlock, got "
                            f"{type(block).__name__}; wrap plain layers in a "
                            "mxnet.gluon.nn.HybridSequential.")
        setattr(self, name, block)
        self._names.append(name)
        self._unshaped = None

    def route(self, *names):
        """A HybridBlock computing the trunk and only the branches ``names``.

        It shares every parameter with this network and returns the branches' outputs in the
        order given (the output itself for one name). The same names give the same view. A
        dotted name reaches a branch of a branch that is itself a ``Branches``
        (``'heads.aux'``: this trunk, then the inner trunk, then only ``aux``).

        Example::

            with autograd.record():
                loss = loss_fn(net.route('digit')(x), y)
            aux = net.route('heads.aux')(x)       # one head of a nested Branches
        """
        if not names:
            raise ValueError(f"route() needs at least one branch name; the branches are "
                             f"{self.names}.")
        for name in names:
            if not isinstance(name, str):
                fix = (f"write route({', '.join(map(repr, name))})"
                       if isinstance(name, (list, tuple)) else f"the branches are {self.names}")
                raise TypeError(f"route() takes branch names as separate strings, got {name!r}; "
                                f"{fix}.")
        unknown = [name for name in names if name.partition(".")[0] not in self._names]
        if unknown:
            raise KeyError(f"no branch named {unknown[0]!r}; the branches are {self.names}.")
        if len(set(names)) != len(names):
            raise ValueError(f"route{names} names a branch twice; name each branch once.")
        for name in names:
            branch, _, inner = name.partition(".")
            if inner and not isinstance(getattr(self, branch), Branches):
                raise KeyError(f"branch {branch!r} has no branches of its own, so {name!r} names "
                               f"nothing; dotted names reach into a branch that is a Branches.")
            if inner and branch in names:
                raise ValueError(f"route{names} names both {branch!r} and {name!r}; the whole "
                                 f"branch {branch!r} already computes {name!r}.")
            if inner and inner.partition(".")[0] not in getattr(self, branch).names:
                raise KeyError(f"no branch named {name!r}; the branches of {branch!r} are "
                               f"{getattr(self, branch).names}.")
        route = self._routes.get(names)
        if route is None:
            route = _Route(self, names)
            if self._hybrid_args is not None:
                args, kwargs = self._hybrid_args
                route.hybridize(*args, **kwargs)
            self._routes.put(names, route)
        return route

    def hybridize(self, active=True, *args, **kwargs):
        """Hybridize (or not) this network and its routes, those made so far and later ones.

        Takes the arguments of ``HybridBlock.hybridize``.
        """
        super().hybridize(active, *args, **kwargs)
        self._hybrid_args = ((active,) + args, kwargs)
        for route in self._routes:
            route.hybridize(active, *args, **kwargs)

    def _clear_cached_op(self):
        # Gluon drops a block's graph through this private method (hybridize, cast, a child
        # replaced, freeze_batchnorm): the routes' graphs hold the same layers, so they go too
        super()._clear_cached_op()
        for route in getattr(self, "_routes", ()):
            route._clear_cached_op()

    def export(self, path, epoch=0, remove_amp_cast=True):
        """Export the graph of the whole network, every branch, as ``HybridBlock.export``.

        It needs ``hybridize()`` and one call of the network itself: calling a route does not
        trace the whole network.
        """
        try:
            super().export(path, epoch=epoch, remove_amp_cast=remove_amp_cast)
        except MXNetError:
            raise
        except RuntimeError as err:  # Gluon's "no graph yet", made specific to routes
            raise RuntimeError("export() writes the graph of the whole network: call "
                               "net.hybridize() and then net(x) once (a route's call does not "
                               "trace the whole network), then export.") from err

    def forward(self, x, *args):
        """Every branch's outputs; a subclass may override it and call ``super().forward``."""
        if self._route_called:   # a route's call, through a subclass's forward
            return self._route_called.pop()._forward_graph(x, *args)
        try:
            return _tuples(super().forward(x, *args))
        except RuntimeError:
            _refuse_uninitialized(self, f"the {type(self).__name__} network")
            raise

    def hybrid_forward(self, F, x, *args):
        """The trunk, then the branches, on the inputs: every branch's output, or those of the
        route being called. A subclass may override it (to change the inputs, or each output)
        and call ``super().hybrid_forward``, whose outputs it returns one per branch."""
        if not self._names:
            raise RuntimeError(f"{type(self).__name__} has no branch yet: add one with "
                               "add(name, block) before calling it.")
        blocks = self._computed
        if blocks is None:
            blocks = [getattr(self, name) for name in self._names]
        return _run(self.trunk, blocks, (x,) + args)

    def _forward_route(self, route, x, *args):
        """Call ``route`` through this network's ``forward`` (a subclass's override too)."""
        self._route_called[:] = [route]
        try:
            outputs = self.forward(x, *args)
            if self._route_called:
                raise TypeError(f"{type(self).__name__}.forward did not call "
                                "super().forward(...), so its routes cannot run through it; "
                                "call it, or override hybrid_forward instead.")
        finally:
            self._route_called.clear()
        return outputs

    def _hybrid_forward_route(self, route, blocks, F, inputs, params):
        """This network's ``hybrid_forward`` (a subclass's override too) computing only
        ``blocks``, the branches of ``route``: one output each."""
        self._computed = blocks
        try:
            outputs = self.hybrid_forward(F, *inputs, **params)
        finally:
            self._computed = None
        if not isinstance(outputs, (list, tuple)) or len(outputs) != len(blocks):
            raise TypeError(f"{type(self).__name__}.hybrid_forward must return the outputs of "
                            f"super().hybrid_forward, one per branch computed, for {route!r} "
                            f"to work ({len(blocks)} here); transform each output, do not "
                            "regroup them.")
        return outputs

    def _waiting_branches(self, skip=()):
        """{name: parameters waiting for their shapes} of the branches not in ``skip``."""
        pending = {}
        for name in self._names:
            if name not in skip:
                params = [param for param in getattr(self, name).collect_params().values()
                          if _waiting(param)]
                if params:
                    pending[name] = params
        return pending

    def _complete_deferred_init(self, inputs, call=None):
        """Finish the deferred initialization of the trunk and the branches that have not run.

        The parameter shapes come from symbolic shape inference on the input shapes, through
        this network's own ``hybrid_forward`` (a subclass's too): nothing is computed. Once
        every shape is known, a call costs next to nothing (until a trunk or branch is set
        anew). At the first call, a parameter never initialized is named (``call``, how the
        network was called, says which call found it): a route leaves out the branches holding
        it, and ``save_parameters`` would fail on it later.
        """
        if self._unshaped is None:
            _refuse_uninitialized(self, call or f"the {type(self).__name__} network")
            self._unshaped = [param for param in self.collect_params().values()
                              if not shape_is_known(param.shape)]
        self._unshaped = [param for param in self._unshaped if not shape_is_known(param.shape)]
        waiting = [param for param in self._unshaped if _waiting(param)]
        if not waiting:
            return
        in_shapes = [x.shape for x in inputs]
        try:
            shapes = _infer_shapes(self, in_shapes, f"the {type(self).__name__} network")[0]
        except ValueError:
            if type(self).hybrid_forward is Branches.hybrid_forward:   # inputs go to the trunk
                self._locate_unknown_shapes(in_shapes)   # the trunk's or a branch's error
            raise
        _finish(waiting, shapes)

    def _locate_unknown_shapes(self, in_shapes):
        """Raise the shape inference error of the trunk, or else of the first branch whose
        parameter shapes cannot be inferred from it, for inputs of ``in_shapes``."""
        if self.trunk is not None:
            in_shapes = _infer_shapes(self.trunk, in_shapes, "the trunk")[1]
        for name in self._names:
            _infer_shapes(getattr(self, name), in_shapes, f"branch {name!r}")


def _finish(params, shapes):
    """Initialize the deferred ``params`` with their ``shapes`` (a dict by Gluon name)."""
    for param in params:
        param.shape = shapes[param.name]
        # Gluon completes a deferred initialization only in this private method,
        # which its own forward calls; nothing public does it without data.
        param._finish_deferred_init()
