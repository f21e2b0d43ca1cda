"""gluonkit.params against hand-computed SGD, plain Gluon and the saved files themselves."""
import gluoncv
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn
from numpy.testing import assert_allclose, assert_array_equal

import gluonkit
from gluonkit import params as P

LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def _mlp(in_units=4, hidden=6, classes=3, layers=2):
    """A small Dense stack; ``in_units=None`` leaves the first weight deferred."""
    net = nn.HybridSequential()
    for _ in range(layers - 1):
        net.add(nn.Dense(hidden, in_units=in_units or 0, activation="tanh"))
        in_units = hidden
    net.add(nn.Dense(classes, in_units=in_units or 0))
    return net


class _Whole(gluon.HybridBlock):
    """A network holding sub-blocks under the given attribute names, then a head."""

    def __init__(self, **blocks):
        super().__init__()
        self._names = list(blocks)
        for name, block in blocks.items():
            setattr(self, name, block)
        self.head = nn.Dense(2, in_units=3)

    def hybrid_forward(self, F, x):
        for name in self._names:
            x = getattr(self, name)(x)
        return self.head(x)


def _values(block):
    """Every context's copy of every parameter, as NumPy arrays keyed by name."""
    return {name: [a.asnumpy() for a in p.list_data()] for name, p in P.select(block).items()}


def _assert_same(before, after, names=None):
    """Bit-identical values, on every context, for ``names`` (default: all of ``before``)."""
    for name in names or before:
        assert len(before[name]) == len(after[name]), name
        for a, b in zip(before[name], after[name]):
            assert_array_equal(a, b, err_msg=name)


def _backward(net, ctx_list, batch=10, in_units=4, classes=3):
    """One forward/backward of a random batch split over ``ctx_list``; returns its size."""
    x = nd.array(np.random.randn(batch, in_units))
    y = nd.array(np.random.randint(0, classes, batch))
    xs = gluonkit.split_and_load(x, ctx_list)
    ys = gluonkit.split_and_load(y, ctx_list)
    with autograd.record():
        losses = [LOSS(net(xi), yi) for xi, yi in zip(xs, ys)]
    autograd.backward(losses)
    return batch


def _summed_grads(block):
    """The gradient of each trainable parameter, summed over its contexts."""
    return {name: sum(g.asnumpy() for g in p.list_grad())
            for name, p in P.select(block).items() if p.grad_req != "null"}


def test_freeze_of_a_block_without_parameters_names_the_block():
    empty = nn.HybridSequential()
    assert P.freeze(empty) == []
    with pytest.raises(ValueError, match=r"pattern 'weight' matches nothing: the block "
                                         r"\(HybridSequential\) has no parameters"):
        P.freeze(empty, "weight")


def test_freeze_keeps_parameters_bit_identical(ctx_list, hybridize):
    net = _mlp(layers=3)
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    if hybridize:
        net.hybridize()
    lr, wd, momentum = 0.1, 0.01, 0.9
    trainer = gluonkit.Trainer(net.collect_params(), "sgd",
                               {"learning_rate": lr, "momentum": momentum, "wd": wd})
    start = _values(net)
    trainer.step(_backward(net, ctx_list))                  # momentum is now non-zero
    first = _values(net)

    frozen = ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert P.freeze(net, r"^[01]\.") == frozen
    for _ in range(3):
        trainer.step(_backward(net, ctx_list))
    after = _values(net)
    _assert_same(first, after, frozen)                      # no update, no momentum, no decay
    assert not np.array_equal(first["2.weight"][0], after["2.weight"][0])

    assert P.unfreeze(net, r"^0\.") == ["0.weight", "0.bias"]
    reqs = [p.grad_req for p in P.select(net).values()]
    assert reqs == ["write", "write", "null", "null", "write", "write"]
    batch = _backward(net, ctx_list)
    grads = _summed_grads(net)
    trainer.step(batch)
    resumed = _values(net)
    for name in ("0.weight", "0.bias"):
        # SGD with momentum whose state was left as the first step made it: w1 - w0
        w = after[name][0]
        velocity = (momentum * (first[name][0] - start[name][0])
                    - lr * (grads[name] / batch + wd * w))
        for value in resumed[name]:
            assert_allclose(value, w + velocity, rtol=1e-5, atol=1e-6, err_msg=name)
    _assert_same(after, resumed, ["1.weight", "1.bias"])


