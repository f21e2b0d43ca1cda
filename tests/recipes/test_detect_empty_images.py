"""Images without objects (negatives) train as background, for every detector family."""
import mxnet as mx
import numpy as np
import pytest
from gluoncv.model_zoo.ssd.target import SSDTargetGenerator
from gluoncv.model_zoo.yolo.yolo_target import YOLOV3PrefetchTargetGenerator
from mxnet import autograd
from numpy.testing import assert_allclose, assert_array_equal

from detection_files import shapes_voc, with_empty_images, write_rec
from gluonkit.data import ShapesDetection
from gluonkit.recipes import detect, detection as det, rcnn

TINY = ["--epochs", "1", "--image-size", "64", "--no-progress", "--seed", "3"]
BOXES = np.array([[[4, 6, 30, 40], [20, 10, 60, 50]]], np.float32)   # an image with two objects
CLASSES = ["circle", "square", "triangle"]


def _empty_sample(size=64):
    return mx.nd.array(np.full((size, size, 3), 128), dtype="uint8"), np.zeros((0, 6), np.float32)


def test_yolo3_targets_of_an_image_without_objects_are_gluoncvs_for_a_padded_row():
    net = det.build_detector("yolo3_mobilenet0.25_custom", CLASSES)
    net.initialize()
    with autograd.train_mode():
        _, anchors, offsets, feat_maps, *_ = net(mx.nd.zeros((1, 3, 64, 64)))
    padded = np.concatenate([BOXES, np.full_like(BOXES, -1)])       # GluonCV's Pad(pad_val=-1)
    ids = np.array([[[0], [2]], [[-1], [-1]]], np.float32)
    reference = YOLOV3PrefetchTargetGenerator(len(CLASSES))(
        mx.nd.zeros((2, 3, 64, 64)), feat_maps, anchors, offsets, mx.nd.array(padded), mx.nd.array(ids))
    for augment in ("flip", "full"):
        transform = det.train_transforms(net, "yolo3", [(64, 64)], augment)[(64, 64)]
        image, *targets, gt_boxes = transform(*_empty_sample())
        assert image.shape == (3, 64, 64)
        for ours, theirs in zip(targets, reference):
            assert_array_equal(ours.asnumpy(), theirs[1].asnumpy())
        assert_array_equal(gt_boxes.asnumpy(), -np.ones((1, 4)))   # what the network skips
        assert (reference[0][0].asnumpy() > 0).any()              # the other image has objects


def test_ssd_image_without_objects_has_background_targets_and_its_hardest_negatives_loss():
    net = det.build_detector("ssd_300_mobilenet0.25_custom", CLASSES)
    net.initialize()
    with autograd.train_mode():
        anchors = net(mx.nd.zeros((1, 3, 64, 64)))[2]
    padded = np.concatenate([BOXES, np.full_like(BOXES, -1)])
    ids = np.array([[[0], [2]], [[-1], [-1]]], np.float32)
    cls_ref, box_ref, _ = SSDTargetGenerator(   # the preset's generator on GluonCV's padded batch
        iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2), negative_mining_ratio=-1)(
        anchors, None, mx.nd.array(padded), mx.nd.array(ids))
    transform = det.train_transforms(net, "ssd", [(64, 64)])[(64, 64)]
    image, cls_targets, box_targets = transform(*_empty_sample())
    assert_array_equal(cls_targets.asnumpy(), cls_ref[1].asnumpy())    # every anchor background
    assert not cls_targets.asnumpy().any() and (cls_ref[0].asnumpy() > 0).any()
    assert not np.isfinite(box_ref[1].asnumpy()).all()     # GluonCV's encoder: log(0) on padding
    assert not box_targets.asnumpy().any()                  # here: an unmatched anchor's zeros
    other = transform(mx.nd.array(np.full((64, 64, 3), 90), dtype="uint8"),
                      np.array([[4, 6, 30, 40, 1, 0]], np.float32))
    batch = [mx.nd.stack(a, b) for a, b in zip(other, (image, cls_targets, box_targets))]
    with autograd.record():
        (losses,), positives = det.SSDBatch()(net, batch, [mx.cpu()])
        cls_pred = net(batch[0])[0]                         # the same batch: BatchNorm's statistics
    cross_entropy = -mx.nd.log_softmax(cls_pred, axis=-1)[1, :, 0].asnumpy()
    assert positives == int((batch[1][0] > 0).sum().asscalar()) >= 1
    # the image without objects adds the loss of its 3 hardest negatives (undivided by positives)
    assert_allclose(losses[1].asscalar(), np.sort(cross_entropy)[-3:].sum(), rtol=1e-5)


