"""GluonCV detectors on gluonkit: models, data pipelines, training steps and VOC07 mAP.

The pieces the ``detect`` recipe is made of, usable on their own: a YOLOv3 or SSD from the
GluonCV model zoo (Faster R-CNN's own pieces are in ``rcnn``), GluonCV's own training
transforms and target generators at one input size per batch (fixed, multi-scale, or a few
buckets of the images' own sizes, padded so the boxes stay valid), a ``batch_fn`` per model
family for ``gluonkit.fit`` and an ``eval_fn`` that feeds GluonCV's ``VOC07MApMetric`` exactly
as GluonCV's training scripts do.
"""
import difflib
import warnings

import mxnet as mx
import numpy as np
from gluoncv import model_zoo
from gluoncv.data.batchify import Pad, Stack, Tuple
from gluoncv.data.transforms import bbox as tbbox
from gluoncv.data.transforms import experimental, presets
from gluoncv.data.transforms import image as timage
from gluoncv.loss import SSDMultiBoxLoss
from gluoncv.utils.metrics.voc_detection import VOC07MApMetric
from mxnet import autograd, gluon

from gluonkit.recipes import rcnn
from gluonkit.data import BucketSampler, DataLoader, MultiScaleDataset, seeded_loader
from gluonkit.nn import declare_norm_init, freeze_batchnorm
from gluonkit.split import split_and_load

__all__ = ["FAMILIES", "model_family", "build_detector", "nothing_to_freeze", "initialize",
           "one_image_network", "no_object_row", "YOLO3TrainTransform", "YOLO3FlipTrainTransform", "SSDTrainTransform",
           "train_transforms", "val_transforms", "train_batchify", "val_batchify", "SizedTransform",
           "BucketSizes", "bucket_sampler", "sample_shapes", "detection_loader", "nms_for_eval",
           "yolo3_batch_fn", "SSDBatch", "detection_eval_fn", "voc_metric"]

FAMILIES = ("yolo3", "ssd", "faster_rcnn")


def model_family(name):
    """'yolo3', 'ssd' or 'faster_rcnn' for a detector name; ``ValueError`` for anything else.

    YOLOv3 and SSD are GluonCV model-zoo names; Faster R-CNN is built here on GluonCV's
    ``FasterRCNN`` as 'faster_rcnn_<backbone>_custom' (``rcnn.BACKBONES``).
    """
    if rcnn.backbone_of(name):
        return "faster_rcnn"
    family = name.split("_", 1)[0]
    if family not in FAMILIES[:2] or name not in model_zoo.get_model_list():
        known = [n for n in model_zoo.get_model_list() if n.split("_", 1)[0] in FAMILIES[:2]]
        known += [f"faster_rcnn_{b}_custom" for b in rcnn.BACKBONES]
        close = difflib.get_close_matches(name, known, n=3)
        raise ValueError(f"--model {name!r} is not a GluonCV YOLOv3 or SSD model-zoo name nor a "
                         "Faster R-CNN (faster_rcnn_mobilenet0.25_custom, faster_rcnn_resnet18_v1b_custom)"
                         + (f" (close: {', '.join(close)})" if close else "")
                         + "; e.g. yolo3_mobilenet1.0_custom or ssd_512_mobilenet1.0_custom.")
    return family


