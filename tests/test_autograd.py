"""gluonkit.autograd: backward over named heads, custom operators with keyword arguments."""
import importlib
import os
import random
import re
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd as mx_autograd
from mxnet import nd
from numpy.testing import assert_allclose

import gluonkit
from gluonkit.autograd import backward, custom_op

RTOL, ATOL = 1e-5, 1e-6


# ---------------------------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------------------------

def _leaves(ctx):
    x = nd.random.uniform(-1, 1, shape=(2, 3), ctx=ctx)
    w = nd.random.uniform(-1, 1, shape=(2, 3), ctx=ctx)
    for leaf in (x, w):
        leaf.attach_grad()
    return x, w


def _heads(x, w):
    """Three heads of different shapes that share the leaves."""
    with mx_autograd.record():
        return {"prod": x * w, "rows": (x ** 2).sum(axis=1), "total": (nd.sin(w) * x).sum()}


def _grads_of(x, w):
    return x.grad.asnumpy().copy(), w.grad.asnumpy().copy()


def test_backward_equals_mxnet_for_list_dict_and_shuffled_dict(ctx_list):
    ctx, grad_ctx = ctx_list[-1], ctx_list[0]           # head gradients start on another device
    x, w = _leaves(ctx)
    names = ["prod", "rows", "total"]
    shapes = {"prod": (2, 3), "rows": (2,), "total": (1,)}
    g = {k: nd.random.normal(shape=s, ctx=grad_ctx) for k, s in shapes.items()}

    heads = _heads(x, w)
    mx_autograd.backward([heads[k] for k in names], [g[k].as_in_context(ctx) for k in names])
    ref = _grads_of(x, w)
    # the reference, by hand: dx = gp*w + 2*x*gr + gt*sin(w), dw = gp*x + gt*x*cos(w)
    xn, wn = x.asnumpy(), w.asnumpy()
    gp, gr, gt = (g[k].asnumpy() for k in names)
    assert_allclose(ref[0], gp * wn + 2 * xn * gr[:, None] + gt * np.sin(wn), rtol=RTOL, atol=ATOL)
    assert_allclose(ref[1], gp * xn + gt * xn * np.cos(wn), rtol=RTOL, atol=ATOL)

    shuffled = names[:]
    random.Random(1).shuffle(shuffled)
    assert shuffled != names
    calls = {
        "list": lambda h: backward([h[k] for k in names], [g[k] for k in names]),
        "tuple": lambda h: backward(tuple(h[k] for k in names), tuple(g[k] for k in names)),
        "dict": lambda h: backward(h, g),
        "shuffled": lambda h: backward({k: h[k] for k in shuffled}, {k: g[k] for k in names}),
    }
    for label, call in calls.items():
        call(_heads(x, w))
        for got, want in zip(_grads_of(x, w), ref):
            assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=label)


def test_backward_moves_head_grads_to_the_head_context(monkeypatch):
    # CPU contexts share memory, so MXNet would not notice a stray context: spy on the call
    seen = []
    real = mx.autograd.backward

    def spy(heads, head_grads=None, **kwargs):
        seen.append([(h.context, None if g is None else g.context)
                     for h, g in zip(heads, head_grads)])
        return real(heads, head_grads, **kwargs)

    monkeypatch.setattr(mx.autograd, "backward", spy)
    x, w = _leaves(mx.cpu(1))
    g = {"prod": nd.ones((2, 3), ctx=mx.cpu(0)), "rows": nd.ones((2,), ctx=mx.cpu(1))}
    backward(_heads(x, w), g)
    assert seen == [[(mx.cpu(1), mx.cpu(1)), (mx.cpu(1), mx.cpu(1)), (mx.cpu(1), None)]]
    assert_allclose(x.grad.asnumpy(), (w + 2 * x + nd.sin(w)).asnumpy(), rtol=RTOL, atol=ATOL)