@pytest.mark.parametrize("freeze_first", [False, True], ids=["trainer-first", "freeze-first"])
def test_unfreeze_restores_add_for_accumulating_trainer(freeze_first):
    net = _mlp()
    net.initialize(mx.init.Xavier())
    twin = _mlp()
    twin.initialize()
    for p, q in zip(net.collect_params().values(), twin.collect_params().values()):
        q.set_data(p.data())
    if freeze_first:
        P.freeze(net, r"^1\.")
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}, accumulate=2)
    if not freeze_first:
        P.freeze(net, r"^1\.")
    assert [p.grad_req for p in P.select(net).values()] == ["add", "add", "null", "null"]
    assert P.unfreeze(net) == ["1.weight", "1.bias"]
    assert [p.grad_req for p in P.select(net).values()] == ["add"] * 4

    # the restored 'add' accumulates two micro-batches into the gradient of the whole batch
    x, y = nd.array(np.random.randn(7, 4)), nd.array(np.random.randint(0, 3, 7))
    for part in (slice(0, 3), slice(3, 7)):
        with autograd.record():
            LOSS(net(x[part]), y[part]).backward()
        trainer.step(part.stop - part.start)
    with autograd.record():
        LOSS(twin(x), y).backward()
    for (name, p), q in zip(P.select(net).items(), twin.collect_params().values()):
        expected = q.data().asnumpy() - 0.5 * q.grad().asnumpy() / 7
        assert_allclose(p.data().asnumpy(), expected, rtol=1e-5, atol=1e-7, err_msg=name)


def test_lr_and_wd_mult_scale_the_sgd_update(ctx_list):
    net = _mlp()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    lr, wd = 0.05, 0.01
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": lr, "wd": wd})
    assert P.set_lr_mult(net, 10, r"^1\.") == ["1.weight", "1.bias"]   # after the Trainer
    assert P.set_wd_mult(net, 0, "bias$") == ["0.bias", "1.bias"]
    lr_mult = {"0.weight": 1, "0.bias": 1, "1.weight": 10, "1.bias": 10}
    wd_mult = {"0.weight": 1, "0.bias": 0, "1.weight": 1, "1.bias": 0}
    before = _values(net)
    batch = _backward(net, ctx_list)
    grads = _summed_grads(net)
    trainer.step(batch)
    for name, values in _values(net).items():
        w = before[name][0]
        expected = w - lr * lr_mult[name] * (grads[name] / batch + wd * wd_mult[name] * w)
        for value in values:
            assert_allclose(value, expected, rtol=1e-5, atol=1e-7, err_msg=name)
    with pytest.raises(ValueError, match="finite number >= 0, got -1"):
        P.set_lr_mult(net, -1)
    with pytest.raises(TypeError, match="wd_mult must be a number"):
        P.set_wd_mult(net, "0")


def test_average_grads_then_update_without_kvstore(ctx_list):
    net = _mlp()
    net.initialize(mx.init.Xavier(), ctx=ctx_list)
    P.set_lr_mult(net, 3, r"weight$")
    lr = 0.2
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": lr}, kvstore=None)
    before = _values(net)
    per_ctx = 5
    _backward(net, ctx_list, batch=per_ctx * len(ctx_list))
    grads = {n: [g.asnumpy() for g in p.list_grad()] for n, p in P.select(net).items()}
    averaged = P.average_grads(net)
    assert averaged == (list(grads) if len(ctx_list) > 1 else [])
    for name, p in P.select(net).items():
        mean = np.mean(grads[name], axis=0)
        for g in p.list_grad():
            assert_allclose(g.asnumpy(), mean, rtol=1e-6, atol=1e-8, err_msg=name)
    # each context updates its own copy; with the mean gradient they stay equal and match
    # one update on the whole batch: w - lr * lr_mult * sum(g) / (per_ctx * n_ctx)
    trainer.step(per_ctx)
    for name, values in _values(net).items():
        mult = 3 if name.endswith("weight") else 1
        expected = before[name][0] - lr * mult * np.mean(grads[name], axis=0) / per_ctx
        for value in values:
            assert_allclose(value, expected, rtol=1e-5, atol=1e-7, err_msg=name)