def build_detector(name, classes, *, pretrained_base=False, batchnorm="plain", num_devices=1,
                   **rcnn_options):
    """A GluonCV detector for ``classes`` (a list of names), not yet initialized; its
    BatchNorm layers (SSD's extra layers too) start from Gluon's defaults when initialized.

    Parameters
    ----------
    name : str
        A YOLOv3 or SSD model-zoo name, e.g. 'yolo3_mobilenet1.0_custom', or a Faster R-CNN
        name, e.g. 'faster_rcnn_mobilenet0.25_custom'.
    classes : sequence of str
    pretrained_base : bool, default False
        Load the backbone's ImageNet weights (from ~/.mxnet/models, downloaded if missing).
    batchnorm : {'plain', 'frozen', 'sync'}, default 'plain'
        'frozen': BatchNorm layers use their running statistics (``gluonkit.nn.freeze_batchnorm``),
        for tiny per-device batches on a pretrained backbone; 'sync': MXNet's ``SyncBatchNorm``
        over ``num_devices`` devices (not Faster R-CNN, which sees one image per device); SSD's
        extra feature layers keep plain BatchNorm under 'sync' (GluonCV builds them as a symbol
        graph), and SSD refuses 'frozen' (none of its BatchNorm layers is a Gluon layer).
    num_devices : int, default 1
        Devices the batch is split over (for 'sync').
    **rcnn_options
        Faster R-CNN only: ``rcnn.build_faster_rcnn``'s scales, short, max_size, pretrained_file.
    """
    family = model_family(name)
    if batchnorm not in ("plain", "frozen", "sync"):
        raise ValueError(f"batchnorm must be 'plain', 'frozen' or 'sync', got {batchnorm!r}.")
    if family == "faster_rcnn":
        if batchnorm == "sync":
            raise ValueError("batchnorm 'sync' is for YOLOv3 and SSD; Faster R-CNN sees one image "
                             "per device: use 'frozen' (a pretrained backbone) or 'plain'.")
        net = rcnn.build_faster_rcnn(name, classes, pretrained_base=pretrained_base, **rcnn_options)
    else:
        if rcnn_options:
            raise TypeError(f"{', '.join(rcnn_options)}: options of Faster R-CNN, not of {name!r}.")
        norm = {}
        if batchnorm == "sync":
            norm = {"norm_layer": gluon.contrib.nn.SyncBatchNorm,
                    "norm_kwargs": {"num_devices": num_devices}}
        with warnings.catch_warnings():   # SSD's symbol-built layers: MXNet cannot tell the type yet
            warnings.filterwarnings("ignore", message="Cannot decide type")
            net = model_zoo.get_model(name, pretrained=False, pretrained_base=pretrained_base,
                                      classes=list(classes), **norm)
    declare_norm_init(net)      # SSD's extra layers: BatchNorm built as symbols declares no init
    if batchnorm == "frozen" and not freeze_batchnorm(net):
        raise ValueError(f"batchnorm 'frozen': {nothing_to_freeze(name)}; use 'plain' or 'sync'.")
    return net


def nothing_to_freeze(name):
    """Why the detector ``name`` (an SSD) takes no ``batchnorm='frozen'``, for a refusal."""
    return f"{name} has no Gluon BatchNorm layer to freeze (SSD's are inside the symbol graph of its features)"


def initialize(net, ctx):
    """Initialize ``net``'s parameters on the devices ``ctx``; those already loaded (the
    backbone's ``pretrained_base`` or ``pretrained_file`` weights, on the CPU) keep their
    values and are copied to ``ctx``, as every parameter must be on the same devices."""
    with warnings.catch_warnings():   # MXNet's note for each loaded parameter it leaves alone
        warnings.filterwarnings("ignore", message="Parameter '.*' is already initialized")
        net.initialize(ctx=ctx)
    net.collect_params().reset_ctx(ctx)
    return net


def one_image_network(net, name, classes, batchnorm):
    """The network GluonCV's training transforms may run on one image: ``net``, or for
    ``batchnorm='sync'`` a twin with plain BatchNorm (initialized on the CPU), as GluonCV's
    scripts do, since a SyncBatchNorm layer would wait there for the other devices. The
    transforms take only the anchors and feature shapes from it, which do not depend on the
    weights.
    """
    if batchnorm != "sync":
        return net
    twin = build_detector(name, classes)
    twin.initialize()
    return twin


def _ssd_anchors(net, size):
    """The SSD's anchors for inputs of ``size`` = (height, width), on the CPU."""
    device = next(iter(net.collect_params().values())).list_ctx()[0]
    with autograd.train_mode():
        _, _, anchors = net(mx.nd.zeros((1, 3) + tuple(size), ctx=device))
    return anchors.as_in_context(mx.cpu())


def no_object_row(boxes):
    """``boxes`` ([images,] objects, width; NumPy or NDArray) as GluonCV's target generators take them, or, for an
    image without objects, one row of -1: the padding GluonCV's batches give an image with
    fewer objects than the others, which its generators and losses read as no object, so every
    anchor of that image trains as background."""
    if boxes.shape[-2]:
        return boxes
    shape = boxes.shape[:-2] + (1, boxes.shape[-1])
    if isinstance(boxes, mx.nd.NDArray):
        return mx.nd.full(shape, -1, dtype=boxes.dtype)
    return np.full(shape, -1, boxes.dtype)