def test_backward_omitted_and_none_head_grads_are_ones():
    x, w = _leaves(mx.cpu())
    g_rows = nd.random.normal(shape=(2,))
    heads = _heads(x, w)
    mx_autograd.backward([heads["prod"], heads["rows"], heads["total"]],
                         [nd.ones((2, 3)), g_rows, nd.ones((1,))])
    ref = _grads_of(x, w)
    for label, grads in [("omitted", {"rows": g_rows}),
                         ("none", {"prod": None, "rows": g_rows, "total": None})]:
        backward(_heads(x, w), grads)
        for got, want in zip(_grads_of(x, w), ref):
            assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=label)
    heads = _heads(x, w)
    backward([heads["prod"], heads["rows"], heads["total"]], [None, g_rows, None])
    for got, want in zip(_grads_of(x, w), ref):
        assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_backward_single_head():
    x, w = _leaves(mx.cpu())
    g = nd.random.normal(shape=(2, 3))
    backward(_heads(x, w)["prod"], g)
    assert_allclose(x.grad.asnumpy(), (g * w).asnumpy(), rtol=RTOL, atol=ATOL)
    backward(_heads(x, w)["prod"])
    assert_allclose(x.grad.asnumpy(), w.asnumpy(), rtol=RTOL, atol=ATOL)


def test_backward_retain_graph_is_passed_on():
    x, w = _leaves(mx.cpu())
    heads = _heads(x, w)
    backward(heads, retain_graph=True)
    first = _grads_of(x, w)
    backward(heads)                                      # the graph was kept
    for got, want in zip(_grads_of(x, w), first):
        assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    with pytest.raises(RuntimeError, match="retain_graph=True") as err:
        backward(heads)                                  # ... and freed by the last call
    assert "Check failed" not in str(err.value)


def test_backward_of_an_unrecorded_head_says_to_record():
    with pytest.raises(RuntimeError, match=r"heads is not in a recorded graph.*autograd\.record"):
        backward(nd.ones(3) * 2)


def test_backward_names_exactly_the_heads_that_are_not_in_the_graph():
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    with mx_autograd.record():
        heads = {"score": x * 2, "box": x * x, "aux": x + 1}
    heads["box"] = x * 3                                 # computed outside record()
    heads["mask"] = nd.ones(2)
    with pytest.raises(RuntimeError, match=r"^heads\['box'\], heads\['mask'\] are not in a "
                                           r"recorded graph"):
        backward(heads)
    assert_allclose(x.grad.asnumpy(), [0, 0])            # nothing was computed
    del heads["box"], heads["mask"]
    backward(heads)                                      # the graph is intact
    assert_allclose(x.grad.asnumpy(), [3, 3])


def _twin_heads(x):
    """Two heads computed from ``x``: a (3,) vector and a scalar."""
    with mx_autograd.record():
        return nd.sin(x) * x, (x ** 3).sum()


@pytest.mark.parametrize("structure", ["list", "dict"])
def test_backward_sums_the_gradients_of_an_array_given_as_two_heads(structure):
    x = nd.array([0.5, -1.0, 2.0])
    x.attach_grad()
    g1, g2 = nd.random.normal(shape=(3,)), nd.random.normal(shape=(3,))
    # the reference: plain MXNet on a twin computation where the two heads are two arrays
    with mx_autograd.record():
        first, second, total = nd.sin(x) * x, nd.sin(x) * x, (x ** 3).sum()
    mx_autograd.backward([first, total, second], [g1, None, g2])
    want = x.grad.asnumpy().copy()
    xn = x.asnumpy()
    assert_allclose(want, (g1 + g2).asnumpy() * (np.cos(xn) * xn + np.sin(xn)) + 3 * xn ** 2,
                    rtol=RTOL, atol=ATOL)

    y, total = _twin_heads(x)
    if structure == "list":
        backward([y, total, y], [g1, None, g2])
    else:
        backward({"a": y, "total": total, "b": y}, {"a": g1, "b": g2})
    assert_allclose(x.grad.asnumpy(), want, rtol=RTOL, atol=ATOL)

    y, _ = _twin_heads(x)                               # omitted gradients are ones, summed too
    backward([y, y, y], [None, g1, None])
    xn = x.asnumpy()
    assert_allclose(x.grad.asnumpy(), (2 + g1.asnumpy()) * (np.cos(xn) * xn + np.sin(xn)),
                    rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("as_dict", [False, True], ids=["list", "dict"])
def test_backward_wrong_shape_names_head_and_shapes(as_dict):
    x = nd.ones(3)
    x.attach_grad()
    with mx_autograd.record():
        y, z = x * 2, x.sum()
    bad = nd.ones(2)                  # MXNet itself accepts it and reads leftover memory
    if as_dict:
        heads, grads, label = {"y": y, "z": z}, {"y": bad}, "heads['y']"
    else:
        heads, grads, label = [y, z], [bad, None], "heads[0]"
    with pytest.raises(ValueError) as err:
        backward(heads, grads)
    for part in (label, "(2,)", "(3,)"):
        assert part in str(err.value)


_SHAPES = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head_shape=_SHAPES, grad_shape=_SHAPES)
def test_backward_accepts_exactly_the_head_shape(head_shape, grad_shape):
    x = nd.random.uniform(shape=head_shape)
    x.attach_grad()
    g = nd.random.normal(shape=grad_shape)
    with mx_autograd.record():
        y = {"y": nd.sin(x)}
    if grad_shape != head_shape:
        with pytest.raises(ValueError, match=re.escape(f"{grad_shape}")):
            backward(y, {"y": g})
        return
    backward(y, {"y": g})
    assert_allclose(x.grad.asnumpy(), (g * nd.cos(x)).asnumpy(), rtol=RTOL, atol=ATOL)