def test_load_into_finds_the_prefix(tmp_path):
    backbone = _mlp(in_units=4, hidden=5, classes=3)
    whole = _Whole(stem=_Whole(backbone=backbone))          # backbone two levels down
    whole.initialize()
    whole.save_parameters(str(tmp_path / "whole.params"))
    backbone.save_parameters(str(tmp_path / "own.params"))
    other = _Whole(trunk=_mlp(in_units=4, hidden=5, classes=3))  # another network, same block
    other.initialize()
    other.save_parameters(str(tmp_path / "other.params"))

    for filename, prefix, source in [("own.params", "", backbone),
                                     ("whole.params", "stem.backbone.", backbone),
                                     ("other.params", "trunk.", other.trunk)]:
        fresh = _mlp(in_units=4, hidden=5, classes=3)
        fresh.initialize()
        assert P.load_into(fresh, tmp_path / filename) == prefix
        _assert_same(_values(source), _values(fresh))

    # plain Gluon cannot do the second one: the file says stem.backbone.0.weight
    with pytest.raises(AssertionError, match="missing"):
        _mlp(in_units=4, hidden=5).load_parameters(str(tmp_path / "whole.params"))


@pytest.mark.parametrize("strict", [True, False])
def test_a_sub_blocks_file_loads_into_that_sub_block_of_the_whole_network(tmp_path, strict):
    # the file of net.nested holds trunk.0.*: loaded into the whole network it went into the
    # outer trunk (same names) and left nested.* untouched, silently with strict=False
    def network():
        return _Whole(trunk=_mlp(in_units=3, hidden=3, layers=1),
                      nested=_Whole(trunk=_mlp(in_units=3, hidden=3, classes=3)))

    net = network()
    net.initialize(mx.init.Xavier())
    net.nested.save_parameters(str(tmp_path / "nested.params"))
    net2 = network()
    net2.initialize(mx.init.Xavier())
    before = _values(net2)
    assert P.load_into(net2, tmp_path / "nested.params", strict=strict) == "nested."
    after = _values(net2)
    _assert_same(_values(net.nested), {n[len("nested."):]: v for n, v in after.items()
                                       if n.startswith("nested.")})
    _assert_same(before, after, [n for n in before if not n.startswith("nested.")])


def test_a_file_that_fits_several_sub_blocks_is_refused_naming_them(tmp_path):
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=3), nn.Dense(3, in_units=3))
    net.initialize()
    net[1].save_parameters(str(tmp_path / "layer.params"))
    before = _values(net)
    with pytest.raises(ValueError, match=r"block\[0\].*block\[1\].*load_into\(block\[0\]"):
        P.load_into(net, tmp_path / "layer.params")
    _assert_same(before, _values(net))
    assert P.load_into(net[1], tmp_path / "layer.params") == ""


def test_load_into_ambiguous_and_shape_chosen_prefixes(tmp_path):
    twins = _Whole(a=_mlp(in_units=3, hidden=3), b=_mlp(in_units=3, hidden=3))
    twins.initialize()
    twins.save_parameters(str(tmp_path / "twins.params"))
    fresh = _mlp(in_units=3, hidden=3)
    fresh.initialize()
    before = _values(fresh)
    with pytest.raises(ValueError, match=r"'a\.', 'b\.'.*prefix='a\.'"):
        P.load_into(fresh, tmp_path / "twins.params")
    _assert_same(before, _values(fresh))
    assert P.load_into(fresh, tmp_path / "twins.params", prefix="b") == "b."
    _assert_same(_values(twins.b), _values(fresh))

    # same names, different shapes: the block whose shapes fit is the one
    mixed = _Whole(a=_mlp(in_units=3, hidden=4), b=_mlp(in_units=3, hidden=3))
    mixed.initialize()
    mixed.save_parameters(str(tmp_path / "mixed.params"))
    assert P.load_into(fresh, tmp_path / "mixed.params") == "b."
    _assert_same(_values(mixed.b), _values(fresh))


