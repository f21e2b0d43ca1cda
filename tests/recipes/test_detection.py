"""Detection steps against GluonCV's own training and validation code written the long way."""
import mxnet as mx
import numpy as np
import pytest
from gluoncv.loss import SSDMultiBoxLoss
from gluoncv.utils.metrics.voc_detection import VOC07MApMetric
from mxnet import autograd, gluon
from numpy.testing import assert_allclose

import gluonkit
from gluonkit.data import MultiScaleSampler, ShapesDetection
from gluonkit.recipes import detection as D

TWO_CPUS = [mx.cpu(0), mx.cpu(1)]


def _twins(name, classes, ctx, ref_ctx=None, **kwargs):
    """A reference detector on ``ref_ctx`` (default ``ctx``) and its twin on ``ctx``."""
    nets = [D.build_detector(name, classes, **kwargs) for _ in range(2)]
    for net, where in zip(nets, [ref_ctx or ctx, ctx]):
        net.initialize(ctx=where)
        with autograd.train_mode():
            net(mx.nd.zeros((1, 3, 64, 64), ctx=where[0]))
    rng = np.random.RandomState(0)
    for a, b in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        if a.name.endswith("weight"):     # He-normal: no dead units, no tied anchor scores
            fan_in = int(np.prod(a.shape[1:]))
            a.set_data(mx.nd.array(rng.normal(0, np.sqrt(2.0 / fan_in), a.shape)))
        b.set_data(a.data(a.list_ctx()[0]))
    return nets


def _batches(net, family, sizes, count, batch_size):
    """``count`` training batches of the shapes set, the i-th at ``sizes[i % len(sizes)]``."""
    data = ShapesDetection("train", length=count * batch_size)
    transforms = D.SizedTransform(D.train_transforms(net, family, sizes))
    batchify = D.train_batchify(family)
    return [batchify([transforms(data[i * batch_size + j], sizes[i % len(sizes)])
                      for j in range(batch_size)]) for i in range(count)]


def _run_batch_fn(step_fn, net, trainer, batches, ctx):
    """What ``fit(batch_fn=...)`` does with each batch: record, backward the sum, step(count)."""
    for batch in batches:
        with autograd.record():
            losses, count = step_fn(net, batch, ctx)
        autograd.backward(losses)
        trainer.step(count)


def _params(net):
    return {name: p.list_data()[0].asnumpy() for name, p in net.collect_params().items()}


