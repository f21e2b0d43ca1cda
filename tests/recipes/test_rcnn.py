"""Faster R-CNN in the detect recipe: its step is GluonCV's own loop, and the recipe trains,
validates, resumes and exports it at one image per device."""
import json

import mxnet as mx
import numpy as np
import pytest
from gluoncv.model_zoo.rcnn.faster_rcnn.data_parallel import ForwardBackwardTask
from mxnet import autograd, gluon
from numpy.testing import assert_allclose

from gluonkit import Trainer, fit
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect, rcnn
from gluonkit.train.resume import get_rng_state, set_rng_state
from conftest import mobilenet_backbone_file

NAME = "faster_rcnn_mobilenet0.25_custom"
TINY = ["--model", NAME, "--limit", "4", "--epochs", "1", "--image-size", "64", "--no-progress"]


def _twins(classes, scales, ctx):
    """Two Faster R-CNNs with equal parameters on ``ctx``, every parameter initialized."""
    nets = []
    for _ in range(2):
        net = rcnn.build_faster_rcnn(NAME, classes, scales=scales, short=64, max_size=96)
        net.initialize(ctx=ctx)
        with autograd.pause():
            net(mx.nd.zeros((1, 3, 64, 64), ctx=ctx[0]))
        rcnn.place_target_generator(net, ctx)
        nets.append(net)
    for a, b in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        b.set_data(a.data(ctx[0]))
    return nets


def _params(net):
    return {name: p.list_data()[0].asnumpy() for name, p in net._collect_params_with_prefix().items()}


def _gluoncv_loop(net, batches, ctx, images_per_update):
    """GluonCV's train_faster_rcnn.py: ForwardBackwardTask per image (grad_req 'add'), then
    one gluon.Trainer.step(images) per update; MXNet seeded with each image's region seed."""
    for param in net.collect_params().values():
        if param.grad_req != "null":
            param.grad_req = "add"
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.02, "momentum": 0.9, "wd": 5e-4})
    task = ForwardBackwardTask(net, trainer, gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False),
                               gluon.loss.HuberLoss(rho=1 / 9), gluon.loss.SoftmaxCrossEntropyLoss(),
                               gluon.loss.HuberLoss(rho=1.0), mix_ratio=1.0, amp_enabled=False)
    seen = 0
    net.collect_params().zero_grad()
    for batch in batches:
        for (*sample, seed), device in zip(batch, ctx):
            mx.random.seed(seed, ctx=device)
            task.forward_backward([a.as_in_context(device) for a in sample])
            seen += 1
        if seen == images_per_update:
            trainer.step(seen)
            net.collect_params().zero_grad()
            seen = 0


@pytest.mark.parametrize("ctx", [[mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]], ids=["1-device", "2-devices"])
def test_recipe_step_equals_gluoncv_forward_backward_task_loop(ctx):
    data = ShapesDetection("train", length=8)
    scales = rcnn.fit_rpn_scales(data, 64, 96)
    ref, net = _twins(data.classes, scales, ctx)
    np.random.seed(0)
    transform = rcnn.train_transform(ref, 64, 96)
    samples = rcnn.train_batchify([transform(*data[i]) for i in range(len(data))])
    assert len({s[0].shape for s in samples}) > 1          # images at their own sizes, unpadded
    batches = [samples[i:i + len(ctx)] for i in range(0, len(samples), len(ctx))]
    accumulate = 4 // len(ctx)                              # 4 images per update, 2 updates
    initial = _params(ref)
    state = get_rng_state()
    _gluoncv_loop(ref, batches, ctx, 4)
    set_rng_state(state)
    trainer = Trainer(net.collect_params(), "sgd", {"learning_rate": 0.02, "momentum": 0.9, "wd": 5e-4},
                      accumulate=accumulate)
    fit(net, None, trainer, batches, epochs=1, ctx=ctx, batch_fn=rcnn.FasterRCNNBatch(), progress=False)
    a, b = _params(ref), _params(net)
    moved = [k for k in a if not np.allclose(a[k], initial[k])]
    assert len(moved) > 0.9 * len([k for k in a if "running" not in k and "anchor" not in k])
    for name in a:
        assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-6, err_msg=name)


def _run(tmp_path, *extra, out="out"):
    return detect.train(detect.parse_args(TINY + ["--out", str(tmp_path / out)] + list(extra)))


def test_faster_rcnn_trains_validates_exports_at_one_image_per_device(tmp_path, recwarn):
    # from a backbone file: its weights, loaded on the CPU, go to both devices, without a note
    # from MXNet for each parameter that initialize() leaves as loaded
    backbone = mobilenet_backbone_file(tmp_path / "mobilenet0.25.params")
    result = _run(tmp_path, "--ctx", "cpu:0,cpu:1", "--batch-size", "4", "--clip-global-norm", "100",
                  "--pretrained-file", str(backbone))
    assert not [w for w in recwarn if "already initialized" in str(w.message)]
    out = tmp_path / "out"
    args = json.loads((out / "args.json").read_text())
    assert (args["per_device"], args["micro_batch"], args["batch_size"], args["max_size"]) == (1, 1, 4, 96)
    history = result["history"]
    assert history["epoch"] == [1] and np.isfinite(history["loss"][0]) and "val_mAP" in history
    meta = json.loads((out / "model.json").read_text())
    assert meta["task"] == "detect" and meta["preprocessing"]["resize_short_within"] == [64, 96]
    exported = mx.gluon.SymbolBlock.imports(str(out / "model-symbol.json"), ["data"],
                                            str(out / "model-0000.params"))
    for shape in [(1, 3, 64, 64), (1, 3, 64, 96)]:          # any size, as trained
        ids, scores, boxes = exported(mx.nd.zeros(shape))
        assert ids.shape[:2] == scores.shape[:2] == boxes.shape[:2] and boxes.shape[2] == 4
    for name in ("history.csv", "curves.png", "predictions.png"):
        assert (out / name).is_file(), name


