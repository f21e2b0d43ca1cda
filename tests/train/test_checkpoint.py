"""Checkpoint: exact round trips (parameters, optimizer, window, generators), refusals, atomicity."""
import os
import random

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from conftest import params_of
from small_classifier import assert_same, batches, make_net, make_trainer, train
from gluonkit.train.checkpoint import Checkpoint
from gluonkit.train.resume import get_rng_state, reseed_mxnet, seed_all, set_rng_state
from gluonkit.trainer import Trainer

def test_resume_equals_never_stopping(tmp_path, ctx_list):
    data = batches([6, 5, 7, 4, 6, 3])
    net = make_net(ctx_list)
    trainer = make_trainer(net)
    train(net, trainer, data[:3], ctx_list)
    ckpt = Checkpoint(tmp_path / "ck")
    ckpt.save(net, trainer, 1, note="half", numbers=[1, 2])
    at_save = params_of(net)
    after_save = (random.random(), np.random.rand())
    train(net, trainer, data[3:], ctx_list)
    straight = params_of(net)

    other = make_net(ctx_list, init_seed=99)
    other_trainer = make_trainer(other)
    random.seed(5), np.random.seed(5), mx.random.seed(5)
    state = ckpt.load(other, other_trainer)
    assert state == {"note": "half", "numbers": [1, 2], "epoch": 1, "step": 3}
    assert_same(params_of(other), at_save)
    assert (random.random(), np.random.rand()) == after_save
    train(other, other_trainer, data[3:], ctx_list)     # momentum and update counts were restored
    assert_same(params_of(other), straight)


def test_pending_accumulation_window_is_saved_and_restored(tmp_path, ctx_list):
    data = batches([5, 3, 4, 6, 2])
    net = make_net(ctx_list)
    trainer = make_trainer(net, accumulate=3)
    train(net, trainer, data[:2], ctx_list)
    assert trainer.pending == (2, 8)
    ckpt = Checkpoint(tmp_path)
    ckpt.save(net, trainer, 0)
    train(net, trainer, data[2:], ctx_list)
    trainer.flush()
    straight = params_of(net)

    other = make_net(ctx_list, init_seed=3)
    other_trainer = make_trainer(other, accumulate=3)
    ckpt.load(other, other_trainer)
    assert other_trainer.pending == (2, 8)
    train(other, other_trainer, data[2:], ctx_list)
    other_trainer.flush()
    assert_same(params_of(other), straight)


