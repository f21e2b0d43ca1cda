"""Faster R-CNN on gluonkit: GluonCV's network, transforms and losses, one image per device.

Faster R-CNN trains on images at their own sizes (the shorter side resized to ``short``, the
longer kept within ``max_size``), one image per forward pass, so a batch is a list of images
that are never padded to a common shape. ``FasterRCNNBatch`` computes, for every image, the
RPN and R-CNN losses as GluonCV's ``train_faster_rcnn.py`` does (each normalized by that
image's sampled anchors and sampled regions) and returns their sum per device with the number
of images as the count, so ``gluonkit.Trainer`` (with ``accumulate``) divides the gradient by
all the images of the update, exactly as GluonCV's loop with ``grad_req='add'`` and one
``trainer.step(images)``.

The backbones train from scratch on a CPU (``pretrained_base=False``) or start from a file of
ImageNet weights of the same GluonCV network (``pretrained_file``).
"""
import math

import mxnet as mx
import numpy as np
from gluoncv.data.transforms import presets
from gluoncv.model_zoo import get_mobilenet
from gluoncv.model_zoo.rcnn.faster_rcnn.faster_rcnn import get_faster_rcnn
from gluoncv.model_zoo.resnetv1b import resnet18_v1b
from gluoncv.nn.coder import SigmoidClassEncoder
from mxnet import gluon

__all__ = ["BACKBONES", "backbone_of", "build_faster_rcnn", "place_target_generator", "fit_rpn_scales",
           "FasterRCNNTrainTransform", "train_transform", "val_transform", "train_batchify",
           "val_batchify", "FasterRCNNBatch", "eval_fn"]

BACKBONES = ("mobilenet0.25", "resnet18_v1b")
ZOO_SCALES = (8, 16, 32)          # GluonCV's anchor scales (x 16 px) for 600 px images
_STRIDE = 16                      # both backbones' features end at 1/16 of the input
_MAX_SEED = 2 ** 31 - 1           # region seeds are below it (mx.random.seed takes an int32)


def backbone_of(name):
    """The backbone of a Faster R-CNN name 'faster_rcnn_<backbone>_custom', else None."""
    prefix, suffix = "faster_rcnn_", "_custom"
    if name.startswith(prefix) and name.endswith(suffix):
        backbone = name[len(prefix):-len(suffix)]
        return backbone if backbone in BACKBONES else None
    return None


def _split_backbone(backbone, pretrained_base, pretrained_file):
    """(features up to stride 16, top features to stride 32) of a GluonCV classifier."""
    if backbone == "mobilenet0.25":
        base = get_mobilenet(0.25, pretrained=pretrained_base)
    else:
        base = resnet18_v1b(pretrained=pretrained_base)
    if pretrained_file:
        try:
            base.load_parameters(pretrained_file, ignore_extra=True)
        except (mx.base.MXNetError, AssertionError, ValueError, OSError) as err:
            raise ValueError(f"--pretrained-file {pretrained_file} is not a parameter file of "
                             f"GluonCV's {backbone} ({str(err).splitlines()[0][:200]}); pass the "
                             f"weights of that network (mxnet .params).") from None
    if backbone == "mobilenet0.25":   # the stages GluonCV's YOLOv3 takes at strides 16 and 32
        return base.features[:69], base.features[69:-2]
    features, top = gluon.nn.HybridSequential(), gluon.nn.HybridSequential()
    for layer in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3"):
        features.add(getattr(base, layer))
    top.add(base.layer4)
    return features, top


