"""gluonkit.autograd.backward against mx.autograd.backward and hand-computed gradients."""
import random
import re

import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd as mx_autograd
from mxnet import nd
from numpy.testing import assert_allclose

from gluonkit.autograd import backward

RTOL, ATOL = 1e-5, 1e-6


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
