"""custom_op keyword values keep their Python types in forward and backward, hybridized too."""
import mxnet as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mxnet import autograd as mx_autograd
from mxnet import nd
from numpy.testing import assert_allclose

from gluonkit.autograd import custom_op
from gluonkit.autograd.keywords import decode_keywords, encode_keywords


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


def test_encoding_keeps_lists_and_tuples_apart_and_names_a_bad_value():
    keywords = {"b": (1, [2.0, None, ()]), "a": [True, "x", (0.5,)]}
    text = encode_keywords(keywords)
    assert text == encode_keywords(dict(reversed(list(keywords.items()))))   # one text per value
    assert _typed(decode_keywords(text)) == _typed(keywords)
    with pytest.raises(TypeError, match=r"keyword 'b'\[1\]\[0\] is <object"):
        encode_keywords({"b": (1, [object()])})


@pytest.mark.parametrize("hybridize_net", [False, True], ids=["imperative", "hybridized"])
def test_numpy_scalar_keywords_arrive_as_the_python_values_they_hold(hybridize_net):
    # custom_op refused np.float32(2.0) and np.int64(3), which MXNet's own operators take
    kwargs = {"i": np.int64(3), "f": np.float32(2.5), "b": np.bool_(True), "s": np.str_("x"),
              "seq": (np.int32(1), [np.float64(0.25)])}
    net = mx.gluon.nn.HybridLambda(lambda F, x: record_keywords(x, **kwargs))
    if hybridize_net:
        net.hybridize()
    x = nd.ones((2,))
    x.attach_grad()
    del _SEEN[:]
    with mx_autograd.record():
        y = net(x)
    y.backward()
    mx.nd.waitall()
    expected = _typed(dict(DEFAULTS, i=3, f=2.5, b=True, s="x", seq=(1, [0.25])))
    assert {where for where, _ in _SEEN} == {"forward", "backward"}
    for where, got in _SEEN:
        assert _typed(got) == expected, where
    assert encode_keywords(kwargs) == encode_keywords({"i": 3, "f": 2.5, "b": True, "s": "x",
                                                      "seq": (1, [0.25])})