def build_faster_rcnn(name, classes, *, scales=ZOO_SCALES, short=600, max_size=1000,
                      pretrained_base=False, pretrained_file=None, images_per_device=1):
    """GluonCV's ``FasterRCNN`` for ``classes`` on the backbone of ``name``, not initialized.

    Parameters
    ----------
    name : str
        'faster_rcnn_mobilenet0.25_custom' or 'faster_rcnn_resnet18_v1b_custom'.
    classes : sequence of str
    scales : sequence of float, default (8, 16, 32)
        Anchor sizes in units of the 16-pixel stride (GluonCV's for 600 px VOC images); each
        at aspect ratios 0.5, 1 and 2. ``fit_rpn_scales`` fits them to a dataset.
    short, max_size : int
        The input sizes the network is told it sees (its attributes, as in GluonCV).
    pretrained_base : bool
        Download GluonCV's ImageNet weights of the backbone.
    pretrained_file : str, optional
        A ``.params`` file of the backbone network (e.g. GluonCV's ``mobilenet0.25``) to start from.
    images_per_device : int, default 1
        Images per forward pass in training (GluonCV's ``per_device_batch_size``); more than
        one needs them padded to one shape, as GluonCV's ``FasterRCNNTrainBatchify`` does.
    """
    backbone = backbone_of(name)
    if backbone is None:
        raise ValueError(f"{name!r} is not a Faster R-CNN name; use one of "
                         + ", ".join(f"faster_rcnn_{b}_custom" for b in BACKBONES) + ".")
    features, top = _split_backbone(backbone, pretrained_base, pretrained_file)
    # the RPN keeps at most as many proposals as the smallest image (short x short) has anchors
    anchors = (short // _STRIDE) ** 2 * len(scales) * 3
    proposals = min(500, anchors)
    return get_faster_rcnn(
        backbone, "custom", features=features, top_features=top, classes=list(classes),
        short=short, max_size=max_size, train_patterns=None, roi_mode="align", roi_size=(14, 14),
        strides=_STRIDE, clip=math.log(1000 / 16), rpn_channel=256, base_size=_STRIDE,
        scales=tuple(scales), ratios=(0.5, 1, 2), alloc_size=(128, 128),
        rpn_train_pre_nms=2000, rpn_train_post_nms=proposals, rpn_test_pre_nms=1000,
        rpn_test_post_nms=min(100, proposals), rpn_min_size=8, num_sample=min(128, proposals),
        pos_iou_thresh=0.5, pos_ratio=0.25, max_num_gt=100, per_device_batch_size=images_per_device)


def proposal_cells(net):
    """``[stride, cells]``: the fewest feature-map cells (of ``stride`` pixels) an input of
    ``net`` needs, as its RPN keeps its test-time proposals out of the anchors of every cell
    (an input with fewer fails inside the graph); the ``min_cells`` of its preprocessing."""
    per_cell = net.rpn.anchor_generator.num_depth
    return [_STRIDE, -(-net.rpn.get_test_post_nms() // per_cell)]


def place_target_generator(net, ctx):
    """Put the network's R-CNN target generator on the devices ``ctx`` (GluonCV creates it on
    the CPU when first used), as GluonCV's ``ForwardBackwardTask`` does; returns ``net``."""
    net.target_generator.collect_params().reset_ctx(ctx)
    return net


def _resized(height, width, short, max_size):
    """The scale GluonCV's ``resize_short_within`` applies to an image of (height, width)."""
    return min(short / min(height, width), max_size / max(height, width))


def fit_rpn_scales(dataset, short, max_size, count=5):
    """Anchor scales (x 16 px) at the ``count`` evenly spread quantiles of the boxes' sizes
    (square root of their area) once the images are resized as ``short``/``max_size`` say."""
    sizes = []
    for i in range(len(dataset)):
        image, label = dataset[i]
        scale = _resized(image.shape[0], image.shape[1], short, max_size)
        sizes.append(np.sqrt(np.prod(np.maximum(label[:, 2:4] - label[:, 0:2], 0), axis=1)) * scale)
    sizes = np.concatenate(sizes)
    if not (sizes > 0).any():
        raise ValueError("fit_rpn_scales found no box with an area; pass a dataset with boxes.")
    quantiles = np.quantile(sizes[sizes > 0], np.linspace(0.1, 0.9, count))
    return tuple(float(s) for s in np.round(quantiles / _STRIDE, 2))


class _BackgroundRPNTargets:
    """GluonCV's ``RPNTargetGenerator``, and for an image without objects (no box to match)
    the targets its sampler gives anchors that overlap nothing: every anchor inside the image
    a negative (IoU 0 is below ``neg_iou_thresh``), ``num_sample`` of them kept at random,
    the others and the anchors across the border ignored; no box targets."""

    def __init__(self, generator, num_sample):
        self.generator, self.num_sample = generator, num_sample
        self.cls_encoder = SigmoidClassEncoder()

    def __call__(self, bbox, anchor, width, height):
        if bbox.shape[0]:
            return self.generator(bbox, anchor, width, height)
        x0, y0, x1, y1 = anchor.asnumpy().T
        samples = np.where((x0 >= 0) & (y0 >= 0) & (x1 < width) & (y1 < height), -1.0, 0.0)
        negatives = np.flatnonzero(samples < 0)
        if len(negatives) > self.num_sample:
            samples[np.random.choice(negatives, len(negatives) - self.num_sample, replace=False)] = 0
        cls_target, _ = self.cls_encoder(samples)
        return cls_target, np.zeros((len(samples), 4), np.float32), np.zeros((len(samples), 4), np.float32)


class FasterRCNNTrainTransform(presets.rcnn.FasterRCNNDefaultTrainTransform):
    """GluonCV's Faster R-CNN training transform (resize, random flip, RPN targets), which also
    takes images without objects: the RPN's anchors train as background (and the batch's label,
    one row of -1, makes the R-CNN's regions background too).

    Each sample ends with a sixth item, the image's region seed: an int drawn from NumPy's
    generator, so under gluonkit's per-sample seeds it depends on the sample alone.
    ``FasterRCNNBatch`` seeds MXNet with it before the image's forward pass, in which the
    R-CNN samples its regions from MXNet's generator: the same image then samples the same
    regions on any device, worker or number of workers.
    """

    @property
    def _target_generator(self):
        generator = super()._target_generator
        return None if generator is None else _BackgroundRPNTargets(generator, self._num_sample)

    def __call__(self, src, label):
        return (*super().__call__(src, label), int(np.random.randint(_MAX_SEED)))


def train_transform(net, short, max_size):
    """GluonCV's Faster R-CNN training transform (resize, random flip, RPN targets), taking
    images without objects too, each sample with its region seed (``FasterRCNNTrainTransform``)."""
    return FasterRCNNTrainTransform(short, max_size, net, ashape=net.ashape)


def val_transform(short, max_size):
    """GluonCV's Faster R-CNN validation transform (resize the shorter side within max_size)."""
    return presets.rcnn.FasterRCNNDefaultValTransform(short, max_size)


def _rpn_targets(levels, shape):
    """One image's per-level RPN targets (h, w, k) as GluonCV's batchify flattens them."""
    arrays = [t.asnumpy() if isinstance(t, mx.nd.NDArray) else np.asarray(t) for t in levels]
    return mx.nd.array(np.concatenate([a.reshape(shape) for a in arrays], axis=1))


def _batch_label(label):
    """One image's label (N, 6) as a (1, N, 6) NDArray; for an image without objects one row of
    -1, the padding of GluonCV's batches, which the network's sampler and the metric skip."""
    label = np.asarray(label.asnumpy() if isinstance(label, mx.nd.NDArray) else label)
    return mx.nd.array(label if len(label) else np.full((1, label.shape[1]), -1)).expand_dims(0)


def train_batchify(samples):
    """A list of per-image tuples (image, label, RPN class, box and mask targets, region seed),
    every array with a batch axis of one: the images keep their own sizes (nothing is padded)."""
    return [(image.expand_dims(0), _batch_label(label), _rpn_targets(cls, (1, -1)),
             _rpn_targets(box, (1, -1, 4)), _rpn_targets(mask, (1, -1, 4)), seed)
            for image, label, cls, box, mask, seed in samples]


def val_batchify(samples):
    """A list of per-image (image (1, 3, H, W), label (1, N, 6)) pairs (boxes in the resized
    image's pixels; the transform's scale back to the original is left out)."""
    return [(image.expand_dims(0), _batch_label(label)) for image, label, _ in samples]


def _per_device(batch, ctx_list):
    """(sample, device): consecutive samples per device, counts differing by at most one."""
    parts = np.array_split(np.arange(len(batch)), len(ctx_list))
    return [(batch[i], ctx) for part, ctx in zip(parts, ctx_list) for i in part]


class FasterRCNNBatch:
    """``fit``'s ``batch_fn`` for Faster R-CNN: each image alone on its device; per device the
    sum of its images' losses; count = images.

    Per image, as GluonCV's ``train_faster_rcnn.py`` computes them: the RPN's sigmoid
    cross-entropy and smooth-L1 (``rpn_rho``) over the sampled anchors and the R-CNN's softmax
    cross-entropy and smooth-L1 (``rcnn_rho``) over the sampled regions, each summed and
    divided by the number sampled. Before each image's forward pass MXNet's generator of its
    device is seeded with the image's region seed (the last item ``train_batchify`` gives).
    """

    def __init__(self, rpn_rho=1 / 9, rcnn_rho=1.0):
        self.rpn_cls_loss = gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)
        self.rpn_box_loss = gluon.loss.HuberLoss(rho=rpn_rho)
        self.rcnn_cls_loss = gluon.loss.SoftmaxCrossEntropyLoss()
        self.rcnn_box_loss = gluon.loss.HuberLoss(rho=rcnn_rho)

    def image_loss(self, net, image, label, rpn_cls_targets, rpn_box_targets, rpn_box_masks):
        """The loss of one image (arrays with a batch axis of one), a (1,) NDArray."""
        cls_pred, box_pred, _, _, _, rpn_score, rpn_box, _, cls_targets, box_targets, box_masks, _ = \
            net(image, label[:, :, :4], label[:, :, 4:5])
        rpn_score = rpn_score.squeeze(axis=-1)
        rpn_sampled = (rpn_cls_targets >= 0).sum().clip(1, float("inf"))   # 0: no anchor inside
        rpn_loss = (self.rpn_cls_loss(rpn_score, rpn_cls_targets, rpn_cls_targets >= 0)
                    * rpn_cls_targets.size / rpn_sampled
                    + self.rpn_box_loss(rpn_box, rpn_box_targets, rpn_box_masks) * rpn_box.size / rpn_sampled)
        rcnn_sampled = (cls_targets >= 0).sum().clip(1, float("inf"))
        rcnn_loss = (self.rcnn_cls_loss(cls_pred, cls_targets, cls_targets.expand_dims(-1) >= 0)
                     * cls_targets.size / rcnn_sampled
                     + self.rcnn_box_loss(box_pred, box_targets, box_masks) * box_pred.size / rcnn_sampled)
        return rpn_loss.sum() + rcnn_loss.sum()

    def __call__(self, net, batch, ctx_list):
        by_device = {}
        for (*arrays, seed), ctx in _per_device(batch, ctx_list):
            mx.random.seed(seed, ctx=ctx)
            loss = self.image_loss(net, *[a.as_in_context(ctx) for a in arrays])
            by_device[ctx] = loss if ctx not in by_device else by_device[ctx] + loss
        return list(by_device.values()), len(batch)


def eval_fn(net, batch, ctx_list):
    """``eval_fn`` of Faster R-CNN for GluonCV's ``VOC07MApMetric``: per image, the outputs
    ``(boxes, class ids, scores)`` (boxes clipped to the image) and the labels
    ``(gt boxes, gt ids, gt difficult)``, in the resized image's pixels."""
    outputs, labels = [], []
    for (image, label), ctx in _per_device(batch, ctx_list):
        image, label = image.as_in_context(ctx), label.as_in_context(ctx)
        ids, scores, bboxes = net(image)
        height, width = image.shape[2:]
        limit = mx.nd.array([width, height, width, height], ctx=ctx)
        outputs.append((mx.nd.broadcast_minimum(bboxes.clip(0, max(height, width)), limit), ids, scores))
        labels.append((label[:, :, :4], label[:, :, 4:5], label[:, :, 5:6]))
    return outputs, labels