class _PaddedTargets:
    """A GluonCV YOLOv3 or SSD target generator whose boxes and ids (``at`` and ``at + 1`` of
    its arguments) get ``no_object_row`` first."""

    def __init__(self, generator, at):
        self.generator, self.at = generator, at

    def __call__(self, *args):
        args = list(args)
        args[self.at:self.at + 2] = [no_object_row(a) for a in args[self.at:self.at + 2]]
        return self.generator(*args)


class _SSDBackgroundTargets(_PaddedTargets):
    """``_PaddedTargets`` of GluonCV's SSD generator: for an image without objects the box
    targets are zeros, as for every anchor that matches no object (its encoder gives the anchor
    matched to the padding row log(0) targets: infinite, though no loss should read them)."""

    def __call__(self, anchors, cls_preds, gt_boxes, gt_ids):
        cls_targets, box_targets, box_masks = super().__call__(anchors, cls_preds, gt_boxes, gt_ids)
        if not gt_boxes.shape[1]:
            box_targets, box_masks = mx.nd.zeros_like(box_targets), mx.nd.zeros_like(box_masks)
        return cls_targets, box_targets, box_masks


class YOLO3TrainTransform(presets.yolo.YOLO3DefaultTrainTransform):
    """GluonCV's YOLOv3 training transform (colour, zoom-out, crop, flip, targets), which also
    takes images without objects: they train as background (``no_object_row``)."""

    @property
    def _target_generator(self):
        generator = super()._target_generator
        return None if generator is None else _PaddedTargets(generator, 4)

    def __call__(self, src, label):
        *sample, gt_boxes = super().__call__(src, label)
        return (*sample, no_object_row(gt_boxes))


class YOLO3FlipTrainTransform(YOLO3TrainTransform):
    """GluonCV's YOLOv3 training transform without its random expansion and crop.

    Colour jitter, a resize to the input size (random interpolation) and a random horizontal
    flip, then GluonCV's targets. Objects keep the sizes they have at validation, which is
    what a short schedule on a set like the embedded shapes needs; the zoom-out (up to 4x)
    and crops of the default transform pay off over long schedules on varied photographs.
    """

    def __call__(self, src, label):   # the base's set-up (size, anchors, targets) is reused as is
        height, width = src.shape[:2]
        image = timage.imresize(experimental.image.random_color_distort(src), self._width, self._height,
                                interp=np.random.randint(0, 5))
        bbox = tbbox.resize(label, (width, height), (self._width, self._height))
        image, flips = timage.random_flip(image, px=0.5)
        bbox = tbbox.flip(bbox, (self._width, self._height), flip_x=flips[0])
        image = mx.nd.image.normalize(mx.nd.image.to_tensor(image), mean=self._mean, std=self._std)
        gt_boxes = mx.nd.array(bbox[np.newaxis, :, :4])
        targets = self._target_generator(self._fake_x, self._feat_maps, self._anchors, self._offsets,
                                         gt_boxes, mx.nd.array(bbox[np.newaxis, :, 4:5]), None)
        return (image, *[t[0] for t in targets], no_object_row(gt_boxes)[0])


class SSDTrainTransform(presets.ssd.SSDDefaultTrainTransform):
    """GluonCV's SSD training transform (colour, zoom-out, crop, flip, targets), which also
    takes images without objects: they train as background (``no_object_row``)."""

    @property
    def _target_generator(self):
        generator = super()._target_generator
        return None if generator is None else _SSDBackgroundTargets(generator, 2)


def train_transforms(net, family, sizes, augment="full"):
    """GluonCV's default training transform (with targets) for each (height, width) in ``sizes``.

    The net must be initialized: YOLOv3's transform and SSD's anchors run it once per size.
    ``augment='flip'`` gives YOLOv3 ``YOLO3FlipTrainTransform`` (no zoom-out or crop).
    """
    if augment not in ("full", "flip"):
        raise ValueError(f"augment must be 'full' or 'flip', got {augment!r}.")
    made = {}
    for height, width in sizes:
        if family == "yolo3":
            preset = YOLO3FlipTrainTransform if augment == "flip" else YOLO3TrainTransform
            made[(height, width)] = preset(width, height, net)
        else:
            made[(height, width)] = SSDTrainTransform(
                width, height, _ssd_anchors(net, (height, width)))
    return made