def _assert_same_params(ref, net):
    """Every copy equal (BatchNorm statistics per device when both nets share the devices)."""
    for (name, a), b in zip(ref.collect_params().items(), net.collect_params().values()):
        copies = a.list_data() * (len(b.list_data()) // len(a.list_data()))
        for ca, cb in zip(copies, b.list_data()):
            assert_allclose(ca.asnumpy(), cb.asnumpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def _update_error(ref, net, initial):
    """|update of net - update of ref| / |update of ref| over all trainable parameters."""
    diff = total = 0.0
    for (name, a), b in zip(ref.collect_params().items(), net.collect_params().values()):
        if a.grad_req != "null":
            ours, theirs = b.list_data()[0].asnumpy() - initial[name], a.data().asnumpy() - initial[name]
            diff += float(np.square(ours - theirs).sum())
            total += float(np.square(theirs).sum())
    return np.sqrt(diff / total)


def test_yolo3_batch_fn_accumulated_over_two_devices_equals_hand_written_loop():
    ref, net = _twins("yolo3_mobilenet0.25_custom", ShapesDetection.CLASSES, TWO_CPUS)
    sizes = [(64, 64), (96, 96), (64, 96), (96, 64)]      # a new size every micro-batch
    np.random.seed(3)
    batches = _batches(ref, "yolo3", sizes, count=4, batch_size=2)   # one image per device
    options = {"learning_rate": 0.01, "momentum": 0.9, "wd": 5e-4}
    # reference: GluonCV's train_yolo3.py step, gradients added by hand over 2 micro-batches
    for param in ref.collect_params().values():
        param.grad_req = "add" if param.grad_req != "null" else "null"
    plain = gluon.Trainer(ref.collect_params(), "sgd", options)
    for index, batch in enumerate(batches):
        data = gluon.utils.split_and_load(batch[0], TWO_CPUS)
        targets = [gluon.utils.split_and_load(batch[i], TWO_CPUS) for i in range(1, 6)]
        gt_boxes = gluon.utils.split_and_load(batch[6], TWO_CPUS)
        with autograd.record():
            sums = []
            for k, x in enumerate(data):
                obj, center, scale, cls = ref(x, gt_boxes[k], *[t[k] for t in targets])
                sums.append(obj + center + scale + cls)
            autograd.backward(sums)
        if index % 2 == 1:
            plain.step(4)
            ref.collect_params().zero_grad()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", options, accumulate=2)
    _run_batch_fn(D.yolo3_batch_fn, net, trainer, batches, TWO_CPUS)
    _assert_same_params(ref, net)


def test_ssd_batch_counts_positives_so_micro_batches_equal_one_large_batch():
    ref, net = _twins("ssd_300_mobilenet0.25_custom", ShapesDetection.CLASSES, TWO_CPUS,
                      ref_ctx=[mx.cpu(0)])
    np.random.seed(4)
    batches = _batches(ref, "ssd", [(128, 128)], count=2, batch_size=2)
    initial = _params(ref)
    options = {"learning_rate": 0.05, "momentum": 0.9, "wd": 5e-4}
    # reference: GluonCV's train_ssd.py step over the four images at once, each image forward
    # on its own as on a device of its own (so BatchNorm sees what it sees on ours): the loss
    # divides by the positives of all four, then step(1)
    images = [(batch[0][k:k + 1], batch[1][k:k + 1], batch[2][k:k + 1])
              for batch in batches for k in range(2)]
    plain = gluon.Trainer(ref.collect_params(), "sgd", options)
    with autograd.record():
        preds = [ref(x.as_in_context(mx.cpu(0)))[:2] for x, _, _ in images]
        sum_loss, _, _ = SSDMultiBoxLoss()([p[0] for p in preds], [p[1] for p in preds],
                                           [c.as_in_context(mx.cpu(0)) for _, c, _ in images],
                                           [b.as_in_context(mx.cpu(0)) for _, _, b in images])
        autograd.backward(sum_loss)
    plain.step(1)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", options, accumulate=2)
    _run_batch_fn(D.SSDBatch(), net, trainer, batches, TWO_CPUS)
    # BatchNorm of one image makes the first layers' gradients sums of nearly cancelling terms
    # (float32 sums in another order move them by up to a few % of their update); the whole
    # update agrees to 1e-3, where per-micro-batch normalization is off by tens of percent
    assert _update_error(ref, net, initial) < 1e-3
    for name in initial:
        if "predictor" in name:       # the heads: well-conditioned gradients, tight
            a = ref.collect_params()[name].data().asnumpy()
            b = net.collect_params()[name.replace(ref.prefix, net.prefix, 1)].list_data()[1]
            assert_allclose(a, b.asnumpy(), rtol=1e-4, atol=1e-6, err_msg=name)


class _Recording(VOC07MApMetric):
    """VOC07MApMetric that keeps every update's arguments as NumPy arrays."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = []

    def update(self, pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels, gt_difficults=None):
        args = (pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels, gt_difficults)
        as_list = lambda arg: arg if isinstance(arg, list) else [arg]      # a device's array
        self.calls.append([[None if a is None else a.asnumpy() for a in as_list(arg)] for arg in args])
        super().update(*args)

    def __deepcopy__(self, memo):     # evaluate copies its metrics: keep this one's record
        return self


def test_voc_metric_is_fed_exactly_what_gluoncv_validation_feeds():
    classes = ShapesDetection.CLASSES
    net = D.build_detector("yolo3_mobilenet0.25_custom", classes)
    net.initialize(ctx=TWO_CPUS)
    D.nms_for_eval(net, "yolo3")
    val = ShapesDetection("val", length=6)
    sampler = MultiScaleSampler(len(val), 3, [(96, 96)], shuffle=False, seed=0)
    loader = D.detection_loader(val, sampler, D.SizedTransform(D.val_transforms("yolo3", [(96, 96)])),
                                D.val_batchify())
    # GluonCV's train_yolo3.py validate(), written out
    ref = _Recording(iou_thresh=0.5, class_names=list(classes))
    for batch in loader:
        data = gluon.utils.split_and_load(batch[0], TWO_CPUS, even_split=False)
        label = gluon.utils.split_and_load(batch[1], TWO_CPUS, even_split=False)
        det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficults = [], [], [], [], [], []
        for x, y in zip(data, label):
            ids, scores, bboxes = net(x)
            det_ids.append(ids)
            det_scores.append(scores)
            det_bboxes.append(bboxes.clip(0, batch[0].shape[2]))
            gt_ids.append(y.slice_axis(axis=-1, begin=4, end=5))
            gt_bboxes.append(y.slice_axis(axis=-1, begin=0, end=4))
            gt_difficults.append(y.slice_axis(axis=-1, begin=5, end=6) if y.shape[-1] > 5 else None)
        ref.update(det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficults)
    # ours: gluonkit.evaluate with the recipe's eval_fn and GluonCV's metric
    ours = _Recording(iou_thresh=0.5, class_names=list(classes))
    scores = gluonkit.evaluate(net, loader, ctx=TWO_CPUS, metrics=ours, eval_fn=D.detection_eval_fn)
    # once per device (as train_faster_rcnn.py), the arrays train_yolo3.py gives in one list
    assert len(ours.calls) == 2 * len(ref.calls) == 4
    per_device = [[[arg[device]] for arg in call] for call in ref.calls for device in (0, 1)]
    for call, ref_call in zip(ours.calls, per_device):
        assert [len(arg) for arg in call] == [1] * 6
        for arg, ref_arg in zip(call, ref_call):
            assert_allclose(arg[0], ref_arg[0], rtol=0, atol=0)
    assert list(scores) == ["circle", "square", "triangle", "mAP"]
    assert_allclose(list(scores.values()), ref.get()[1], rtol=0, atol=0)


def test_bad_model_names_and_batchnorm_are_refused():
    with pytest.raises(ValueError, match="not a GluonCV YOLOv3 or SSD"):
        D.build_detector("resnet18_v1", ["a"])
    with pytest.raises(ValueError, match="yolo3_mobilenet1.0_custom"):
        D.model_family("yolo3_mobilenet1_custom")
    with pytest.raises(ValueError, match="batchnorm must be"):
        D.build_detector("yolo3_mobilenet0.25_custom", ["a"], batchnorm="group")
    with pytest.raises(ValueError, match="has no Gluon BatchNorm layer to freeze"):   # SSD's are symbols
        D.build_detector("ssd_300_mobilenet0.25_custom", ["a"], batchnorm="frozen")


@pytest.mark.parametrize("batchnorm, independent", [("frozen", True), ("plain", False)])
def test_frozen_batchnorm_makes_each_image_independent_of_its_batch(batchnorm, independent):
    net = D.build_detector("yolo3_mobilenet0.25_custom", ShapesDetection.CLASSES, batchnorm=batchnorm)
    net.initialize()
    x = mx.nd.random.uniform(shape=(2, 3, 64, 64))
    with autograd.train_mode():
        both, alone = net(x)[0], net(x[:1])[0]
    same = np.allclose(both[:1].asnumpy(), alone.asnumpy(), rtol=1e-4, atol=1e-5)
    assert same == independent


@pytest.mark.parametrize("name, family", [("yolo3_mobilenet0.25_custom", "yolo3"),
                                          ("ssd_512_mobilenet1.0_custom", "ssd")])
def test_training_transforms_of_a_sync_batchnorm_net_equal_the_plain_nets(name, family):
    # run on one image, SyncBatchNorm(num_devices=2) would wait forever for the other device
    classes = ShapesDetection.CLASSES
    sync = D.build_detector(name, classes, batchnorm="sync", num_devices=2)
    plain = D.build_detector(name, classes)
    for net in (sync, plain):
        net.initialize()
    assert D.one_image_network(plain, name, classes, "plain") is plain
    sample = ShapesDetection("train", length=1)[0]
    targets = []
    for net in (D.one_image_network(sync, name, classes, "sync"), plain):
        mx.random.seed(0)
        np.random.seed(0)
        made = D.train_transforms(net, family, [(64, 64)])[(64, 64)](*sample)
        targets.append([np.asarray(a.asnumpy() if isinstance(a, mx.nd.NDArray) else a) for a in made])
    assert len(targets[0]) == len(targets[1]) > 2
    for array, ref in zip(*targets):
        assert_allclose(array, ref, rtol=0, atol=0)


def test_flip_transform_keeps_object_sizes_and_gives_one_target_per_object():
    data = ShapesDetection("train", length=6)
    net = D.build_detector("yolo3_mobilenet0.25_custom", data.classes)
    net.initialize()
    transform = D.train_transforms(net, "yolo3", [(96, 128)], augment="flip")[(96, 128)]
    np.random.seed(0)
    flips = 0
    for i in range(len(data)):
        image, label = data[i]
        x, objectness, _, _, _, _, boxes = transform(image, label)
        assert x.shape == (3, 96, 128)
        resized = label[:, :4] * np.tile([128 / image.shape[1], 96 / image.shape[0]], 2)
        mirrored = np.stack([128 - resized[:, 2], resized[:, 1], 128 - resized[:, 0], resized[:, 3]], axis=1)
        got = boxes.asnumpy()
        flipped = not np.allclose(got, resized, atol=1e-3)
        flips += flipped
        assert_allclose(got, mirrored if flipped else resized, atol=1e-3)
        assert objectness.sum().asscalar() == len(label)     # each object: one anchor
    assert 0 < flips < len(data)
    with pytest.raises(ValueError, match="'full' or 'flip'"):
        D.train_transforms(net, "yolo3", [(96, 128)], augment="zoom")


def test_faster_rcnn_is_a_family_whose_options_are_its_own():
    assert D.model_family("faster_rcnn_mobilenet0.25_custom") == "faster_rcnn"
    with pytest.raises(ValueError, match="one image per device"):
        D.build_detector("faster_rcnn_mobilenet0.25_custom", ["a"], batchnorm="sync")
    with pytest.raises(TypeError, match="short: options of Faster R-CNN"):
        D.build_detector("yolo3_mobilenet0.25_custom", ["a"], short=128)
    with pytest.raises(ValueError, match="faster_rcnn_mobilenet0.25_custom"):
        D.model_family("faster_rcnn_mobilenet_custom")


_GLUON_NORM_DEFAULTS = {"gamma": 1.0, "beta": 0.0, "running_mean": 0.0, "moving_mean": 0.0,
                        "running_var": 1.0, "moving_var": 1.0}


def _norm_statistics(net):
    """name -> array of every normalization parameter of an initialized ``net``."""
    return {name: p.data().asnumpy() for name, p in net.collect_params().items()
            if name.rpartition("_")[2] in ("gamma", "beta")
            or name.endswith(("running_mean", "moving_mean", "running_var", "moving_var"))}


def _off_default(stats):
    return sorted(name for name, value in stats.items()
                  if not np.all(value == next(v for s, v in _GLUON_NORM_DEFAULTS.items()
                                              if name.endswith("_" + s))))


@pytest.mark.parametrize("name, options", [
    ("yolo3_mobilenet0.25_custom", {}),
    ("ssd_300_mobilenet0.25_custom", {}),
    ("faster_rcnn_mobilenet0.25_custom", {"scales": (2, 4), "short": 64, "max_size": 96}),
])
def test_every_batchnorm_of_every_family_starts_at_gluons_defaults(name, options):
    # SSD's extra layers are a symbol graph whose BatchNorm declares no init: the default
    # initializer gave running_var uniform +-0.07 (half negative), gamma and beta too
    net = D.build_detector(name, ["a", "b"], **options)
    D.initialize(net, [mx.cpu()])
    net(mx.nd.zeros((1, 3, 64, 64)))                      # deferred shapes
    stats = _norm_statistics(net)
    assert len(stats) >= 100 and any("moving_var" in n for n in stats) == name.startswith("ssd")
    assert _off_default(stats) == []


def test_classifier_batchnorm_starts_at_gluons_defaults_under_xavier():
    from gluonkit.recipes.models import build_model
    net = build_model("mobilenet0.25", 3)
    net.initialize(mx.init.Xavier())                       # as the classify recipe does
    net(mx.nd.zeros((1, 3, 32, 32)))
    stats = _norm_statistics(net)
    assert len(stats) > 50 and _off_default(stats) == []