def test_load_into_reports_shapes_names_and_dtypes(tmp_path):
    source = _mlp(in_units=4, hidden=5, classes=5, layers=3)
    source.initialize()
    path = tmp_path / "source.params"
    source.save_parameters(str(path))
    saved = _values(source)

    wrong = _mlp(in_units=4, hidden=6, classes=5, layers=3)
    wrong.initialize()
    before = _values(wrong)
    for strict in (True, False):                    # shapes are always checked
        with pytest.raises(ValueError, match=r"'0.weight' has shape \(6, 4\).*"
                                             r"'0.weight' with shape \(5, 4\)"):
            P.load_into(wrong, path, strict=strict)
    _assert_same(before, _values(wrong))

    longer = _mlp(in_units=4, hidden=5, classes=5, layers=4)
    longer.initialize()
    before = _values(longer)
    with pytest.raises(ValueError, match=r"missing in the file: '3.weight', '3.bias'"):
        P.load_into(longer, path)
    _assert_same(before, _values(longer))
    assert P.load_into(longer, path, strict=False) == ""
    _assert_same(saved, _values(longer))
    _assert_same(before, _values(longer), ["3.weight", "3.bias"])

    shorter = _mlp(in_units=4, hidden=5, classes=5, layers=2)
    shorter.initialize()
    before = _values(shorter)
    with pytest.raises(ValueError, match=r"in the file but not in the block: '2.weight', '2.bias'"):
        P.load_into(shorter, path)
    _assert_same(before, _values(shorter))
    assert P.load_into(shorter, path, strict=False) == ""
    _assert_same(saved, _values(shorter), list(_values(shorter)))

    half = _mlp(in_units=4, hidden=5, classes=5, layers=3)
    half.initialize()
    half.cast("float16")
    with pytest.raises(ValueError, match=r"float16 but .* as float32; cast the block first"):
        P.load_into(half, path)


def test_load_into_bad_files_change_nothing(tmp_path):
    net = _mlp()
    net.initialize()
    before = _values(net)
    with pytest.raises(FileNotFoundError, match="nowhere.params"):
        P.load_into(net, tmp_path / "nowhere.params")
    (tmp_path / "text.params").write_text("not parameters\n" * 10)
    with pytest.raises(ValueError, match="not an MXNet parameter file"):
        P.load_into(net, tmp_path / "text.params")
    nd.save(str(tmp_path / "list.params"), [nd.ones((6, 4))])
    with pytest.raises(ValueError, match="no named arrays"):
        P.load_into(net, tmp_path / "list.params")
    nd.save(str(tmp_path / "unrelated.params"), {"foo.gamma": nd.ones(3)})
    with pytest.raises(ValueError, match=r"none of the block's parameter names.*'foo.gamma'"):
        P.load_into(net, tmp_path / "unrelated.params")
    _assert_same(before, _values(net))


def test_load_into_deferred_shared_and_contexts(tmp_path):
    source = _mlp()
    source.initialize()
    path = tmp_path / "source.params"
    source.save_parameters(str(path))
    saved = _values(source)

    deferred = _mlp(in_units=None)          # first weight waits for its input size
    deferred.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    P.load_into(deferred, path)
    on_both = {name: copies * 2 for name, copies in saved.items()}   # one copy per context
    _assert_same(on_both, _values(deferred))
    x = nd.array(np.random.randn(2, 4))
    assert_allclose(deferred(x).asnumpy(), source(x).asnumpy(), rtol=1e-6)

    never = _mlp()                          # never initialized: ctx says where
    P.load_into(never, path, ctx=mx.cpu(1))
    assert never[0].weight.list_ctx() == [mx.cpu(1)]
    _assert_same(saved, _values(never))
    with pytest.raises(ValueError, match=r"lives on \[cpu\(1\)\].*reset_ctx"):
        P.load_into(never, path, ctx=mx.cpu(0))

    shared = nn.HybridSequential()
    first = nn.Dense(4, in_units=4)
    shared.add(first, nn.Dense(4, in_units=4, params=first.params))
    shared.initialize()
    shared.save_parameters(str(tmp_path / "shared.params"), deduplicate=True)
    assert len(nd.load(str(tmp_path / "shared.params"))) == 2
    copy = nn.HybridSequential()
    copy_first = nn.Dense(4, in_units=4)
    copy.add(copy_first, nn.Dense(4, in_units=4, params=copy_first.params))
    copy.initialize()
    assert P.load_into(copy, tmp_path / "shared.params") == ""
    _assert_same(_values(shared), _values(copy))