def val_transforms(family, sizes):
    """GluonCV's default validation transform for each (height, width) in ``sizes``."""
    preset = presets.yolo.YOLO3DefaultValTransform if family == "yolo3" else \
        presets.ssd.SSDDefaultValTransform
    return {(h, w): preset(w, h) for h, w in sizes}


def train_batchify(family):
    """GluonCV's batchify of its training samples: image and targets stacked, boxes padded."""
    if family == "yolo3":   # image, 5 targets, then the boxes (a different number per image)
        return Tuple(*([Stack() for _ in range(6)] + [Pad(axis=0, pad_val=-1)]))
    return Tuple(Stack(), Stack(), Stack())   # image, class targets, box targets


def _pad_labels(labels):
    """Labels (N, 6) padded with -1 to the batch's most objects, one row at least."""
    return Pad(pad_val=-1)([no_object_row(np.asarray(label)) for label in labels])


def val_batchify():
    """Images stacked, labels (N, 6) padded with -1 to the batch's most objects (one row of -1
    for a batch of images without objects)."""
    return Tuple(Stack(), _pad_labels)


def _pad_to(image, size):
    """An (H, W, 3) image padded at the bottom and right to ``size`` (boxes stay valid)."""
    height, width = size
    if image.shape[0] > height or image.shape[1] > width:
        raise ValueError(f"an image of {image.shape[:2]} does not fit its bucket {size}.")
    out = mx.nd.zeros((height, width, image.shape[2]), dtype=image.dtype)
    out[:image.shape[0], :image.shape[1]] = image
    return out


class SizedTransform:
    """``transform(sample, size)`` for ``MultiScaleDataset``: the sample through ``by_size[size]``.

    With ``pad=True`` the image is first padded at the bottom and right to ``size`` (its
    bucket), so GluonCV's transform sees a picture of that size whose boxes are unchanged.
    """

    def __init__(self, by_size, pad=False):
        self.by_size, self.pad = by_size, bool(pad)

    def __call__(self, sample, size):
        image, label = sample
        if self.pad:
            image = _pad_to(image, size)
        return self.by_size[tuple(size)](image, label)


class BucketSizes(gluon.data.Sampler):
    """A ``BucketSampler``'s batches as ``(index, bucket size)`` pairs, for ``MultiScaleDataset``."""

    def __init__(self, sampler):
        self.sampler = sampler
        self._sizes = [sampler.buckets.shapes[b] for b in sampler.assignment]

    def state_dict(self):
        """The ``BucketSampler``'s ``state_dict()``: what ``fit`` checkpoints to resume exactly."""
        return self.sampler.state_dict()

    def load_state_dict(self, state):
        """As ``BucketSampler.load_state_dict``."""
        self.sampler.load_state_dict(state)

    def __iter__(self):
        return iter([[(i, self._sizes[i]) for i in batch] for batch in self.sampler])

    def __len__(self):
        return len(self.sampler)


def sample_shapes(dataset):
    """(3, H, W) of every (H, W, 3) image of a detection dataset (one pass over it)."""
    return [(3,) + tuple(dataset[i][0].shape[:2]) for i in range(len(dataset))]


def detection_loader(dataset, batch_sampler, transform, batchify_fn, num_workers=0, seed=None):
    """A DataLoader of ``dataset`` whose ``batch_sampler`` yields (index, size) pairs; with a
    ``seed``, every sample is augmented from a seed of its own (``gluonkit.data.seeded_loader``),
    so the batches are the same with any ``num_workers``."""
    dataset = MultiScaleDataset(dataset, transform)
    if seed is not None:
        return seeded_loader(dataset, batch_sampler, seed, batchify_fn=batchify_fn, num_workers=num_workers)
    return DataLoader(dataset, batch_sampler=batch_sampler, batchify_fn=batchify_fn, num_workers=num_workers)