def test_window_from_two_devices_resumes_on_one(tmp_path):
    two, one = [mx.cpu(0), mx.cpu(1)], [mx.cpu(0)]
    data = batches([5, 3, 4])
    net = make_net(two)
    trainer = make_trainer(net, accumulate=3)
    train(net, trainer, data[:2], two)
    Checkpoint(tmp_path).save(net, trainer, 0)
    train(net, trainer, data[2:], two)
    reference = params_of(net)

    other = make_net(one, init_seed=3)
    other_trainer = make_trainer(other, accumulate=3)
    Checkpoint(tmp_path).load(other, other_trainer)
    train(other, other_trainer, data[2:], one)
    for k, v in params_of(other).items():
        np.testing.assert_allclose(v, reference[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_window_needs_the_same_accumulate(tmp_path):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net, accumulate=3)
    train(net, trainer, batches([4]), [mx.cpu()])
    Checkpoint(tmp_path).save(net, trainer, 0)
    other = make_net([mx.cpu()], init_seed=3)
    before = params_of(other)
    other_trainer = make_trainer(other, accumulate=2)
    names = list(other_trainer.params)
    with pytest.raises(ValueError, match="accumulate=3"):
        Checkpoint(tmp_path).load(other, other_trainer)
    assert_same(params_of(other), before)
    assert list(other_trainer.params) == names   # not even renamed


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_file_is_refused_and_net_unchanged(tmp_path, damage):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    path = Checkpoint(tmp_path).save(net, trainer, 1)
    blob = bytearray(open(path, "rb").read())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    else:
        blob[len(blob) // 3] ^= 0xFF
    open(path, "wb").write(bytes(blob))
    other = make_net([mx.cpu()], init_seed=3)
    before = params_of(other)
    with pytest.raises(ValueError, match="corrupted or truncated") as info:
        Checkpoint(tmp_path).load(other, make_trainer(other))
    assert os.path.basename(path) in str(info.value)
    assert_same(params_of(other), before)


@pytest.mark.parametrize("change, message", [
    ({"hidden": 5}, r"0\.weight has shape \(8, 4\) in the checkpoint but \(5, 4\)"),
    ({"extra": True}, r"the network has parameters the checkpoint lacks: '2\.bias', '2\.weight'"),
])
def test_other_network_is_refused_and_unchanged(tmp_path, change, message):
    net = make_net([mx.cpu()])
    Checkpoint(tmp_path).save(net, make_trainer(net), 1)
    other = make_net([mx.cpu()], init_seed=3, **change)
    before = params_of(other)
    with pytest.raises(ValueError, match=message):
        Checkpoint(tmp_path).load(other, make_trainer(other))
    assert_same(params_of(other), before)


def test_other_optimizer_is_refused(tmp_path):
    net = make_net([mx.cpu()])
    Checkpoint(tmp_path).save(net, make_trainer(net), 1)
    other = make_net([mx.cpu()], init_seed=3)
    before = params_of(other)
    with pytest.raises(ValueError, match="SGD optimizer states but the trainer uses Adam"):
        Checkpoint(tmp_path).load(other, make_trainer(other, optimizer="adam"))
    assert_same(params_of(other), before)
    Checkpoint(tmp_path).load(other)        # parameters only
    assert_same(params_of(other), params_of(net))


def test_trainer_over_other_parameters_is_refused(tmp_path):
    net = make_net([mx.cpu()])
    Checkpoint(tmp_path).save(net, make_trainer(net), 1)
    other = make_net([mx.cpu()], init_seed=3)
    before = params_of(other)
    partial = Trainer(other[1].collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    with pytest.raises(ValueError, match="trainer of 4 parameters .* but this trainer has 2"):
        Checkpoint(tmp_path).load(other, partial)
    assert_same(params_of(other), before)


def test_trainer_states_follow_structural_names_not_gluon_prefixes(tmp_path):
    """gluon.Trainer sorts by prefixed name: 'a_' < 'b_' in one build, the reverse in another."""
    def build(prefixes, seed):
        mx.random.seed(seed)
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(8, in_units=4, activation="relu", prefix=prefixes[0]),
                gluon.nn.Dense(3, in_units=8, prefix=prefixes[1]))
        net.initialize(mx.init.Xavier())
        return net, make_trainer(net)

    data = batches([6, 5, 7, 4])
    net, trainer = build(("a_", "b_"), 1)
    train(net, trainer, data[:2], [mx.cpu()])
    Checkpoint(tmp_path).save(net, trainer, 1)
    train(net, trainer, data[2:], [mx.cpu()])
    other, other_trainer = build(("d_", "c_"), 2)
    Checkpoint(tmp_path).load(other, other_trainer)
    train(other, other_trainer, data[2:], [mx.cpu()])
    assert_same(params_of(other), params_of(net))


def test_loads_into_deferred_parameters(tmp_path):
    net = make_net([mx.cpu()])
    Checkpoint(tmp_path).save(net, None, 0)
    deferred = gluon.nn.HybridSequential()
    deferred.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.Dense(3))
    deferred.initialize()
    Checkpoint(tmp_path).load(deferred)
    assert_same(params_of(deferred), params_of(net))


def test_keeps_last_k_and_the_best(tmp_path):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    ckpt = Checkpoint(tmp_path, keep=2)
    saved = {}
    for epoch in range(1, 6):
        train(net, trainer, batches([4], seed=epoch), [mx.cpu()])
        ckpt.save(net, trainer, epoch, best=epoch == 2)
        saved[epoch] = params_of(net)
    last_two = ["000004-epoch0004.ckpt", "000005-epoch0005.ckpt"]
    assert [os.path.basename(p) for p in ckpt.paths] == last_two
    assert sorted(os.listdir(tmp_path)) == last_two + ["best.ckpt"]
    assert ckpt.load(net, trainer, best=True)["epoch"] == 2
    assert_same(params_of(net), saved[2])
    assert ckpt.load(net, trainer)["epoch"] == 5
    assert_same(params_of(net), saved[5])


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    ckpt = Checkpoint(tmp_path)
    ckpt.save(net, trainer, 1)
    good = params_of(net)
    train(net, trainer, batches([4]), [mx.cpu()])

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(net, trainer, 2)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["000001-epoch0001.ckpt"]     # no temporary file left
    assert ckpt.load(net, trainer)["epoch"] == 1
    assert_same(params_of(net), good)


def test_user_errors(tmp_path):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="is an existing file"):
        Checkpoint(a_file)
    with pytest.raises(ValueError, match=r"keep \(checkpoints to keep\) must be a positive integer"):
        Checkpoint(tmp_path, keep=0)
    with pytest.raises(FileNotFoundError, match="No checkpoint in"):
        Checkpoint(tmp_path / "empty").load(net, trainer)
    with pytest.raises(ValueError, match="reserved"):
        Checkpoint(tmp_path).save(net, trainer, 1, step=3)
    with pytest.raises(ValueError, match=r"epoch \(epochs completed\) must be an integer >= 0"):
        Checkpoint(tmp_path).save(net, trainer, -1)
    deferred = gluon.nn.Dense(3)
    deferred.initialize()
    with pytest.raises(RuntimeError, match="not initialized yet"):
        Checkpoint(tmp_path).save(deferred, None, 0)
    with pytest.raises(TypeError, match="trainer must be a gluonkit.Trainer"):
        Checkpoint(tmp_path / "plain").save(net, gluon.Trainer(net.collect_params(), "sgd"), 0)
    assert not os.path.exists(tmp_path / "plain")
    Checkpoint(tmp_path / "bare").save(net, None, 0)
    with pytest.raises(ValueError, match="saved without a trainer; load it with trainer=None"):
        Checkpoint(tmp_path / "bare").load(net, trainer)