def test_summary_deferred_network():
    net = _mlp(in_units=None, hidden=5, classes=2)
    net.initialize()
    table = P.summary(net)
    lines = table.splitlines()
    assert lines[0].split() == ["name", "shape", "size", "grad_req", "lr_mult", "wd_mult",
                                "initialized"]
    assert lines[1].split() == ["0.weight", "(5,", "?)", "?", "write", "1", "1", "deferred"]
    assert lines[2].split() == ["0.bias", "(5,)", "5", "write", "1", "1", "yes"]
    assert lines[-1] == ("total: 17 values in 4 parameters (17 trainable, 0 not trainable); "
                         "1 of unknown size")

    net(nd.ones((3, 7)))
    P.freeze(net, r"^1\.")
    P.set_lr_mult(net, 2.5, r"^0\.")
    lines = P.summary(net).splitlines()
    assert lines[1].split() == ["0.weight", "(5,", "7)", "35", "write", "2.5", "1", "yes"]
    assert lines[3].split() == ["1.weight", "(2,", "5)", "10", "null", "1", "1", "yes"]
    assert lines[-1] == "total: 52 values in 4 parameters (40 trainable, 12 not trainable)"


def test_summary_of_a_model_zoo_network():
    net = gluoncv.model_zoo.get_model("cifar_resnet20_v1", pretrained=False)
    params = dict(net.collect_params().items())
    assert "no" in P.summary(net).splitlines()[1].split()       # not initialized yet
    net.initialize()
    net(nd.zeros((1, 3, 32, 32)))
    lines = P.summary(net).splitlines()
    assert len(lines) == len(params) + 2
    total = sum(p.data().size for p in params.values())
    trainable = sum(p.data().size for p in params.values() if p.grad_req != "null")
    assert lines[-1] == (f"total: {total:,} values in {len(params)} parameters "
                         f"({trainable:,} trainable, {total - trainable:,} not trainable)")
    assert lines[1].split()[:4] == ["features.0.weight", "(16,", "3,", "3,"]


def test_gluoncv_fine_tuning(tmp_path):
    """Pretrained backbone, frozen; a new head with lr_mult 10; two SGD steps."""
    pretrained = gluoncv.model_zoo.get_model("cifar_resnet20_v1", pretrained=False)
    pretrained.initialize(mx.init.Xavier())
    pretrained(nd.zeros((1, 3, 32, 32)))
    pretrained.save_parameters(str(tmp_path / "cifar_resnet20_v1.params"))

    net = gluoncv.model_zoo.get_model("cifar_resnet20_v1", pretrained=False)
    assert P.load_into(net.features, tmp_path / "cifar_resnet20_v1.params") == "features."
    with net.name_scope():
        net.output = nn.Dense(5)                           # a new head for 5 classes
    net.output.initialize(mx.init.Xavier())
    P.freeze(net.features)
    P.set_lr_mult(net.output, 10)
    lr = 0.01
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": lr})

    backbone = _values(net.features)
    _assert_same(_values(pretrained.features), backbone)
    for _ in range(2):
        x = nd.array(np.random.rand(4, 3, 32, 32))
        y = nd.array(np.random.randint(0, 5, 4))
        with autograd.record():
            with autograd.predict_mode():                  # BatchNorm keeps its statistics
                features = net.features(x)
            loss = LOSS(net.output(features), y)
        loss.backward()
        head = {n: (p.data().asnumpy(), p.grad().asnumpy())
                for n, p in P.select(net.output).items()}
        assert trainer.step(4)
        for name, p in P.select(net.output).items():
            w, g = head[name]
            assert np.abs(g).sum() > 0
            assert_allclose(p.data().asnumpy(), w - lr * 10 * g / 4, rtol=1e-5, atol=1e-7,
                            err_msg=name)
    _assert_same(backbone, _values(net.features))


@pytest.mark.parametrize("ctx", ["cpu", ["cpu(0)"], mx.cpu, 0],
                         ids=["str", "str-list", "function", "int"])