def bucket_sampler(shapes, batch_size, buckets, shuffle, seed):
    """Batches of (index, bucket size): ``buckets`` (a number or a ``Buckets``) in pad mode,
    chosen from ``shapes`` as multiples of 32 (the detectors' stride)."""
    return BucketSizes(BucketSampler(shapes, batch_size, buckets, mode="pad", multiple=32,
                                     shuffle=shuffle, seed=seed))


def yolo3_batch_fn(net, batch, ctx_list):
    """``fit``'s ``batch_fn`` for YOLOv3: its own losses, summed per image; count = images.

    ``batch`` is what ``train_batchify('yolo3')`` makes: images, the five prefetched targets
    and the ground-truth boxes. As in GluonCV's ``train_yolo3.py`` the network, recording in
    training mode, returns the objectness, center, scale and class losses of every image.
    """
    parts = [split_and_load(field, ctx_list) for field in batch]
    losses = []
    for x, objectness, center, scale, weight, clas, gt_boxes in zip(*parts):
        obj_loss, center_loss, scale_loss, cls_loss = net(x, gt_boxes, objectness, center, scale,
                                                          weight, clas)
        losses.append(obj_loss + center_loss + scale_loss + cls_loss)
    return losses, batch[0].shape[0]


class SSDBatch:
    """``fit``'s ``batch_fn`` for SSD: GluonCV's ``SSDMultiBoxLoss``, normalized by positives.

    GluonCV's loss divides by the positive anchors of the whole batch; here that division is
    undone and the count of positives is returned for ``trainer.step``, so micro-batches and
    devices add up to exactly the large batch normalized by all its positives.

    Parameters
    ----------
    min_hard_negatives : int, default 3
        Each image's hard negatives are at least this many (GluonCV's default, 0, gives an
        image without objects no loss at all); an image with an object mines 3 per positive
        (``negative_mining_ratio``), so it is unchanged.
    **loss_kwargs
        Passed to ``SSDMultiBoxLoss`` (negative_mining_ratio, rho, lambd).
    """

    def __init__(self, min_hard_negatives=3, **loss_kwargs):
        self.loss = SSDMultiBoxLoss(min_hard_negatives=min_hard_negatives, **loss_kwargs)

    def __call__(self, net, batch, ctx_list):
        xs, cls_targets, box_targets = [split_and_load(field, ctx_list) for field in batch]
        cls_preds, box_preds = zip(*[net(x)[:2] for x in xs])
        sum_losses, _, _ = self.loss(list(cls_preds), list(box_preds), cls_targets, box_targets)
        positives = max(1, int(sum(float((t > 0).sum().asscalar()) for t in cls_targets)))
        return [loss * positives for loss in sum_losses], positives


def detection_eval_fn(net, batch, ctx_list):
    """``eval_fn`` of a detector, for GluonCV's ``VOC07MApMetric``.

    Per device, the outputs are ``(boxes, class ids, scores)`` and the labels
    ``(gt boxes, gt ids, gt difficult)``, the arguments of ``VOC07MApMetric.update`` in its
    order, so ``fit`` / ``evaluate`` give the metric what GluonCV's ``train_yolo3.py`` and
    ``train_ssd.py`` give it. The boxes are clipped to the image as there.
    """
    xs, ys = [split_and_load(field, ctx_list) for field in batch]
    outputs, labels = [], []
    for x, y in zip(xs, ys):
        ids, scores, bboxes = net(x)
        height, width = x.shape[2:]
        limit = mx.nd.array([width, height, width, height], ctx=x.context)
        outputs.append((mx.nd.broadcast_minimum(bboxes.clip(0, max(height, width)), limit), ids, scores))
        labels.append((y.slice_axis(axis=-1, begin=0, end=4), y.slice_axis(axis=-1, begin=4, end=5),
                       y.slice_axis(axis=-1, begin=5, end=6)))
    return outputs, labels


def voc_metric(classes, iou_thresh=0.5):
    """GluonCV's ``VOC07MApMetric``: the AP of every class (by name) and their 'mAP'."""
    return VOC07MApMetric(iou_thresh=iou_thresh, class_names=list(classes))


def nms_for_eval(net, family):
    """GluonCV's evaluation NMS settings (YOLOv3: 0.45 over the top 400)."""
    if family == "yolo3":
        net.set_nms(nms_thresh=0.45, nms_topk=400)
    return net