def test_backward_rejects_wrong_structure_and_types():
    x = nd.ones(3)
    x.attach_grad()
    with mx_autograd.record():
        y, z = x * 2, x * 3
    cases = [
        (ValueError, "2 heads but 1", [y, z], [None]),
        (TypeError, "must be a dict", {"y": y}, [None]),
        (TypeError, "must be a list", [y, z], {"y": None}),
        (TypeError, "NDArray or None", y, [nd.ones(3)]),
        (KeyError, "'w'", {"y": y, "z": z}, {"w": nd.ones(3)}),
        (TypeError, "float64", [y], [nd.ones(3, dtype="float64")]),
        (TypeError, "mx.nd.array", [y], [np.ones(3, dtype=np.float32)]),
        (TypeError, "heads[1] must be an NDArray", [y, np.ones(3)], None),
        (TypeError, "heads must be", "y", None),
        (ValueError, "empty", [], None),
    ]
    for exc, text, heads, grads in cases:
        with pytest.raises(exc) as err:
            backward(heads, grads)
        assert text in str(err.value), (text, str(err.value))


# ---------------------------------------------------------------------------------------------
# custom_op: operators under test, and the same functions written with plain operators
# ---------------------------------------------------------------------------------------------

@custom_op
def scaled_sin(x, *, scale=1.0, shift=None):
    return nd.sin(x) * scale + (0 if shift is None else shift)


@scaled_sin.backward
def _(dy, x, *, scale=1.0, shift=None):
    return dy * nd.cos(x) * scale


@custom_op
def mix(x, y, *, power=2):
    """Two inputs, two outputs: (x * y, x ** power + y)."""
    return x * y, x ** power + y


@mix.backward
def _(da, db, x, y, *, power=2):
    return da * y + db * power * x ** (power - 1), da * x + db


@custom_op
def masked(x, mask):
    return x * mask


@masked.backward
def _(dy, x, mask):
    return dy * mask, None


@custom_op
def widen(x):
    """A float64 output from a float32 input: output types are inferred."""
    return x.astype("float64") * 3


@widen.backward
def _(dy, x):
    return dy.astype(x.dtype) * 3


def _plain_net_forward(F, h, shift):
    """The custom operators of ``_Net`` written with plain operators."""
    s = F.sin(h) * 2.5 + shift
    return s * h, s ** 3 + h


class _Net(mx.gluon.nn.HybridBlock):
    def __init__(self, use_custom, **kwargs):
        super().__init__(**kwargs)
        self._use_custom = use_custom
        with self.name_scope():
            self.dense = mx.gluon.nn.Dense(4)
            self.out = mx.gluon.nn.Dense(3)      # its input size comes from mix's shape inference

    def hybrid_forward(self, F, x):
        h = self.dense(x)
        if self._use_custom:
            a, b = mix(scaled_sin(h, scale=2.5, shift=0.5), h, power=3)
        else:
            a, b = _plain_net_forward(F, h, 0.5)
        return self.out(a), b


