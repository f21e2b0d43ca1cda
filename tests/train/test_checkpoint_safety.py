"""A checkpoint runs no code when loaded: JSON and arrays without pickle; planted files refused in
one line (Checkpoint.load, --resume, --export); the previous format only with trusted=True."""
import io
import json
import os
import pickle
import zipfile

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import params_of
from gluonkit.train._archive import write_archive
from gluonkit.callbacks import ModelCheckpoint
from gluonkit.train.checkpoint import Checkpoint, CheckpointError
from small_classifier import assert_same, batches, make_net, make_trainer, train

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def hostile_pickle(marker):
    """A pickle stream, written by hand in protocol 0, that calls ``os.mkdir(marker)`` when it
    is unpickled: the proof that code from a file ran."""
    return b"cos\nmkdir\n(V" + str(marker).encode() + b"\ntR."


def planted_legacy(path, marker):
    """A checkpoint of the previous format (version 2, pickled members, a valid digest) whose
    state.pkl runs ``os.mkdir(marker)`` when unpickled."""
    meta = {"format": "gluonkit-checkpoint", "version": 2, "epoch": 1, "step": 0, "params": {}}
    arrays = io.BytesIO()
    np.savez(arrays)
    blob = write_archive({"params.npz": arrays.getvalue(), "state.pkl": hostile_pickle(marker),
                          "meta.json": json.dumps(meta).encode()})
    path.write_bytes(blob)


def planted_array(path, marker, net):
    """A checkpoint of this format whose parameter array is a pickled object array."""
    params = gluonkit.params.select(net)
    meta = {"format": "gluonkit-checkpoint", "version": 3, "epoch": 1, "step": 0, "trainer": None,
            "state": {}, "rng": None,
            "params": {name: [list(p.shape), "float32", 1] for name, p in params.items()}}
    members = {}
    for name, p in params.items():
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": "|O", "fortran_order": False, "shape": (1,)})
        buf.write(hostile_pickle(marker))   # an object array's data is a pickle stream
        members[f"params/{name}.npy"] = buf.getvalue()
    members["meta.json"] = json.dumps(meta).encode()
    path.write_bytes(write_archive(members))


@pytest.mark.parametrize("plant", [planted_legacy, planted_array])
def test_a_planted_checkpoint_runs_no_code_and_the_error_is_one_line(tmp_path, plant):
    net = make_net([mx.cpu()])
    before = params_of(net)
    marker = tmp_path / "ran"
    planted = tmp_path / "ck" / "000001-epoch0001.ckpt"
    planted.parent.mkdir()
    plant(planted, marker) if plant is planted_legacy else plant(planted, marker, net)
    with pytest.raises(CheckpointError) as error:
        Checkpoint(tmp_path / "ck").load(net, make_trainer(net))
    assert not marker.exists()
    assert str(planted) in str(error.value) and "\n" not in str(error.value)
    if plant is planted_legacy:
        assert "previous format" in str(error.value) and "trusted=True" in str(error.value)
    assert_same(params_of(net), before)


def test_even_a_trusted_checkpoint_of_the_previous_format_runs_no_function_it_names(tmp_path):
    net = make_net([mx.cpu()])
    marker = tmp_path / "ran"
    planted = tmp_path / "old.ckpt"
    planted_legacy(planted, marker)
    with pytest.raises(CheckpointError,
                       match=r"old\.ckpt.*names os\.mkdir, which no gluonkit checkpoint holds"):
        Checkpoint(tmp_path).load(net, path=planted, trusted=True)
    assert not marker.exists()


@pytest.mark.parametrize("option", ["--resume", "--export"])
def test_a_planted_checkpoint_in_a_run_folder_runs_no_code(tmp_path, option):
    from gluonkit.recipes import classify

    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    marker = tmp_path / "ran"
    planted_legacy(out / "checkpoints" / "000001-epoch0001.ckpt", marker)
    with pytest.raises(SystemExit) as stop:
        classify.main(["--limit", "32", "--batch-size", "16", "--epochs", "2", "--out", str(out), option])
    message = str(stop.value.code)
    assert not marker.exists()
    assert message.startswith("gluonkit-classify: Checkpoint ") and "previous format" in message
    assert "\n" not in message


def test_a_file_holds_only_json_and_plain_arrays(tmp_path):
    net = make_net([mx.cpu(0), mx.cpu(1)])
    trainer = make_trainer(net, accumulate=3)
    train(net, trainer, batches([5, 6, 4, 3]), [mx.cpu(0), mx.cpu(1)])
    path = Checkpoint(tmp_path).save(net, trainer, 1, note={"a": [1, 2.5]}, weights=np.ones(3))
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert "meta.json" in names and all(n == "meta.json" or n.endswith(".npy") for n in names)
        json.loads(zf.read("meta.json"))
        for name in [n for n in names if n.endswith(".npy")]:
            with zf.open(name) as f:
                assert np.lib.format.read_magic(f) == (1, 0)
                _, _, dtype = np.lib.format.read_array_header_1_0(f)
                assert not dtype.hasobject, name