def test_faster_rcnn_loss_of_an_image_without_objects_is_its_background_loss():
    data = ShapesDetection("train", length=2)
    net = rcnn.build_faster_rcnn("faster_rcnn_mobilenet0.25_custom", CLASSES, short=64, max_size=96,
                                 scales=(1, 2))      # anchors of 16 and 32 px: inside the image
    net.initialize()
    transform = rcnn.train_transform(net, 64, 96)
    image, label, *rpn, _ = rcnn.train_batchify([transform(*_empty_sample(80))])[0]   # _: region seed
    assert_array_equal(label.asnumpy(), -np.ones((1, 1, 6)))       # the padding of GluonCV's batches
    rpn_cls, rpn_box, rpn_mask = (t.asnumpy() for t in rpn)
    # RPN: only negatives (0) and ignored anchors (-1), as many negatives as the sampler keeps
    assert set(np.unique(rpn_cls)) == {-1, 0} and not rpn_mask.any() and not rpn_box.any()
    anchors = transform._anchors[:, :, :4, :4].reshape(-1, 4).asnumpy()   # the 4x4 stride-16 grid
    inside = ((anchors[:, :2] >= 0) & (anchors[:, 2:] < 64)).all(axis=1)
    assert inside.any() and ((rpn_cls.reshape(-1) == 0) == inside).all()   # fewer than 256: all kept
    net(image)                                                # initialized before the seed
    mx.random.seed(5)
    with autograd.record():
        loss = rcnn.FasterRCNNBatch().image_loss(net, image, label, *rpn)
    mx.random.seed(5)                                         # the same regions sampled
    with autograd.record():
        cls_pred, _, _, _, _, rpn_score, _, _, cls_targets, _, box_masks, _ = \
            net(image, label[:, :, :4], label[:, :, 4:5])
    score = rpn_score.asnumpy().reshape(-1)[rpn_cls.reshape(-1) == 0]
    rpn_ref = np.mean(np.log1p(np.exp(score)))              # sigmoid cross-entropy with 0
    targets = cls_targets.asnumpy().reshape(-1)
    assert (targets == 0).all() and not box_masks.asnumpy().any()   # every region is background
    logits = cls_pred.asnumpy().reshape(len(targets), -1)
    rcnn_ref = np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[:, 0])
    assert_allclose(loss.asscalar(), rpn_ref + rcnn_ref, rtol=1e-5)
    assert data[0][1].shape[0] > 0                            # the set itself has objects


@pytest.mark.parametrize("model, extra", [
    ("yolo3_mobilenet0.25_custom", ["--augment", "full"]),
    ("ssd_300_mobilenet0.25_custom", []),
    ("faster_rcnn_mobilenet0.25_custom", []),
], ids=["yolo3", "ssd", "faster_rcnn"])
def test_voc_negatives_train_on_one_image_per_device_with_accumulation(tmp_path, model, extra):
    root = shapes_voc(str(tmp_path / "voc"), train=6, val=4, empty_train=(0, 1, 3, 4), empty_val=(1,))
    detect.main(TINY + ["--dataset", f"voc:{root}", "--model", model, "--ctx", "cpu:0,cpu:1",
                        "--per-device", "1", "--batch-size", "4", "--out", str(tmp_path / "out")]
                + extra)
    history = (tmp_path / "out" / "history.csv").read_text().splitlines()
    loss = float(history[1].split(",")[history[0].split(",").index("loss")])
    assert np.isfinite(loss) and loss > 0
    assert (tmp_path / "out" / "model.json").is_file()


@pytest.mark.parametrize("model", ["yolo3_mobilenet0.25_custom", "ssd_300_mobilenet0.25_custom",
                                   "faster_rcnn_mobilenet0.25_custom"])
def test_recordio_negatives_train_in_batches(tmp_path, model):
    files = tmp_path / "train.rec", tmp_path / "val.rec"
    write_rec(files[0], with_empty_images(ShapesDetection("train", length=6), {0, 2, 3}))
    write_rec(files[1], with_empty_images(ShapesDetection("val", length=3), {2}, seed=1))
    train, _, _ = detect.load_detection(f"rec:{files[0]},{files[1]}")
    assert train[0][1].shape == (0, 6) and train[1][1].shape[0] > 0
    result = detect.train(detect.parse_args(
        TINY + ["--dataset", f"rec:{files[0]},{files[1]}", "--classes", ",".join(CLASSES),
                "--model", model, "--batch-size", "3", "--out", str(tmp_path / "out")]))
    assert np.isfinite(result["history"]["loss"][0]) and 0 <= result["map"] <= 1