def _twins(ctx_list, hybridize=False):
    """A plain net and a net with custom operators (hybridized if asked), with equal weights."""
    nets = [_Net(use_custom=c, prefix="net_") for c in (False, True)]
    for net in nets:
        net.initialize(mx.init.Uniform(0.5), ctx=ctx_list)
    if hybridize:                # deferred initialization then runs through the graph
        nets[1].hybridize(static_alloc=True)
    x = nd.random.uniform(-1, 1, shape=(3, 5))
    nets[0](x.as_in_context(ctx_list[0]))
    nets[1](x.as_in_context(ctx_list[0]))
    for a, b in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        b.set_data(a.data(ctx_list[0]))
    return nets, x


def _run(net, x, ctx, head_grads):
    """Outputs, input gradient and parameter gradients of one forward/backward on ``ctx``."""
    x = x.as_in_context(ctx)
    x.attach_grad()
    with mx_autograd.record():
        outs = net(x)
    backward(list(outs), [g.as_in_context(ctx) for g in head_grads])
    params = {k[len(net.prefix):]: p.grad(ctx).asnumpy() for k, p in net.collect_params().items()}
    return [o.asnumpy() for o in outs], x.grad.asnumpy(), params


def _assert_runs_equal(got, want, rtol=RTOL, atol=ATOL):
    for a, b in zip(got[0], want[0]):
        assert a.dtype == b.dtype
        assert_allclose(a, b, rtol=rtol, atol=atol, err_msg="outputs")
    assert_allclose(got[1], want[1], rtol=rtol, atol=atol, err_msg="input gradient")
    assert sorted(got[2]) == sorted(want[2])
    for k in want[2]:
        assert_allclose(got[2][k], want[2][k], rtol=rtol, atol=atol, err_msg=k)


# ---------------------------------------------------------------------------------------------
# custom_op: numbers
# ---------------------------------------------------------------------------------------------

def _central_differences(f, arrays, head_grads, eps=1e-6):
    """d sum(f(arrays) * head_grads) / d arrays, by central differences in float64."""
    def loss(values):
        outs = f(*[nd.array(v, dtype="float64") for v in values])
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(float((o.asnumpy() * g).sum()) for o, g in zip(outs, head_grads))

    grads = []
    for i, a in enumerate(arrays):
        grad = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            up = [v.copy() for v in arrays]
            down = [v.copy() for v in arrays]
            up[i][j] += eps
            down[i][j] -= eps
            grad[j] = (loss(up) - loss(down)) / (2 * eps)
        grads.append(grad)
    return grads


def _custom_grads(op, arrays, head_grads, **kwargs):
    xs = [nd.array(a, dtype="float64") for a in arrays]
    for x in xs:
        x.attach_grad()
    with mx_autograd.record():
        outs = op(*xs, **kwargs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    backward(outs, [nd.array(g, dtype="float64") for g in head_grads])
    return [o.asnumpy() for o in outs], [x.grad.asnumpy() for x in xs]


@pytest.mark.parametrize("kwargs", [{}, {"scale": 2.5}, {"scale": -1, "shift": 3.0}])
def test_scaled_sin_matches_finite_differences_and_plain_ops(kwargs):
    x = np.random.uniform(-2, 2, size=(2, 3))
    g = np.random.normal(size=(2, 3))
    outs, (grad,) = _custom_grads(scaled_sin, [x], [g], **kwargs)
    scale, shift = kwargs.get("scale", 1.0), kwargs.get("shift") or 0
    assert_allclose(outs[0], np.sin(x) * scale + shift, rtol=1e-12, atol=1e-12)
    numeric, = _central_differences(lambda v: scaled_sin(v, **kwargs), [x], [g])
    assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)
    assert_allclose(grad, g * np.cos(x) * scale, rtol=1e-12, atol=1e-12)