def test_loading_needs_no_unpickling(tmp_path, monkeypatch):
    ctx = [mx.cpu()]
    data = batches([6, 5, 7, 4, 6])
    net = make_net(ctx)
    trainer = make_trainer(net, accumulate=2)
    train(net, trainer, data[:3], ctx)
    Checkpoint(tmp_path).save(net, trainer, 0)
    train(net, trainer, data[3:], ctx)

    def refuse(*args, **kwargs):
        raise AssertionError("unpickling while loading a checkpoint")

    other = make_net(ctx, init_seed=9)
    other_trainer = make_trainer(other, accumulate=2)
    with monkeypatch.context() as patched:
        for name in ("loads", "load", "Unpickler"):
            patched.setattr(pickle, name, refuse)
        Checkpoint(tmp_path).load(other, other_trainer)
    train(other, other_trainer, data[3:], ctx)
    assert_same(params_of(other), params_of(net))


def test_an_array_that_claims_more_than_it_holds_is_refused(tmp_path):
    net = make_net([mx.cpu()])
    path = Checkpoint(tmp_path).save(net, None, 1)
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    name = next(n for n in members if n.endswith(".npy"))
    header = np.lib.format.header_data_from_array_1_0(np.zeros((4, 8), dtype="float32"))
    header["shape"] = (4 * 10 ** 9, 8)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    members[name] = buf.getvalue() + members[name][-128:]
    forged = tmp_path / "forged.ckpt"
    forged.write_bytes(write_archive(members))
    with pytest.raises(CheckpointError, match=r"forged.ckpt.*declares \(4000000000, 8\) float32"):
        Checkpoint(tmp_path).load(net, path=forged)


def legacy_run(directory, epochs):
    """The run that wrote fixtures/legacy-v2-fit.ckpt (an earlier gluonkit), stopped by SIGINT
    after batch 2 of epoch 2."""
    rng = np.random.RandomState(4)
    x = rng.randn(40, 4).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32") + (x[:, 0] > 1)
    np.random.seed(0)
    mx.random.seed(1)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, activation="relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier())
    trainer = gluonkit.Trainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, accumulate=2)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=6, shuffle=True)
    cbs = [ModelCheckpoint(directory, resume=True)] if directory else []
    history = gluonkit.fit(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer, loader, epochs=epochs,
                           metrics="acc", callbacks=cbs, progress=False)
    return net, history


def test_a_checkpoint_of_the_previous_format_converts_with_trusted(tmp_path):
    """Loaded with trusted=True and saved again, a mid-epoch checkpoint of the previous format
    resumes exactly: parameters, optimizer, window, generators, metric sums."""
    legacy = os.path.join(FIXTURES, "legacy-v2-fit.ckpt")
    straight, history = legacy_run(None, 3)
    net, _ = legacy_run(None, 0)
    trainer = gluonkit.Trainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, accumulate=2)
    with pytest.raises(CheckpointError, match="previous format"):
        Checkpoint(tmp_path).load(net, trainer, path=legacy)
    state = Checkpoint(tmp_path).load(net, trainer, path=legacy, trusted=True)
    epoch, _ = state.pop("epoch"), state.pop("step")
    Checkpoint(tmp_path / "ck").save(net, trainer, epoch, **state)
    resumed, resumed_history = legacy_run(tmp_path / "ck", 3)
    # the fixture's first steps ran on the CPU that wrote it: oneDNN's kernels for another
    # instruction set round otherwise (8e-8 measured on a CPU without AVX-512), so "exactly"
    # here is to float rounding
    expected = params_of(straight)
    for name, value in params_of(resumed).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(resumed_history["loss"], history["loss"], rtol=1e-5)
    assert resumed_history["accuracy"] == history["accuracy"]


@pytest.mark.parametrize("change, message", [
    (lambda meta: meta.update(rng=None), "not a generator state"),
    (lambda meta: meta["rng"]["numpy"].__setitem__(2, "x"), "not a generator state"),
    (lambda meta: meta.update(state=[1]), "state or parameter table is not a dict"),
    (lambda meta: meta["trainer"]["states"]["0.weight"].__setitem__("__array__", "999"), "KeyError"),
    (lambda meta: meta["params"]["0.weight"].__setitem__(2, 10 ** 9), r"entry of '0.weight' is .*copies <= 4096"),
    (lambda meta: meta["params"]["0.weight"].__setitem__(1, "float99"), "TypeError"),
])
def test_a_forged_meta_is_refused_before_anything_changes(tmp_path, change, message):
    net = make_net([mx.cpu()])
    trainer = make_trainer(net)
    train(net, trainer, batches([4, 5]), [mx.cpu()])
    path = Checkpoint(tmp_path).save(net, trainer, 1)
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    meta = json.loads(members["meta.json"])
    change(meta)
    members["meta.json"] = json.dumps(meta).encode()
    forged = tmp_path / "forged.ckpt"
    forged.write_bytes(write_archive(members))
    other = make_net([mx.cpu()], init_seed=4)
    before = params_of(other)
    state = np.random.get_state()[1].copy()
    with pytest.raises(CheckpointError, match=f"forged.ckpt.*{message}"):
        Checkpoint(tmp_path).load(other, make_trainer(other), path=forged)
    assert_same(params_of(other), before)
    np.testing.assert_array_equal(np.random.get_state()[1], state)