def test_rng_helpers_round_trip():
    state = get_rng_state()
    first = (random.random(), np.random.rand())
    set_rng_state(state)
    assert (random.random(), np.random.rand()) == first
    set_rng_state(state)
    seed = reseed_mxnet(salt=4)
    a = mx.nd.random.uniform(shape=(4,)).asnumpy()
    assert reseed_mxnet(salt=4) == seed != reseed_mxnet(salt=5)     # reads, does not advance
    mx.random.seed(seed)
    np.testing.assert_array_equal(mx.nd.random.uniform(shape=(4,)).asnumpy(), a)


def test_seed_all_fixes_python_numpy_and_mxnet_draws():
    def draws(seed):
        seed_all(seed)
        return random.random(), np.random.rand(), float(mx.nd.random.uniform(shape=(1,)).asscalar())

    first = draws(3)
    assert draws(3) == first
    assert all(a != b for a, b in zip(draws(4), first))


class TwoHeads(gluon.nn.Block):
    """Head 'a' or 'b' on a shared layer; ``head`` picks one (imperative only)."""

    def __init__(self):
        super().__init__()
        self.trunk = gluon.nn.Dense(6, in_units=4, activation="relu")
        self.a = gluon.nn.Dense(3, in_units=6)
        self.b = gluon.nn.Dense(3, in_units=6)
        self.head = "a"

    def forward(self, x):
        return getattr(self, self.head)(self.trunk(x))