def test_load_into_with_a_context_that_is_not_one_changes_nothing(tmp_path, ctx):
    source = _mlp()
    source.initialize()
    source.save_parameters(str(tmp_path / "source.params"))
    never = _mlp()
    with pytest.raises(TypeError) as err:
        P.load_into(never, tmp_path / "source.params", ctx=ctx)
    assert repr(ctx) in str(err.value) and "pass mx.cpu()" in str(err.value)
    assert {state for *_, state in _summary_rows(never)} == {"no"}
    with pytest.raises(ValueError, match=r"twice: \[cpu\(0\), cpu\(0\)\]"):
        P.load_into(never, tmp_path / "source.params", ctx=[mx.cpu(0), mx.cpu(0)])
    with pytest.raises(ValueError, match=r"ctx is empty; pass at least one context"):
        P.load_into(never, tmp_path / "source.params", ctx=[])
    with pytest.raises(TypeError, match="strict must be True or False"):
        P.load_into(never, tmp_path / "source.params", strict="no")
    with pytest.raises(TypeError, match="filename must be a path"):
        P.load_into(never, None)
    assert {state for *_, state in _summary_rows(never)} == {"no"}
    P.load_into(never, tmp_path / "source.params", ctx=(mx.cpu(1),))     # a tuple works
    assert never[0].weight.list_ctx() == [mx.cpu(1)]
    _assert_same(_values(source), _values(never))


def _summary_rows(block):
    """The rows of ``summary``'s table, split into cells."""
    return [line.split() for line in P.summary(block).splitlines()[1:-1]]


def test_the_freeze_advice_keeps_batchnorm_statistics_with_exact_input_gradients():
    # freeze's docstring advised autograd.predict_mode(), which gives BatchNorm wrong input
    # gradients in MXNet 1.9.1 (docs/branches.md warns against it); it now names
    # freeze_batchnorm, which keeps the statistics and gives the analytic gradient
    assert "predict_mode()`` to keep" not in P.freeze.__doc__
    assert "gluonkit.nn.freeze_batchnorm(block)" in P.freeze.__doc__
    backbone = nn.HybridSequential()
    backbone.add(nn.BatchNorm(in_channels=4))
    backbone.initialize()
    rng = np.random.RandomState(0)
    for name, value in [("gamma", rng.rand(4) + 0.5), ("running_mean", rng.randn(4)),
                        ("running_var", rng.rand(4) + 0.5)]:
        getattr(backbone[0], name).set_data(nd.array(value))
    P.freeze(backbone)
    gluonkit.nn.freeze_batchnorm(backbone)
    stats = _values(backbone)
    x = nd.array(rng.randn(3, 4, 2, 2))
    x.attach_grad()
    with autograd.record():
        y = backbone(x)
    y.backward()
    gamma, var = backbone[0].gamma.data().asnumpy(), backbone[0].running_var.data().asnumpy()
    expected = np.broadcast_to((gamma / np.sqrt(var + 1e-5)).reshape(1, 4, 1, 1), x.shape)
    assert_allclose(x.grad.asnumpy(), expected, rtol=1e-5)
    _assert_same(stats, _values(backbone))


def test_summary_shows_wd_mult_beside_lr_mult():
    # summary() showed lr_mult but not wd_mult, so set_wd_mult could not be checked in it
    net = _mlp()
    net.initialize()
    assert P.set_wd_mult(net, 0, "bias$") == ["0.bias", "1.bias"]
    P.set_lr_mult(net, 10, r"^1\.")
    header, *rows = P.summary(net).splitlines()[:-1]
    columns = header.split()
    table = {row.split()[0]: dict(zip(columns, row.replace(", ", ",").split())) for row in rows}
    assert {n: (r["lr_mult"], r["wd_mult"]) for n, r in table.items()} == {
        "0.weight": ("1", "1"), "0.bias": ("1", "0"), "1.weight": ("10", "1"), "1.bias": ("10", "0")}


def test_freeze_names_are_relative_to_the_block_passed():
    """As documented: names as select(block) gives them; a pattern on the network gives full ones."""
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.features = gluon.nn.HybridSequential()
        net.features.add(gluon.nn.Dense(3, in_units=2))
        net.output = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    assert P.freeze(net.features) == list(P.select(net.features)) == ["0.weight", "0.bias"]
    P.unfreeze(net.features)
    assert P.freeze(net, r"^features\.") == ["features.0.weight", "features.0.bias"]
