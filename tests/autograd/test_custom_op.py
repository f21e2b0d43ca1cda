"""gluonkit.autograd.custom_op against finite differences, plain operators and a twin network."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd as mx_autograd
from mxnet import nd
from numpy.testing import assert_allclose

from gluonkit.autograd import backward, custom_op

RTOL, ATOL = 1e-5, 1e-6


# ---------------------------------------------------------------------------------------------
# operators under test, and the same functions written with plain operators
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
# numbers
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
    out = sym.bind(mx.cpu(), {"data": nd.array(x, dtype="float64")}).forward()[0]
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
# bad calls and definitions
# ---------------------------------------------------------------------------------------------

def test_bad_keywords_raise_type_error_naming_them():
    x = nd.ones(2)
    cases = [
        ({"scael": 2.0}, "'scael'"),
        ({"scale": np.complex64(2)}, "'scale'"),
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


# ---------------------------------------------------------------------------------------------
# operator names
# ---------------------------------------------------------------------------------------------

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
    assert scaled_sin.op_type == "gluonkit.test_custom_op.scaled_sin"
    assert _scaler(2.0).op_type == "gluonkit.test_custom_op._scaler._locals_.scale"
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


@custom_op
def checked_inverse(a):
    """Reads its values (waits for them): on a zero matrix it fails at once."""
    b = nd.linalg.inverse(a)
    b.wait_to_read()
    return b


@checked_inverse.backward
def _(dy, a):
    b = nd.linalg.inverse(a)
    return -nd.linalg.gemm2(nd.linalg.gemm2(b, dy, transpose_a=True), b, transpose_b=True)


def test_a_forward_that_fails_on_zeros_is_inferred_from_the_call_s_own_inputs():
    # the output shapes came from a run on zeros only: a forward that reads its values
    # failed there with MXNet's "the input matrix is non-convertible"
    a = np.array([[2.0, 1.0], [0.5, 3.0]], dtype=np.float64)
    x = nd.array(a, dtype=np.float64)
    x.attach_grad()
    with mx_autograd.record():
        y = checked_inverse(x)
    y.backward()
    ref = np.linalg.inv(a)
    assert y.dtype == np.float64
    assert_allclose(y.asnumpy(), ref, rtol=1e-12)
    assert_allclose(x.grad.asnumpy(), -(ref.T @ np.ones((2, 2)) @ ref.T), rtol=1e-12)
    mx.nd.waitall()                                  # nothing left pending from the zeros