def test_window_keeps_a_branch_that_only_an_earlier_micro_batch_used(tmp_path):
    """Head b gets gradient only before the save: the resumed window must still update it."""
    ctx, data = [mx.cpu()], batches([4, 5, 3])

    def fresh_net(seed):
        mx.random.seed(seed)
        net = TwoHeads()
        net.initialize(mx.init.Xavier())
        return net, make_trainer(net, accumulate=3)

    def run(net, trainer, heads, part):
        for head, batch in zip(heads, part):
            net.head = head
            train(net, trainer, [batch], ctx)

    net, trainer = fresh_net(1)
    run(net, trainer, "ba", data[:2])
    Checkpoint(tmp_path).save(net, trainer, 0)
    untouched = params_of(net)["b.weight"]
    run(net, trainer, "a", data[2:])
    straight = params_of(net)
    assert not np.array_equal(straight["b.weight"], untouched)

    other, other_trainer = fresh_net(2)
    Checkpoint(tmp_path).load(other, other_trainer)
    run(other, other_trainer, "a", data[2:])
    assert_same(params_of(other), straight)


def test_save_leaves_every_generator_as_it_was(tmp_path):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    train(net, trainer, batches([4]), [mx.cpu()])
    mx.random.seed(11), np.random.seed(11), random.seed(11)
    Checkpoint(tmp_path).save(net, trainer, 1)
    after_save = (random.random(), np.random.rand(), mx.nd.random.uniform(shape=(3,)).asnumpy())
    mx.random.seed(11), np.random.seed(11), random.seed(11)
    unsaved = (random.random(), np.random.rand(), mx.nd.random.uniform(shape=(3,)).asnumpy())
    assert after_save[:2] == unsaved[:2]
    np.testing.assert_array_equal(after_save[2], unsaved[2])