def test_faster_rcnn_resume_equals_an_uninterrupted_run(tmp_path):
    whole = _run(tmp_path, "--epochs", "2", out="whole")
    _run(tmp_path, "--epochs", "1", out="parts")
    resumed = _run(tmp_path, "--epochs", "2", "--resume", out="parts")
    assert resumed["history"]["epoch"] == [1, 2]
    a, b = _params(whole["net"]), _params(resumed["net"])
    for name in a:
        assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_faster_rcnn_options_are_checked(capsys):
    args = detect.parse_args(["--model", NAME])
    assert (args.per_device, args.batch_size, args.max_size) == (1, 1, 144)    # 1.5 x 96
    args = detect.parse_args(["--model", NAME, "--batch-size", "4"])
    assert (args.batch_size, args.micro_batch) == (4, 1)       # one image per device in a forward
    for bad, message in [(["--image-size", "0"], "shorter side (64 or more)"),
                         (["--multiscale", "64,96"], "--multiscale does not apply"),
                         (["--batchnorm", "sync"], "one image per device"),
                         (["--max-size", "90"], "smaller than the shorter side"),
                         (["--pretrained-file", "missing.params"], "no such file")]:
        with pytest.raises(SystemExit):
            detect.parse_args(["--model", NAME] + bad)
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        detect.parse_args(["--pretrained-file", "x.params"])
    assert "loads a Faster R-CNN backbone" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a Faster R-CNN name"):
        rcnn.build_faster_rcnn("faster_rcnn_vgg16_custom", ["a"])


def test_rpn_scales_are_quantiles_of_the_resized_box_sizes():
    data = ShapesDetection("val", length=12)
    sizes = []
    for i in range(len(data)):
        image, label = data[i]
        scale = min(64 / min(image.shape[:2]), 96 / max(image.shape[:2]))
        sizes += list(np.sqrt((label[:, 2] - label[:, 0]) * (label[:, 3] - label[:, 1])) * scale)
    expected = np.quantile(sizes, [0.1, 0.3, 0.5, 0.7, 0.9]) / 16
    assert_allclose(rcnn.fit_rpn_scales(data, 64, 96), expected, atol=0.005)


def test_a_pretrained_file_of_the_backbone_starts_the_features(tmp_path):
    from gluoncv.model_zoo import get_mobilenet

    base = get_mobilenet(0.25)
    base.initialize(mx.init.Uniform(1.0))
    base(mx.nd.zeros((1, 3, 32, 32)))
    base.save_parameters(str(tmp_path / "mobilenet0.25.params"))
    net = rcnn.build_faster_rcnn(NAME, ["a"], pretrained_file=str(tmp_path / "mobilenet0.25.params"))
    first = base.features[0].weight.data().asnumpy()
    assert_allclose(net.features[0].weight.data().asnumpy(), first)
    (tmp_path / "bad.params").write_bytes(b"not parameters")
    with pytest.raises(ValueError, match="bad.params is not a parameter file of GluonCV's mobilenet0.25"):
        rcnn.build_faster_rcnn(NAME, ["a"], pretrained_file=str(tmp_path / "bad.params"))


class _Truth(mx.gluon.Block):
    """Detects exactly the boxes of the label it is given (set before each image)."""

    label = None

    def forward(self, x):
        label = self.label
        return label[:, :, 4:5], mx.nd.ones_like(label[:, :, 4:5]), label[:, :, :4]


def test_eval_fn_gives_the_metric_boxes_in_the_pixels_of_the_ground_truth():
    from gluonkit.recipes.detection import voc_metric

    data = ShapesDetection("val", length=6)
    transform = rcnn.val_transform(64, 96)
    batch = rcnn.val_batchify([transform(*data[i]) for i in range(len(data))])
    metric, net = voc_metric(data.classes), _Truth()
    for image, label in batch:
        net.label = label
        outputs, labels = rcnn.eval_fn(net, [(image, label)], [mx.cpu()])
        metric.update(*[[o[k] for o in outputs] for k in range(3)],
                      *[[y[k] for y in labels] for k in range(3)])
    names, values = metric.get()
    assert values[-1] == pytest.approx(1.0)
    net.label = mx.nd.array([[[0, 0, 8, 8, 0, 0]]])     # a box on no object
    outputs, labels = rcnn.eval_fn(net, [batch[0]], [mx.cpu()])
    metric.reset()
    metric.update(*[[o[k] for o in outputs] for k in range(3)], *[[y[k] for y in labels] for k in range(3)])
    assert metric.get()[1][-1] == pytest.approx(0.0)
