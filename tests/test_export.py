"""gluonkit.export_model: files that load without gluonkit, by SymbolBlock and Module, and give
the trained network's outputs."""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from conftest import CLONE_ENV
from gluonkit.recipes import predict
from gluonkit.recipes.models import small_cnn
from gluonkit.recipes.multitask import MultiTaskNet
from triplet_net import Triplet

LOADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exported_loader.py")


def load_elsewhere(prefix, x, tmp_path, python=sys.executable):
    """The outputs of the exported model on ``x``, computed in a process without gluonkit."""
    np.save(tmp_path / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([python, LOADER, str(prefix), str(tmp_path / "x.npy")],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["gluonkit"] is False
    return [np.array(o) for o in result["block"]], [np.array(o) for o in result["module"]]


def trained_cnn(ctx):
    mx.random.seed(1)
    net = small_cnn(4)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x, y = mx.nd.random.uniform(shape=(8, 3, 10, 10)), mx.nd.array(np.arange(8) % 4)
    for _ in range(3):      # moves the weights and BatchNorm's running statistics
        xs, ys = gluonkit.split_and_load(x, ctx), gluonkit.split_and_load(y, ctx)
        with mx.autograd.record():
            losses = [gluon.loss.SoftmaxCrossEntropyLoss()(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(8)
    return net


@pytest.mark.parametrize("hybridize", [False, True])
def test_exported_cnn_predicts_like_the_trained_network_without_gluonkit(tmp_path, hybridize):
    net = trained_cnn([mx.cpu(0)])
    if hybridize:
        net.hybridize()
    x = np.random.RandomState(0).uniform(size=(5, 3, 10, 10)).astype(np.float32)
    expected = net(mx.nd.array(x)).asnumpy()
    meta = gluonkit.export_model(net, str(tmp_path / "m" / "model"), (3, 10, 10),
                                 outputs=["a", "b", "c", "d"], preprocessing={"channels": 3})
    assert sorted(os.listdir(tmp_path / "m")) == ["model-0000.params", "model-symbol.json",
                                                  "model.json", "model.onnx"]
    saved = json.loads((tmp_path / "m" / "model.json").read_text())
    assert saved["outputs"] == [{"name": "class", "classes": ["a", "b", "c", "d"]}]
    assert saved["input"] == {"name": "data", "shape": [3, 10, 10], "color": "RGB"} == meta["input"]
    block, module = load_elsewhere(tmp_path / "m" / "model", x, tmp_path)
    np.testing.assert_allclose(block[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(module[0], expected, rtol=1e-5, atol=1e-6)


def test_several_devices_export_the_mean_of_the_running_statistics(tmp_path):
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = trained_cnn(ctx)
    means = {name: np.mean([d.asnumpy() for d in p.list_data()], axis=0)
             for name, p in net.collect_params().items()}
    stats = [p for name, p in net.collect_params().items() if name.endswith("running_mean")]
    assert not np.allclose(stats[0].data(ctx[0]).asnumpy(), stats[0].data(ctx[1]).asnumpy())
    gluonkit.export_model(net, str(tmp_path / "model"), (3, 10, 10))
    saved = mx.nd.load(str(tmp_path / "model-0000.params"))
    for name, mean in means.items():
        key = ("aux:" if "running" in name else "arg:") + name
        np.testing.assert_allclose(saved[key].asnumpy(), mean, rtol=1e-6, err_msg=name)


def test_multi_output_network_exports_every_head(tmp_path):
    net = MultiTaskNet()
    net.initialize(mx.init.Xavier())
    x = np.random.RandomState(1).uniform(size=(3, 1, 8, 8)).astype(np.float32)
    expected = [o.asnumpy() for o in net(mx.nd.array(x))]
    gluonkit.export_model(net, str(tmp_path / "model"), (1, 8, 8),
                          outputs={"digit": list("0123456789"), "parity": ["even", "odd"],
                                   "aux": None})
    block, module = load_elsewhere(tmp_path / "model", x, tmp_path)
    for got in (block, module):
        assert len(got) == 3
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_list_of_lists_names_the_classes_of_each_output(tmp_path):
    """It used to be read as the class names of one output (the lists' text)."""
    net = MultiTaskNet()
    net.initialize(mx.init.Xavier())
    written = gluonkit.export_model(net, str(tmp_path / "model"), (1, 8, 8),
                                    outputs=[list("0123456789"), ["even", "odd"], None])
    assert written["outputs"] == [{"name": "output0", "classes": list("0123456789")},
                                  {"name": "output1", "classes": ["even", "odd"]},
                                  {"name": "output2", "classes": None}]
    result = gluonkit.predict(str(tmp_path / "model"), [np.zeros((1, 8, 8), np.float32)], top_k=1)[0]
    assert list(result["outputs"]) == ["output0", "output1", "output2"]
    assert result["outputs"]["output1"][0]["class"] in ("even", "odd")
    with pytest.raises(TypeError, match="outputs mixes class names and lists"):
        gluonkit.export_model(net, str(tmp_path / "other"), (1, 8, 8), outputs=["a", ["b"], None])


def test_nested_branches_export_every_head_in_order(tmp_path):
    net = gluonkit.nn.Branches(trunk=gluon.nn.Dense(12, activation="relu"))
    with net.name_scope():
        net.add("digit", gluon.nn.Dense(10))
        heads = gluonkit.nn.Branches(trunk=gluon.nn.Dense(7, activation="tanh"))
        with heads.name_scope():
            heads.add("parity", gluon.nn.Dense(2))
            heads.add("aux", gluon.nn.Dense(3))
        net.add("heads", heads)
    net.initialize(mx.init.Xavier())
    x = np.random.RandomState(1).uniform(size=(3, 6)).astype(np.float32)
    digit, (parity, aux) = net(mx.nd.array(x))                  # nested outputs
    written = gluonkit.export_model(net, str(tmp_path / "model"), (6,),
                                    outputs={"digit": None, "parity": ["even", "odd"], "aux": None})
    assert [o["name"] for o in written["outputs"]] == ["digit", "parity", "aux"]
    block, module = load_elsewhere(tmp_path / "model", x, tmp_path)
    for got in (block, module):
        assert len(got) == 3
        for a, b in zip(got, (digit, parity, aux)):
            np.testing.assert_allclose(a, b.asnumpy(), rtol=1e-5, atol=1e-6)


def test_bad_arguments_write_nothing(tmp_path):
    net = small_cnn(3)
    net.initialize()
    with pytest.raises(ValueError, match="input_shape must be"):
        gluonkit.export_model(net, str(tmp_path / "model"), (3, 0, 8))
    with pytest.raises(TypeError, match="input_shape must be .* tuple of ints.* got 8"):
        gluonkit.export_model(net, str(tmp_path / "model"), 8)
    net(mx.nd.zeros((1, 3, 8, 8)))                                      # it takes 3 channels
    with pytest.raises(ValueError, match=r"cannot run on a sample of input_shape \(1, 8, 8\)"):
        gluonkit.export_model(net, str(tmp_path / "model"), (1, 8, 8))
    with pytest.raises(ValueError, match="names 2 output.*has 1"):
        gluonkit.export_model(net, str(tmp_path / "model"), (3, 8, 8), outputs={"a": None, "b": None})
    with pytest.raises(TypeError):
        gluonkit.export_model(net, str(tmp_path / "model"), (3, 8, 8), note=object())
    with pytest.raises(ValueError, match=r"prefix .* names a directory.*model'"):
        gluonkit.export_model(net, str(tmp_path) + os.sep, (3, 8, 8))   # would write '.json'
    with pytest.raises(TypeError, match="needs a HybridBlock"):
        gluonkit.export_model(gluon.nn.Sequential(), str(tmp_path / "model"), (3, 8, 8))
    assert os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError, match="pass the prefix given to export_model"):
        gluonkit.export.read_metadata(str(tmp_path / "model"))


def test_a_full_disk_leaves_the_previous_export_whole(tmp_path):
    """A re-export that runs out of space (a file-size limit, as a full disk) changes none of
    the three files: a serving process never sees the new graph with the old parameters."""
    net = small_cnn(3)
    net.initialize(mx.init.Xavier())
    prefix = str(tmp_path / "model")
    gluonkit.export_model(net, prefix, (3, 8, 8), outputs=list("abc"))
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    assert len(before["model-symbol.json"]) < 100_000 < len(before["model-0000.params"])
    script = ("import resource, signal, sys\n"
              "import mxnet as mx\n"
              "import gluonkit\n"
              "from gluonkit.recipes.models import small_cnn\n"
              "net = small_cnn(5)\n"
              "net.initialize(mx.init.Xavier())\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))\n"
              "try:\n"
              "    gluonkit.export_model(net, sys.argv[1], (3, 8, 8), outputs=list('vwxyz'))\n"
              "except OSError as err:\n"
              "    print('OSError', err)\n")
    done = subprocess.run([sys.executable, "-c", script, prefix], capture_output=True, text=True,
                          timeout=300, env=CLONE_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "OSError" in done.stdout and "model-0000.params" in done.stdout, done.stdout
    after = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    assert after == before


def _small_export(directory, classes="abc", seed=0):
    mx.random.seed(seed)
    net = small_cnn(len(classes))
    net.initialize(mx.init.Xavier())
    prefix = str(directory / "model")
    gluonkit.export_model(net, prefix, (3, 8, 8), outputs=list(classes),
                          preprocessing={"channels": 3, "resize": [8, 8]})
    return net, prefix


def test_metadata_records_kind_and_digests_of_its_files(tmp_path):
    import hashlib

    _, prefix = _small_export(tmp_path)
    saved = json.loads((tmp_path / "model.json").read_text())
    assert saved["kind"] == "classifier" and saved["format"] == gluonkit.export.FORMAT
    for key, name in (("symbol", "model-symbol.json"), ("params", "model-0000.params")):
        assert saved["sha256"][key] == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()


def test_parameters_of_another_export_are_refused(tmp_path):
    """Two exports of one architecture: one's parameters copied over the other's would load
    and predict wrong numbers; the digest refuses them, naming the file."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, first = _small_export(tmp_path / "a", seed=1)
    _, second = _small_export(tmp_path / "b", seed=2)
    image = np.random.RandomState(0).randint(0, 256, (8, 8, 3), dtype=np.uint8)
    assert gluonkit.predict(first, [image]) != gluonkit.predict(second, [image])
    (tmp_path / "a" / "model-0000.params").write_bytes((tmp_path / "b" / "model-0000.params").read_bytes())
    with pytest.raises(gluonkit.ExportError, match="model-0000.params is not the file .*model.json "
                                                   "was exported with"):
        gluonkit.load_model(first)


def _damage(tmp_path, what):
    """Damage one file of an export in ``tmp_path``; returns the file's name."""
    metadata = tmp_path / "model.json"
    saved = json.loads(metadata.read_text())
    if what in ("params", "symbol"):
        path = tmp_path / ("model-0000.params" if what == "params" else "model-symbol.json")
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
        return path.name
    if what == "list":
        metadata.write_text(json.dumps([saved]))
    elif what == "not-json":
        metadata.write_bytes(b"\xff\xfe{")
    elif what.startswith("no-"):
        del saved[what[3:]]
        metadata.write_text(json.dumps(saved))
    elif what == "old-format":
        metadata.write_text(json.dumps(dict(saved, format=1)))
    else:   # a field of the wrong type
        saved["preprocessing"]["resize"] = "large"
        metadata.write_text(json.dumps(saved))
    return "model.json"


@pytest.mark.parametrize("what, message", [
    ("params", "SHA-256 differs"), ("symbol", "SHA-256 differs"), ("list", "holds a JSON list"),
    ("not-json", "is not valid JSON"), ("no-outputs", "misses 'outputs'"),
    ("no-preprocessing", "misses 'preprocessing'"), ("no-sha256", "misses 'sha256'"),
    ("old-format", "has format 1; this gluonkit reads formats 2, 3"),
    ("bad-field", r"'preprocessing'\['resize'\] must be None or \[height, width\]")])
def test_damaged_exports_fail_with_one_line_naming_the_file(tmp_path, what, message):
    _small_export(tmp_path)
    name = _damage(tmp_path, what)
    with pytest.raises(gluonkit.ExportError, match=message) as refused:
        gluonkit.load_model(str(tmp_path / "model"))
    assert str(tmp_path / name) in str(refused.value) and "\n" not in str(refused.value)
    assert "export the model again" in str(refused.value)


def test_without_preprocessing_arrays_are_the_input_and_files_are_refused(tmp_path):
    net = small_cnn(3)
    net.initialize(mx.init.Xavier())
    gluonkit.export_model(net, str(tmp_path / "model"), (3, 8, 8))       # preprocessing=None
    x = np.random.RandomState(0).uniform(size=(2, 3, 8, 8)).astype(np.float32)
    z = net(mx.nd.array(x)).asnumpy()
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    results = gluonkit.predict(str(tmp_path / "model"), list(x), top_k=3)
    for result, expected in zip(results, p):
        np.testing.assert_allclose([t["probability"] for t in result["top"]],
                                   np.sort(expected)[::-1], rtol=1e-5)
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(gluonkit.ExportError, match="exported with preprocessing=None.*arrays of "
                                                   r"its input's shape \(3, 8, 8\)"):
        gluonkit.predict(str(tmp_path / "model"), [str(tmp_path / "image.png")])
    with pytest.raises(ValueError, match=r"takes arrays of its input's shape \(3, 8, 8\), got \(8, 8, 3\)"):
        gluonkit.predict(str(tmp_path / "model"), [np.zeros((8, 8, 3), np.uint8)])


def test_bad_preprocessing_kind_or_extra_is_refused_before_writing(tmp_path):
    net = small_cnn(3)
    net.initialize()
    for options, error, message in (
            ({"preprocessing": {"channels": 2}}, ValueError, r"\['channels'\] must be 1 or 3"),
            ({"preprocessing": {"channels": 1, "resize_shorter": 8}}, ValueError, "unknown keys"),
            ({"preprocessing": {"channels": 1, "std": [0]}}, ValueError, "must be positive"),
            ({"kind": "segmenter"}, ValueError, "kind must be one of"),
            ({"kind": "detector"}, ValueError, "kind='detector' needs outputs ids, scores and boxes"),
            ({"sha256": "x"}, TypeError, "these entries are its own")):
        with pytest.raises(error, match=message):
            gluonkit.export_model(net, str(tmp_path / "model"), (3, 8, 8), **options)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", [-0.07, float("nan"), float("inf")])
def test_a_batchnorm_running_variance_no_runtime_can_serve_is_refused_by_name(tmp_path, value):
    net = small_cnn(3)
    net.initialize()
    net(mx.nd.zeros((1, 3, 8, 8)))
    variance = next(p for n, p in net.collect_params().items() if n.endswith("running_var"))
    changed = variance.data().asnumpy()
    changed[1] = value
    variance.set_data(mx.nd.array(changed))
    with pytest.raises(gluonkit.ExportError, match=f"{variance.name}.* 1 value.* at or below -eps "
                                                    r"\(-1e-05\) or non-finite"):
        gluonkit.export_model(net, str(tmp_path / "model"), (3, 8, 8), onnx=False)
    assert os.listdir(tmp_path) == []


def test_a_variance_a_rounding_below_zero_is_exported_and_serves_like_the_network(tmp_path):
    # a channel that never varied: MXNet's running variance can come out as -7.8e-13 (seen in
    # a trained detector); variance + eps stays positive, so every runtime normalizes it as 0
    net = small_cnn(3)
    net.initialize()
    x = mx.nd.random.uniform(shape=(2, 3, 8, 8))
    net(x)
    variance = next(p for n, p in net.collect_params().items() if n.endswith("running_var"))
    changed = variance.data().asnumpy()
    changed[1] = -7.8e-13
    variance.set_data(mx.nd.array(changed))
    gluonkit.export_model(net, str(tmp_path / "model"), (3, 8, 8), onnx=False)
    exported = gluon.SymbolBlock.imports(str(tmp_path / "model-symbol.json"), ["data"],
                                         str(tmp_path / "model-0000.params"))
    np.testing.assert_allclose(exported(x).asnumpy(), net(x).asnumpy(), rtol=1e-6, atol=1e-7)


def test_a_symbol_built_batchnorm_with_a_negative_variance_is_refused(tmp_path):
    data = mx.sym.var("data")
    block = gluon.SymbolBlock(mx.sym.BatchNorm(mx.sym.Convolution(data, num_filter=2, kernel=(1, 1),
                                                                  name="conv"), name="bn"), data)
    block.initialize()          # no init declared: moving_var from Uniform(0.07), as SSD's extra layers
    block(mx.nd.zeros((1, 3, 4, 4)))
    block.collect_params()["bn_moving_var"].set_data(mx.nd.array([0.5, -0.01]))
    with pytest.raises(gluonkit.ExportError, match="'bn_moving_var'"):
        gluonkit.export_model(block, str(tmp_path / "model"), (3, 4, 4), onnx=False)
    block.collect_params()["bn_moving_var"].set_data(mx.nd.array([0.5, -1e-12]))   # above -eps (1e-3)
    gluonkit.export_model(block, str(tmp_path / "model"), (3, 4, 4), onnx=False)


def _triplet(hybridize):
    """A trained-looking triplet network (three inputs, two heads) that has run once."""
    mx.random.seed(3)
    net = Triplet()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    samples = [mx.nd.array(np.random.RandomState(i).uniform(-1, 1, (4, 6))) for i in range(3)]
    net(*samples)
    return net, samples


@pytest.mark.parametrize("hybridize", [False, True])
def test_a_network_of_several_inputs_exports_one_shape_per_input(tmp_path, hybridize):
    # it ended in MXNet's "argument structure of HybridBlock does not match the cached
    # version" (hybridized) or a TypeError about missing arguments
    net, (a, p, n) = _triplet(hybridize)
    prefix = str(tmp_path / "model")
    metadata = gluonkit.export_model(net, prefix, input_shape=[(6,), (6,), (6,)],
                                     outputs={"distance": None, "embedding": list("xyz")})
    assert metadata["inputs"] == [{"name": f"data{i}", "shape": [6]} for i in range(3)]
    assert "input" not in metadata
    assert gluonkit.export.read_metadata(prefix)["inputs"] == metadata["inputs"]
    distance, embedding = net(a, p, n)
    # without gluonkit: the symbol file takes the three named inputs
    block = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data0", "data1", "data2"],
                                      prefix + "-0000.params")
    for got, want in zip(block(a, p, n), (distance, embedding)):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-6)
    model = gluonkit.load_model(prefix)
    assert [spec["name"] for spec in model.inputs] == ["data0", "data1", "data2"]
    for got, want in zip(model.net(a, p, n), (distance, embedding)):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-6)
    # predict takes one tuple of arrays per sample, or a dict by input name
    samples = [(a[i], p[i].asnumpy(), n[i]) for i in range(4)]
    samples[1] = {"data0": a[1], "data1": p[1], "data2": n[1]}
    results = gluonkit.predict(prefix, samples, top_k=3, batch_size=3)
    scores = embedding.asnumpy()
    probabilities = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    for i, result in enumerate(results):
        assert result["image"] == i
        top = result["outputs"]["embedding"]
        assert [t["class"] for t in top] == [list("xyz")[k] for k in np.argsort(-scores[i])]
        np.testing.assert_allclose([t["probability"] for t in top],
                                   np.sort(probabilities[i])[::-1], rtol=1e-5)


def test_several_inputs_take_their_names_from_a_dict_into_both_files(tmp_path):
    onnx = pytest.importorskip("onnx")
    net, _ = _triplet(True)
    shapes = {"anchor": (6,), "positive": (6,), "negative": (6,)}
    gluonkit.export_model(net, str(tmp_path / "model"), input_shape=shapes,
                          outputs={"distance": None, "embedding": None})
    assert [s["name"] for s in gluonkit.export.read_metadata(str(tmp_path / "model"))["inputs"]] == \
        ["anchor", "positive", "negative"]
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    assert sorted(value.name for value in graph.input) == ["anchor", "negative", "positive"]
    assert [value.name for value in graph.output] == ["distance", "embedding"]
    for value in graph.input:      # a free batch axis, named, then the sample's shape
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [6]
    for value in graph.output:
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert "'anchor' (6 per sample)" in graph.doc_string


def test_a_format_2_export_of_several_inputs_still_predicts(tmp_path):
    net, _ = _triplet(True)
    prefix = str(tmp_path / "model")
    metadata = gluonkit.export_model(net, prefix, input_shape=[(6,)] * 3, onnx=False,
                                     outputs={"distance": None, "embedding": None})
    assert metadata["format"] == 3 and "values" in metadata
    saved = json.loads((tmp_path / "model.json").read_text())
    del saved["values"]
    saved["format"] = 2                     # as the exports of gluonkit before format 3
    (tmp_path / "model.json").write_text(json.dumps(saved))
    x = [mx.nd.array(np.random.RandomState(i).uniform(-1, 1, (2, 6))) for i in range(3)]
    distance, _ = gluonkit.load_model(prefix).net(*x)
    np.testing.assert_allclose(distance.asnumpy(), net(*x)[0].asnumpy(), rtol=1e-5, atol=1e-6)


def test_several_inputs_are_refused_in_one_line_where_they_cannot_be_used(tmp_path):
    net, _ = _triplet(False)
    prefix = str(tmp_path / "model")
    with pytest.raises(ValueError, match=r"cannot run on a sample of input_shape \(6,\) .*"
                                         r"missing 2 required.*for several inputs one shape "
                                         r"per input: input_shape=\[\(10,\), \(10,\)\]"):
        gluonkit.export_model(net, prefix, input_shape=(6,))
    with pytest.raises(ValueError, match="takes 3 inputs: export it with preprocessing=None"):
        gluonkit.export_model(net, prefix, input_shape=[(6,)] * 3,
                              preprocessing={"channels": 1, "resize": [8, 8]})
    for option in ({"dynamic_size": True}, {"pixels": "NHWC"}):
        with pytest.raises(ValueError, match=rf"^{next(iter(option))}=\.\.\. are for one image "
                                             "input; the network takes 3 inputs: export it"):
            gluonkit.export_model(net, prefix, input_shape=[(6,)] * 3, **option)
    with pytest.raises(TypeError, match=r"a list of them for several inputs\), got \[\(6,\), 6"):
        gluonkit.export_model(net, prefix, input_shape=[(6,), 6, (6,)])
    with pytest.raises(ValueError, match=r"input_shape\[1\] must be one sample's shape of "
                                         r"positive sizes.*got \(6, 0\)"):
        gluonkit.export_model(net, prefix, input_shape=[(6,), (6, 0), (6,)])
    assert not os.listdir(tmp_path)
    gluonkit.export_model(net, prefix, input_shape=[(6,)] * 3, onnx=False)
    with pytest.raises(ValueError, match=r"sample 0: the model takes 3 inputs .*predict\(model, "
                                         r"\[\(data0, data1, data2\), \.\.\.\]\)"):
        gluonkit.predict(prefix, [np.zeros(6)])
    with pytest.raises(ValueError, match=r"input 'data2' takes arrays of shape \(6,\)"):
        gluonkit.predict(prefix, [(np.zeros(6), np.zeros(6), np.zeros(5))])
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    with pytest.raises(SystemExit) as done:     # the command reads image files
        predict.main(["--model", prefix, str(tmp_path / "photo.png")])
    message = str(done.value.code)
    assert message.startswith("gluonkit-predict: ") and "\n" not in message
    assert "takes 3 inputs (data0, data1, data2), not image files" in message
    assert "gluonkit.predict(model, [(data0, data1, data2), ...])" in message


def test_a_route_that_reads_only_the_anchor_exports_taking_only_the_anchor(tmp_path):
    net, (a, p, n) = _triplet(True)
    route = net.route("embedding")
    expected = route(a, p, n).asnumpy()
    with pytest.warns(UserWarning, match=r"does not read its input\(s\) \['data1', 'data2'\]: "
                                         r"the export takes only \['data0'\]"):
        metadata = gluonkit.export_model(route, str(tmp_path / "model"), [(6,)] * 3, onnx=False)
    assert metadata["input"] == {"name": "data0", "shape": [6]} and "inputs" not in metadata
    got = gluonkit.load_model(str(tmp_path / "model")).net(a).asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