def test_mix_matches_finite_differences_for_two_inputs_and_outputs():
    x, y = np.random.uniform(0.5, 2, size=(2, 3)), np.random.uniform(-1, 1, size=(2, 3))
    ga, gb = np.random.normal(size=(2, 3)), np.random.normal(size=(2, 3))
    outs, grads = _custom_grads(mix, [x, y], [ga, gb], power=3)
    assert_allclose(outs[0], x * y, rtol=1e-12, atol=1e-12)
    assert_allclose(outs[1], x ** 3 + y, rtol=1e-12, atol=1e-12)
    numeric = _central_differences(lambda a, b: mix(a, b, power=3), [x, y], [ga, gb])
    for got, want in zip(grads, numeric):
        assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_check_numeric_gradient_on_the_symbol():
    data = mx.sym.var("data")
    sym = mx.sym.sum(scaled_sin(data, scale=1.5, shift=0.25) * data)
    x = np.random.uniform(-1, 1, size=(2, 3))
    mx.test_utils.check_numeric_gradient(sym, [x], numeric_eps=1e-6, rtol=1e-5, atol=1e-7,
                                         dtype=np.float64)
    out = sym.eval(data=nd.array(x, dtype="float64"))[0]
    assert_allclose(out.asnumpy(), ((np.sin(x) * 1.5 + 0.25) * x).sum(), rtol=1e-12)


def test_none_gradient_means_zeros():
    x, mask = nd.random.uniform(shape=(2, 3)), (nd.random.uniform(shape=(2, 3)) > 0.5)
    x.attach_grad()
    mask.attach_grad()
    mask.grad[:] = 7
    g = nd.random.normal(shape=(2, 3))
    with mx_autograd.record():
        y = masked(x, mask)
    backward(y, g)
    assert_allclose(x.grad.asnumpy(), (g * mask).asnumpy(), rtol=RTOL, atol=ATOL)
    assert (mask.grad.asnumpy() == 0).all()


def test_grad_req_add_and_write_in_a_bound_symbol():
    sym = masked(mx.sym.var("x"), mx.sym.var("mask"))
    exe = sym.simple_bind(mx.cpu(), x=(2, 3), mask=(2, 3), grad_req={"x": "add", "mask": "write"})
    mask = (nd.random.uniform(shape=(2, 3)) > 0.5)
    exe.arg_dict["x"][:] = nd.random.uniform(shape=(2, 3))
    exe.arg_dict["mask"][:] = mask
    exe.grad_dict["x"][:] = 5
    exe.grad_dict["mask"][:] = 7
    g = nd.random.normal(shape=(2, 3))
    exe.forward(is_train=True)
    exe.backward(g)
    assert_allclose(exe.grad_dict["x"].asnumpy(), 5 + (g * mask).asnumpy(), rtol=RTOL, atol=ATOL)
    assert (exe.grad_dict["mask"].asnumpy() == 0).all()


def test_block_with_custom_ops_equals_plain_twin(ctx_list, hybridize):
    (plain, custom), x = _twins(ctx_list, hybridize)
    head_grads = [nd.random.normal(shape=(3, 3)), nd.random.normal(shape=(3, 4))]
    for ctx in ctx_list:
        _assert_runs_equal(_run(custom, x, ctx, head_grads), _run(plain, x, ctx, head_grads))


@pytest.mark.parametrize("static_alloc", [False, True], ids=["hybrid", "static_alloc"])
def test_hybridized_equals_imperative(static_alloc):
    (_, net), x = _twins([mx.cpu()])
    head_grads = [nd.random.normal(shape=(3, 3)), nd.random.normal(shape=(3, 4))]
    want = _run(net, x, mx.cpu(), head_grads)
    net.hybridize(static_alloc=static_alloc, static_shape=static_alloc)
    for _ in range(2):                                   # build the graph, then reuse it
        _assert_runs_equal(_run(net, x, mx.cpu(), head_grads), want, rtol=1e-6, atol=1e-7)


def test_export_and_imports_give_the_same_outputs_and_gradients(tmp_path):
    (_, net), x = _twins([mx.cpu()])
    net.hybridize()
    head_grads = [nd.random.normal(shape=(3, 3)), nd.random.normal(shape=(3, 4))]
    want = _run(net, x, mx.cpu(), head_grads)
    net.export(str(tmp_path / "model"))
    loaded = mx.gluon.SymbolBlock.imports(str(tmp_path / "model-symbol.json"), ["data"],
                                          str(tmp_path / "model-0000.params"))
    got = _run(loaded, x, mx.cpu(), head_grads)
    for a, b in zip(got[0], want[0]):
        assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)
    assert scaled_sin.op_type in (tmp_path / "model-symbol.json").read_text()