def _refuse_writes(monkeypatch):
    """Make every way of writing a file raise, as a read-only directory or a full disk would."""
    real_open, real_os_open = open, os.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wxa+"):
            raise OSError(28, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(28, "No space left on device")
        return real_os_open(path, flags, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("builtins.open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    for name in ("link", "replace", "rename", "remove", "unlink", "mkdir", "makedirs"):
        monkeypatch.setattr(os, name, refuse)


def test_load_reads_only_from_any_directory(tmp_path, monkeypatch, ctx_list):
    data = batches([5, 3, 4])
    net = make_net(ctx_list)
    trainer = make_trainer(net, accumulate=2)
    train(net, trainer, data[:1], ctx_list)
    path = Checkpoint(tmp_path / "elsewhere").save(net, trainer, 1, note="x")
    train(net, trainer, data[1:], ctx_list)
    straight = params_of(net)
    listing = sorted(os.listdir(tmp_path / "elsewhere"))

    other = make_net(ctx_list, init_seed=3)
    other_trainer = make_trainer(other, accumulate=2)
    _refuse_writes(monkeypatch)
    state = Checkpoint(tmp_path / "no-such-dir").load(other, other_trainer, path=path)
    monkeypatch.undo()
    assert state["note"] == "x"
    assert sorted(os.listdir(tmp_path / "elsewhere")) == listing
    assert not os.path.exists(tmp_path / "no-such-dir")
    train(other, other_trainer, data[1:], ctx_list)
    assert_same(params_of(other), straight)


def test_every_flipped_byte_is_a_value_error_naming_the_file(tmp_path):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net, accumulate=2)
    train(net, trainer, batches([4]), [mx.cpu()])
    path = Checkpoint(tmp_path / "good").save(net, trainer, 1)
    blob = open(path, "rb").read()
    other = make_net([mx.cpu()], init_seed=3)
    other_trainer = make_trainer(other, accumulate=2)
    before = params_of(other)
    damaged = str(tmp_path / "damaged.ckpt")
    # every byte of the archive's directory and end record, and a spread over the members
    offsets = sorted(set(range(0, len(blob), 97)) | set(range(max(0, len(blob) - 600), len(blob))))
    for offset in offsets:
        flipped = bytearray(blob)
        flipped[offset] ^= 0x01 << (offset % 8)
        with open(damaged, "wb") as f:
            f.write(bytes(flipped))
        with pytest.raises(ValueError, match="damaged.ckpt") as info:
            Checkpoint(tmp_path).load(other, other_trainer, path=damaged)
        assert "corrupted or truncated" in str(info.value), offset
    for cut in (0, 10, len(blob) // 2, len(blob) - 1):
        with open(damaged, "wb") as f:
            f.write(blob[:cut])
        with pytest.raises(ValueError, match="damaged.ckpt"):
            Checkpoint(tmp_path).load(other, other_trainer, path=damaged)
    assert_same(params_of(other), before)
    assert other_trainer.pending == (0, 0)


@pytest.mark.parametrize("value, where", [
    (lambda: 0, r"state\['callback'\] is a function"),
    ({"a": [1, object()]}, r"state\['callback'\]\['a'\]\[1\] is a object"),
    ({1: 2}, r"state\['callback'\] has the key 1"),
    (np.array([None]), r"state\['callback'\] is an array of Python objects"),
])
def test_state_that_is_not_json_or_arrays_is_named_and_nothing_is_written(tmp_path, value, where):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    with pytest.raises(TypeError, match=where + ".*which a checkpoint does not store|" + where):
        Checkpoint(tmp_path / "ck").save(net, trainer, 1, fine=[1, 2], callback=value)
    assert not os.path.exists(tmp_path / "ck")


def test_user_state_round_trips_as_json_values_and_arrays(tmp_path):
    net = make_net([mx.cpu()])
    state = {"note": "x", "n": np.int64(3), "f": np.float32(0.5), "nan": float("nan"), "flag": np.bool_(True),
             "nested": {"a": (1, [2.5, None]), "w": np.arange(6, dtype="float16").reshape(2, 3),
                        "nd": mx.nd.array([1, 2], dtype="int32")}}
    Checkpoint(tmp_path).save(net, None, 1, **state)
    back = Checkpoint(tmp_path).load(net)
    assert (back["note"], back["n"], back["f"], back["flag"]) == ("x", 3, 0.5, True)
    assert type(back["n"]) is int and np.isnan(back["nan"])
    assert back["nested"]["a"] == [1, [2.5, None]]
    np.testing.assert_array_equal(back["nested"]["w"], state["nested"]["w"])
    assert back["nested"]["w"].dtype == np.float16
    np.testing.assert_array_equal(back["nested"]["nd"], np.array([1, 2], dtype="int32"))


def test_numpy_integers_are_integers(tmp_path):
    net = make_net([mx.cpu()])
    ckpt = Checkpoint(tmp_path, keep=np.int64(2))
    assert ckpt.keep == 2 and type(ckpt.keep) is int
    path = ckpt.save(net, make_trainer(net), np.int32(4))
    assert os.path.basename(path) == "000001-epoch0004.ckpt"
    assert ckpt.load(net)["epoch"] == 4


@pytest.mark.filterwarnings("ignore:Cannot decide type")
def test_loads_into_a_fresh_symbol_block_without_shapes(tmp_path):
    net = make_net([mx.cpu()])
    net.hybridize()
    x = mx.nd.array(batches([5])[0][0])
    expected = net(x).asnumpy()
    net.export(str(tmp_path / "model"))
    exported = gluon.SymbolBlock.imports(str(tmp_path / "model-symbol.json"), ["data"],
                                         str(tmp_path / "model-0000.params"))
    Checkpoint(tmp_path / "ck").save(exported, None, 0)

    fresh = gluon.SymbolBlock(mx.sym.load(str(tmp_path / "model-symbol.json")), mx.sym.var("data"))
    assert all(p.shape is None or 0 in p.shape for p in fresh.collect_params().values())
    Checkpoint(tmp_path / "ck").load(fresh)
    np.testing.assert_array_equal(fresh(x).asnumpy(), expected)


def test_without_hard_links_names_are_still_never_reused(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    net = make_net([mx.cpu()])
    ckpt = Checkpoint(tmp_path, keep=5)
    first = ckpt.save(net, None, 1, best=True)
    # another writer took the next name meanwhile: the save must take the one after it
    open(os.path.join(tmp_path, "000002-epoch0002.ckpt"), "wb").close()
    second = ckpt.save(net, None, 2)
    assert os.path.basename(second) == "000003-epoch0002.ckpt"
    assert os.path.getsize(os.path.join(tmp_path, "000002-epoch0002.ckpt")) == 0
    assert ckpt.load(net, path=first)["epoch"] == ckpt.load(net, best=True)["epoch"] == 1
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
