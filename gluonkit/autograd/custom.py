"""Custom operators: a forward function and a hand-written backward, as one MXNet operator.

:func:`custom_op` builds a :class:`CustomOperator`, which registers an ``mx.operator``
under a stable name (its ``op_type``), finds output shapes and dtypes by running the
forward on zeros (keeping the shapes, dropping errors of the values), and runs forward and backward as a ``CustomOp`` kernel, imperatively
under ``autograd.record()``, inside hybridized blocks, and after ``export``.
"""
import atexit
import functools
import gc
import inspect
import re
import threading
import weakref

import mxnet as mx
import numpy as np

from .keywords import decode_keywords, encode_keywords

__all__ = ["custom_op", "CustomOperator"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_INFER_CACHE_SIZE = 256

# op_type -> weak reference to the operator that holds the name now. MXNet's registration,
# made once per name, looks the operator up here: a definition run again (a reloaded module,
# a notebook cell) takes the name over once the previous one is gone.
_LIVE = {}

# Whether mx.nd.waitall is registered to run at exit (see _wait_at_exit).
_WAITS_AT_EXIT = False


def _where(function):
    """``file:line`` of a function's definition, for messages."""
    code = getattr(function, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else repr(function)


def _live_op(op_type):
    """The operator registered as ``op_type``, which must still exist."""
    ref = _LIVE.get(op_type)
    op = None if ref is None else ref()
    if op is None:
        raise RuntimeError(f"the custom operator {op_type!r} is no longer defined in this "
                           "process; run (or import) the code that defines it before using a "
                           "graph that calls it.")
    return op


def _wait_at_exit():
    """Run every pending operation before MXNet's own exit hook stops the engine.

    MXNet's exit hook (``mxnet.base._notify_shutdown``, registered when mxnet is imported)
    stops the threads that run custom operators, then waits for the engine's pending work.
    A custom operator the engine had not run yet (its output never read) then waits for
    those threads forever, and the interpreter hangs at exit. ``atexit`` runs hooks in the
    reverse order of registration, so this one, registered later, waits first.
    """
    global _WAITS_AT_EXIT
    if not _WAITS_AT_EXIT:
        atexit.register(mx.nd.waitall)
        _WAITS_AT_EXIT = True


def _register(op):
    """Register ``op`` under ``op.op_type``; a name held by another live operator is refused."""
    ref = _LIVE.get(op.op_type)
    if ref is not None and ref() is not None:
        gc.collect()  # an operator nobody uses may still wait in a reference cycle
    holder = None if ref is None else ref()
    if holder is not None:
        raise ValueError(f"the custom operator name {op.op_type!r} is taken by "
                         f"{holder.__name__} defined at {_where(holder._forward)}, which is "
                         f"still in use, so {op.__name__} defined at {_where(op._forward)} "
                         "cannot have it: exported graphs find their operators by this name. "
                         "Define each operator once at module level, or give each its own "
                         "name with @custom_op(name='mylib.my_op').")
    _wait_at_exit()
    if ref is None:
        mx.operator.register(op.op_type)(type("_Prop", (_Prop,), {"_op_type": op.op_type}))
    _LIVE[op.op_type] = weakref.ref(op)


def _as_list(result, count, what):
    """``result`` of a forward or backward function as a list of ``count`` entries."""
    if count == 1 and not isinstance(result, (list, tuple)):
        result = [result]
    if not isinstance(result, (list, tuple)) or len(result) != count:
        got = len(result) if isinstance(result, (list, tuple)) else type(result).__name__
        raise ValueError(f"{what} must return {count} value(s) (a tuple if several), got {got}.")
    return list(result)


def _shape_known(shape):
    return len(shape) > 0 and all(d > 0 for d in shape)


class _Kernel(mx.operator.CustomOp):
    """Runs the user's forward and backward on the NDArrays MXNet hands over."""

    def __init__(self, op, kwargs):
        super().__init__()
        self._op = op
        self._kwargs = kwargs

    def forward(self, is_train, req, in_data, out_data, aux):
        with mx.autograd.pause(train_mode=bool(is_train)):
            outs = _as_list(self._op._forward(*in_data, **self._kwargs),
                            len(out_data), f"the forward of {self._op.__name__}")
        for i, (dst, src) in enumerate(zip(out_data, outs)):
            if src.shape != dst.shape:
                raise ValueError(f"output {i} of {self._op.__name__} has shape {src.shape}, but "
                                 f"{dst.shape} was inferred on zero inputs; the output shapes "
                                 "must depend only on the input shapes.")
            self.assign(dst, req[i], src)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        with mx.autograd.pause():
            grads = _as_list(self._op._backward(*out_grad, *in_data, **self._kwargs),
                             len(in_grad), f"the backward of {self._op.__name__}")
        for i, (dst, src) in enumerate(zip(in_grad, grads)):
            if src is None:
                if req[i] in ("write", "inplace"):
                    dst[:] = 0
                continue
            if not isinstance(src, mx.nd.NDArray):
                raise TypeError(f"the backward of {self._op.__name__} returned a "
                                f"{type(src).__name__} for input {i}; return NDArrays "
                                "(None for zeros).")
            if src.shape != dst.shape:
                raise ValueError(f"the backward of {self._op.__name__} returned a gradient of "
                                 f"shape {src.shape} for input {i} of shape {dst.shape}; return "
                                 "one gradient of the input's shape per input (None for zeros).")
            self.assign(dst, req[i], src)


class _Prop(mx.operator.CustomOpProp):
    """Shape and type inference for one node; ``_op_type`` is set on each registered subclass."""

    _op_type = None

    def __init__(self, keywords="{}"):
        super().__init__(need_top_grad=True)
        self._op = _live_op(self._op_type)
        self._keywords = keywords
        self._kwargs = self._op._resolve(decode_keywords(keywords))
        self._in_shapes = None
        self._in_types = None

    def list_arguments(self):
        return list(self._op._inputs)

    def list_outputs(self):
        return [f"output{i}" for i in range(self._op.num_outputs)]

    def infer_shape(self, in_shape):
        n_out = self._op.num_outputs
        if not all(_shape_known(s) for s in in_shape):
            return in_shape, [()] * n_out, []
        self._in_shapes = tuple(tuple(s) for s in in_shape)
        out_shapes, _ = self._op._infer(self._keywords, self._in_shapes, self._in_types)
        return in_shape, list(out_shapes), []

    def infer_type(self, in_type):
        n_out = self._op.num_outputs
        if any(t is None for t in in_type):
            return in_type, [None] * n_out, []
        self._in_types = tuple(in_type)
        if self._in_shapes is None:  # no shapes yet: MXNet's convention, the first input's type
            return in_type, [in_type[0]] * n_out, []
        _, out_types = self._op._infer(self._keywords, self._in_shapes, self._in_types)
        return in_type, list(out_types), []

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return _Kernel(self._op, self._kwargs)


class CustomOperator:
    """An operator made of a forward function and a backward registered on it.

    Built by :func:`custom_op`; see there. Calling it on NDArrays runs the operator
    imperatively (recorded by autograd); calling it on Symbols adds it to the graph.

    Attributes
    ----------
    op_type : str
        The name registered with ``mx.operator.register`` and written as the ``op_type`` of
        the ``Custom`` nodes of exported graphs: ``gluonkit.<module>.<qualified name>`` of
        the forward, the same in every process, or the ``name`` given to :func:`custom_op`.
    num_outputs : int or None
        The number of outputs, known once the backward is registered.
    """

    def __init__(self, forward, name=None):
        if not callable(forward):
            raise TypeError(f"custom_op decorates a function, got {forward!r}; to name the "
                            "operator, write @custom_op(name='mylib.my_op').")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"name must be a non-empty str such as 'mylib.my_op', got {name!r}.")
        functools.update_wrapper(self, forward)
        self.__name__ = getattr(forward, "__name__", type(forward).__name__)
        self._forward = forward
        self._backward = None
        self.num_outputs = None
        self._inputs, self._keywords, self._defaults = self._parse_forward(forward, self.__name__)
        if name is None:
            qualname = getattr(forward, "__qualname__", self.__name__)
            module = getattr(forward, "__module__", None) or "__main__"
            name = "gluonkit." + re.sub(r"[^A-Za-z0-9_.]", "_", f"{module}.{qualname}")
        self.op_type = name
        self._inferred = {}
        _register(self)

    @staticmethod
    def _parse_forward(forward, name):
        inputs, keywords, defaults = [], [], {}
        for p in inspect.signature(forward).parameters.values():
            if p.kind in _POSITIONAL and p.default is p.empty:
                inputs.append(p.name)
            elif p.kind == p.KEYWORD_ONLY:
                keywords.append(p.name)
                if p.default is not p.empty:
                    defaults[p.name] = p.default
            else:
                raise TypeError(f"parameter {p.name!r} of {name}: a custom_op forward "
                                "takes its arrays as positional parameters without defaults and "
                                "its options as keyword-only parameters (after '*'); *args, "
                                "**kwargs and positional defaults are not supported.")
        if not inputs:
            raise TypeError(f"{name} takes no array input; a custom_op forward needs "
                            "at least one positional array parameter.")
        return tuple(inputs), tuple(keywords), defaults

    def backward(self, function):
        """Register ``function(*output_grads, *inputs, **keywords)`` as the backward.

        It receives one gradient per output, then the inputs, then every keyword of the
        forward (omitted ones at the forward's defaults), and returns one gradient per input
        (a tuple if several; None means zeros). The number of outputs is the number of its
        positional parameters minus the number of inputs. Returns ``function`` unchanged.
        """
        if self._backward is not None:
            raise RuntimeError(f"{self.__name__} already has a backward; decorate a new "
                               "forward to change it.")
        params = inspect.signature(function).parameters.values()
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            raise TypeError(f"the backward of {self.__name__} takes *args; name one parameter "
                            "per output gradient, then one per input.")
        positional = [p.name for p in params if p.kind in _POSITIONAL
                      and p.name not in self._keywords]
        num_outputs = len(positional) - len(self._inputs)
        if num_outputs < 1:
            raise TypeError(f"the backward of {self.__name__} takes positional parameters "
                            f"{positional}; it needs one per output gradient, then one per "
                            f"input {list(self._inputs)}.")
        takes_any = any(p.kind == p.VAR_KEYWORD for p in params)
        names = {p.name for p in params}
        missing = [k for k in self._keywords if k not in names]
        if missing and not takes_any:
            raise TypeError(f"the backward of {self.__name__} does not accept the keyword(s) "
                            f"{missing} of the forward; add them (or **kwargs).")
        self._backward = function
        self.num_outputs = num_outputs
        return function

    def _infer(self, keywords, shapes, types=None, inputs=None):
        """Output shapes and dtypes (:meth:`_find_outputs`), remembered for the last distinct
        arguments; ``types`` None (MXNet asks for shapes before it gives types) takes those of
        a call remembered with these shapes, else float32."""
        if types is None:
            known = [key for key in self._inferred if key[:2] == (keywords, shapes)]
            types = known[-1][2] if known else (np.float32,) * len(shapes)
        key = (keywords, shapes, types)
        if key not in self._inferred:
            if len(self._inferred) >= _INFER_CACHE_SIZE:
                self._inferred.pop(next(iter(self._inferred)))
            self._inferred[key] = self._find_outputs(keywords, shapes, types, inputs)
        return self._inferred[key]

    def _resolve(self, given):
        """Every keyword of the forward: ``given`` over the forward's defaults."""
        kwargs = dict(self._defaults)
        kwargs.update(given)
        return kwargs

    def _find_outputs(self, keywords, shapes, types, inputs):
        """Output shapes and dtypes of the forward run on zeros of the input shapes and types.

        A forward that reads values (``asnumpy``) may fail on zeros (a zero matrix has no
        inverse): then an imperative call's own ``inputs`` are used instead; a graph, which
        MXNet gives only shapes, cannot be inferred.
        """
        def zeros():
            return [mx.nd.zeros(s, ctx=mx.cpu(), dtype=t) for s, t in zip(shapes, types)]

        try:
            return self._in_thread(self._signature, decode_keywords(keywords), zeros)
        except mx.base.MXNetError as err:
            if inputs is None:
                raise RuntimeError(
                    f"{self.__name__} failed in MXNet when run on zero-filled inputs of shapes "
                    f"{list(shapes)} to find its output shapes inside a graph, where MXNet gives "
                    "operators only shapes: make the forward return its outputs without reading "
                    "their values (asnumpy, asscalar, wait_to_read), or call it imperatively, "
                    "where its own inputs are used.") from err
        return self._in_thread(self._signature, decode_keywords(keywords), lambda: inputs)

    def _in_thread(self, function, *args):
        """``function(*args)`` run in a fresh thread, its error re-raised here.

        MXNet calls shape and type inference from inside its own C API calls, whose
        per-thread buffers a nested imperative call would overwrite; the forward therefore
        runs in a fresh thread (which records nothing), and the caller waits for it.
        """
        result = {}

        def target():
            try:
                result["value"] = function(*args)
            except Exception as err:  # re-raised in the calling thread below
                result["error"] = err

        thread = threading.Thread(target=target, name=f"infer-{self.__name__}")
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        return result["value"]

    def _signature(self, given, arrays):
        """Output shapes and dtypes of the forward run on ``arrays()``, waited for: only the
        shapes count, and an error of the values (a zero matrix has no inverse) is dropped,
        which the engine would otherwise raise at the next waitall and at exit."""
        outs = _as_list(self._forward(*arrays(), **self._resolve(given)), self.num_outputs,
                        f"the forward of {self.__name__} (its backward takes "
                        f"{self.num_outputs} output gradient(s))")
        for i, out in enumerate(outs):
            if not isinstance(out, mx.nd.NDArray):
                raise TypeError(f"output {i} of {self.__name__} is a {type(out).__name__}; "
                                "the forward must return NDArrays.")
        for out in outs:
            try:
                out.wait_to_read()
            except mx.base.MXNetError:
                pass
        return tuple(o.shape for o in outs), tuple(np.dtype(o.dtype).type for o in outs)

    def _check_call(self, args, kwargs):
        """The encoded keywords of a call, after checking its arguments."""
        if self._backward is None:
            raise RuntimeError(f"{self.__name__} has no backward; register one with "
                               f"@{self.__name__}.backward before calling it.")
        if len(args) != len(self._inputs):
            raise TypeError(f"{self.__name__} takes {len(self._inputs)} array input(s) "
                            f"{list(self._inputs)}, got {len(args)}.")
        if not (all(isinstance(a, mx.nd.NDArray) for a in args)
                or all(isinstance(a, mx.sym.Symbol) for a in args)):
            kinds = sorted({type(a).__name__ for a in args})
            raise TypeError(f"{self.__name__} takes NDArrays or Symbols (not mixed) as its "
                            f"array inputs, got {kinds}.")
        for name, value in kwargs.items():
            if isinstance(value, (mx.nd.NDArray, mx.sym.Symbol)):
                raise TypeError(f"keyword {name!r} of {self.__name__} got an array; array "
                                "arguments are positional: make it a positional parameter of "
                                "the forward and pass it positionally.")
            if name not in self._keywords:
                raise TypeError(f"{self.__name__} got an unknown keyword {name!r}; its "
                                f"keywords are {list(self._keywords)}.")
        missing = [k for k in self._keywords if k not in kwargs and k not in self._defaults]
        if missing:
            raise TypeError(f"{self.__name__} needs the keyword(s) {missing}.")
        return encode_keywords(kwargs)

    def __call__(self, *args, **kwargs):
        keywords = self._check_call(args, kwargs)
        if isinstance(args[0], mx.sym.Symbol):
            out = mx.sym.Custom(*args, op_type=self.op_type, keywords=keywords)
            outs = [out[i] for i in range(self.num_outputs)]
        else:
            # infer here first: forward errors surface as themselves, not inside MXNet's callback
            self._infer(keywords, tuple(a.shape for a in args),
                        tuple(np.dtype(a.dtype).type for a in args), inputs=args)
            out = mx.nd.Custom(*args, op_type=self.op_type, keywords=keywords)
            outs = out if isinstance(out, (list, tuple)) else [out]
        return outs[0] if self.num_outputs == 1 else tuple(outs)

    def __repr__(self):
        return f"<custom_op {self.__name__} op_type={self.op_type!r}>"


def custom_op(forward=None, *, name=None):
    """Turn ``forward`` into an operator whose backward is registered with ``.backward``.

    The forward takes its arrays as positional parameters and its options as keyword-only
    parameters, and returns an NDArray or a tuple of NDArrays built with ``mx.nd`` operators:
    forward and backward always receive NDArrays, also inside hybridized graphs, and run as
    Python code (convenient, but slower than built-in operators).
    The operator works on NDArrays under ``autograd.record()`` and on Symbols inside
    hybridized blocks (``static_alloc`` too), and survives ``export`` +
    ``SymbolBlock.imports``, also in another process once it has imported the module that
    defines the operator: the exported graph names it by ``op_type``, derived from the
    forward's module and qualified name (``gluonkit.mylib.ops.wave``), or ``name`` if given.
    Two live operators cannot share a name (``ValueError``): give one ``name=``, for instance
    when a factory function builds several. A definition run again replaces its earlier self
    once nothing uses that any more.

    Keyword values keep their Python types (int, float, bool, None, str, and lists/tuples of
    them) in forward and backward; NumPy scalars (``np.float32(2.0)``, ``np.int64(3)``) arrive
    as the Python value they hold; omitted keywords take the forward's defaults in both. An
    unknown keyword, a value of another type, or an array passed as a keyword raises
    ``TypeError``.

    Output shapes and dtypes are found by running the forward on zero-filled inputs of the
    input shapes and dtypes (once per distinct shapes, dtypes and keywords), waiting for that
    run and keeping only its shapes: an error of its values (a zero matrix has no inverse) is
    dropped. The output shapes and dtypes must depend only on the input shapes, dtypes and
    keywords, never on the values. A forward that reads values (``asnumpy``) and so fails on
    zeros at once is run on an imperative call's own inputs instead; in a graph, where MXNet
    gives operators only shapes, it raises ``RuntimeError``.

    Example::

        @gluonkit.autograd.custom_op
        def scaled_sin(x, *, scale=1.0, shift=None):
            return nd.sin(x) * scale + (0 if shift is None else shift)

        @scaled_sin.backward
        def _(dy, x, *, scale=1.0, shift=None):     # output grads, then inputs, then keywords
            return dy * nd.cos(x) * scale            # one gradient per input (None -> zeros)

        with mx.autograd.record():
            y = scaled_sin(x, scale=2.0)

        @gluonkit.autograd.custom_op(name='mylib.scaled_cos')     # an explicit name
        def scaled_cos(x, *, scale=1.0):
            ...
    """
    if forward is None:
        return functools.partial(CustomOperator, name=name)
    return CustomOperator(forward, name=name)