def test_output_dtype_is_inferred_in_graphs(hybridize):
    net = mx.gluon.nn.HybridLambda(lambda F, x: widen(x))
    if hybridize:
        net.hybridize()
    x = nd.array([[1.0, -2.0]])
    x.attach_grad()
    with mx_autograd.record():
        y = net(x)
    assert y.dtype == np.float64
    y.backward(nd.array([[1.0, 10.0]], dtype="float64"))
    assert_allclose(y.asnumpy(), [[3.0, -6.0]], rtol=0, atol=0)
    assert_allclose(x.grad.asnumpy(), [[3.0, 30.0]], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# custom_op: keyword arguments
# ---------------------------------------------------------------------------------------------

_SEEN = []


@custom_op
def record_keywords(x, *, i=1, f=0.5, b=False, n=None, s="a", seq=(1, 2.0), opt=3):
    _SEEN.append(("forward", dict(i=i, f=f, b=b, n=n, s=s, seq=seq, opt=opt)))
    return x * 2


@record_keywords.backward
def _(dy, x, *, i=99, f=99.0, b=True, n="default", s="z", seq=(), opt=0):
    _SEEN.append(("backward", dict(i=i, f=f, b=b, n=n, s=s, seq=seq, opt=opt)))
    return dy * 2


def _typed(value):
    """``value`` with the type of every element spelled out, for type-exact comparison."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_typed(v) for v in value]
    return type(value).__name__, value


DEFAULTS = dict(i=1, f=0.5, b=False, n=None, s="a", seq=(1, 2.0), opt=3)
KEYWORD_CASES = [
    {},
    {"i": 2, "f": 2.0, "b": True, "n": None, "s": "2.5"},
    {"i": True, "f": 1, "b": 0, "s": 'quote " and é', "seq": [1, (2, [3.5, None]), "x"]},
    {"opt": None, "seq": (), "f": float("inf")},
]


@pytest.mark.parametrize("kwargs", KEYWORD_CASES, ids=["defaults", "scalars", "nested", "none"])
def test_keyword_types_round_trip(kwargs, hybridize):
    net = mx.gluon.nn.HybridLambda(lambda F, x: record_keywords(x, **kwargs))
    if hybridize:
        net.hybridize()
    x = nd.ones((2,))
    x.attach_grad()
    del _SEEN[:]
    with mx_autograd.record():
        y = net(x)
    y.backward()
    mx.nd.waitall()
    expected = _typed(dict(DEFAULTS, **kwargs))
    assert {where for where, _ in _SEEN} == {"forward", "backward"}
    for where, got in _SEEN:
        assert _typed(got) == expected, where
    assert_allclose(x.grad.asnumpy(), [2.0, 2.0], rtol=0, atol=0)


_KEYWORD_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple),
    max_leaves=6)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=_KEYWORD_VALUES, seq=_KEYWORD_VALUES)
def test_any_supported_keyword_value_round_trips(s, seq):
    x = nd.ones((1,))
    x.attach_grad()
    del _SEEN[:]
    with mx_autograd.record():
        y = record_keywords(x, s=s, seq=seq)
    y.backward()
    mx.nd.waitall()
    expected = _typed(dict(DEFAULTS, s=s, seq=seq))
    assert {where for where, _ in _SEEN} == {"forward", "backward"}
    for where, got in _SEEN:
        assert _typed(got) == expected, where


def test_bad_keywords_raise_type_error_naming_them():
    x = nd.ones(2)
    cases = [
        ({"scael": 2.0}, "'scael'"),
        ({"scale": np.float32(2)}, "'scale'"),
        ({"scale": {"a": 1}}, "'scale'"),
        ({"shift": [1, object()]}, "'shift'[1]"),
        ({"shift": nd.ones(2)}, "positional"),
        ({"shift": mx.sym.var("s")}, "positional"),
    ]
    for kwargs, text in cases:
        with pytest.raises(TypeError) as err:
            scaled_sin(x, **kwargs)
        assert text in str(err.value), (kwargs, str(err.value))


def test_bad_calls_and_definitions_raise():
    x = nd.ones(2)
    with pytest.raises(TypeError, match="2 array input"):
        mix(x)
    with pytest.raises(TypeError, match="not mixed"):
        mix(x, mx.sym.var("y"))
    with pytest.raises(TypeError, match="NDArrays or Symbols"):
        scaled_sin(np.ones(2))

    @custom_op
    def no_backward(x):
        return x
    with pytest.raises(RuntimeError, match="no backward"):
        no_backward(x)
    with pytest.raises(TypeError, match="does not accept the keyword"):
        scaled_sin_like = custom_op(lambda x, *, k=1: x * k)
        scaled_sin_like.backward(lambda dy, x: dy)
    with pytest.raises(TypeError, match="one per output gradient"):
        custom_op(lambda x, y: x * y, name="test.product").backward(lambda dy, x: dy)
    with pytest.raises(TypeError, match="'rest'"):
        custom_op(lambda x, *rest: x)
    with pytest.raises(TypeError, match="'k'"):
        custom_op(lambda x, k=1: x)
    with pytest.raises(RuntimeError, match="already has a backward"):
        scaled_sin.backward(lambda dy, x, *, scale=1.0, shift=None: dy)


def test_forward_errors_surface_as_themselves():
    @custom_op
    def picky(x, *, ok=True):
        if not ok:
            raise ValueError("picky says no")
        return x, x

    @picky.backward
    def _(da, db, x, *, ok=True):
        return da + db

    with pytest.raises(ValueError, match="picky says no"):
        picky(nd.ones(2), ok=False)


def test_wrong_backward_fails_loudly():
    @custom_op
    def half(x, y):
        return x * y

    @half.backward
    def _(dy, x, y):
        return dy * y                                    # one gradient for two inputs

    x, y = nd.ones(2), nd.ones(2)
    x.attach_grad()
    with mx_autograd.record():
        z = half(x, y)
    with pytest.raises(mx.base.MXNetError):
        z.backward()
        x.grad.wait_to_read()


def _scaler(k, name=None):
    @custom_op(name=name)
    def scale(x):
        return x * k

    @scale.backward
    def _(dy, x):
        return dy * k
    return scale


def _value_and_grad(f, values):
    """``f(x)`` and the gradient of its sum with respect to ``x = nd.array(values)``."""
    x = nd.array(values)
    x.attach_grad()
    with mx_autograd.record():
        y = f(x)
    y.backward()
    return y.asnumpy(), x.grad.asnumpy()


def test_op_type_is_the_module_and_qualified_name():
    assert scaled_sin.op_type == "gluonkit.test_autograd.scaled_sin"
    assert _scaler(2.0).op_type == "gluonkit.test_autograd._scaler._locals_.scale"
    assert _scaler(2.0, name="test.double").op_type == "test.double"


def test_two_live_operators_with_one_name_raise_and_names_tell_them_apart(hybridize):
    double = _scaler(2.0)
    with pytest.raises(ValueError, match=r"taken by scale defined at .*still in use.*name="):
        _scaler(3.0)
    double, triple = _scaler(2.0, name="test.double"), _scaler(3.0, name="test.triple")
    with pytest.raises(ValueError, match="'test.double' is taken"):
        custom_op(name="test.double")(lambda x: x)
    net = mx.gluon.nn.HybridLambda(lambda F, x: double(x) + triple(x) * 10)
    if hybridize:
        net.hybridize()
    y, dx = _value_and_grad(net, [1.0, 2.0])
    assert_allclose(y, [32.0, 64.0], rtol=0, atol=0)
    assert_allclose(dx, [32.0, 32.0], rtol=0, atol=0)


def test_a_definition_run_again_takes_over_its_name_once_the_first_is_gone():
    first = _scaler(2.0)
    op_type = first.op_type
    del first                                           # a notebook cell or module run again
    again = _scaler(5.0)
    assert again.op_type == op_type
    y, dx = _value_and_grad(again, [1.0, 2.0])
    assert_allclose(y, [5.0, 10.0], rtol=0, atol=0)
    assert_allclose(dx, [5.0, 5.0], rtol=0, atol=0)


def test_bad_names_raise_type_error():
    for bad in (3, "", "  "):
        with pytest.raises(TypeError, match="non-empty str"):
            custom_op(name=bad)(lambda x: x)
    with pytest.raises(TypeError, match=r"custom_op\(name="):
        custom_op("mylib.wave")


WAVE_MODULE = textwrap.dedent("""
    from mxnet import nd
    from gluonkit.autograd import custom_op


    @custom_op
    def wave(x, *, freq=1.0):
        return nd.sin(x * freq) + x


    @wave.backward
    def _(dy, x, *, freq=1.0):
        return dy * (nd.cos(x * freq) * freq + 1)
""")

SERVING = textwrap.dedent("""
    import sys
    import numpy as np
    import mxnet as mx
    from gluonkit.autograd import custom_op

    # a serving process with operators of its own, defined before the model's module
    @custom_op
    def other(x):
        return x * 2

    @other.backward
    def _(dy, x):
        return dy * 2

    @custom_op
    def another(x, *, k=1):
        return x + k

    @another.backward
    def _(dy, x, *, k=1):
        return dy

    other(mx.nd.ones(2)).wait_to_read()
    import wave_ops  # noqa: F401  (registers the model's operator)

    out = sys.argv[1]
    net = mx.gluon.SymbolBlock.imports(out + "/model-symbol.json", ["data"],
                                       out + "/model-0000.params")
    x = mx.nd.array(np.load(out + "/x.npy"))
    x.attach_grad()
    with mx.autograd.record():
        y = net(x)
    y.backward()
    np.save(out + "/y.npy", y.asnumpy())
    np.save(out + "/dx.npy", x.grad.asnumpy())
""")


def test_exported_custom_op_loads_in_a_process_that_defined_other_ops_first(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "wave_ops.py").write_text(WAVE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wave_ops", raising=False)
    wave_ops = importlib.import_module("wave_ops")
    try:
        net = _WaveNet(wave_ops.wave)
        net.initialize(mx.init.Uniform(0.5))
        net.hybridize()
        x = nd.random.uniform(-1, 1, shape=(4, 3))
        x.attach_grad()
        with mx_autograd.record():
            y = net(x)
        y.backward()
        net.export(str(tmp_path / "model"))
        assert '"gluonkit.wave_ops.wave"' in (tmp_path / "model-symbol.json").read_text()
        np.save(tmp_path / "x.npy", x.asnumpy())
        (tmp_path / "serve.py").write_text(SERVING)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(tmp_path), os.path.dirname(os.path.dirname(gluonkit.__file__))]))
        result = subprocess.run([sys.executable, str(tmp_path / "serve.py"), str(tmp_path)],
                                env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        assert_allclose(np.load(tmp_path / "y.npy"), y.asnumpy(), rtol=1e-6, atol=1e-7)
        assert_allclose(np.load(tmp_path / "dx.npy"), x.grad.asnumpy(), rtol=1e-6, atol=1e-7)
    finally:
        del sys.modules["wave_ops"]


class _WaveNet(mx.gluon.nn.HybridBlock):
    def __init__(self, wave, **kwargs):
        super().__init__(**kwargs)
        self._wave = wave
        with self.name_scope():
            self.dense = mx.gluon.nn.Dense(5)

    def hybrid_forward(self, F, x):
        return self._wave(self.dense(x), freq=2.0)


UNREAD_OUTPUT = textwrap.dedent("""
    import mxnet as mx
    from mxnet import nd
    import gluonkit

    @gluonkit.autograd.custom_op
    def scaled_sin(x, *, scale=1.0, shift=None):
        return nd.sin(x) * scale + (0 if shift is None else shift)

    @scaled_sin.backward
    def _(dy, x, *, scale=1.0, shift=None):
        return dy * nd.cos(x) * scale

    x = nd.ones((2, 3))
    with mx.autograd.record():
        y = scaled_sin(x, scale=2.5)          # never read: still pending at exit
    with open("done.txt", "w") as f:
        f.write("reached the end")
""")


def test_a_script_that_never_reads_a_custom_op_output_exits(tmp_path):
    # MXNet's exit hook stopped the custom-operator threads before draining the engine, so
    # this script hung at exit forever; gluonkit now waits for pending work first.
    (tmp_path / "unread.py").write_text(UNREAD_OUTPUT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(gluonkit.__file__)))
    result = subprocess.run([sys.executable, "unread.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "done.txt").read_text() == "reached the end"
