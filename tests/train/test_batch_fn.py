"""fit(batch_fn=...) and eval_fn against hand-written loops: GluonCV's YOLOv3 over two devices,
exact mid-epoch resume, VOC mAP and segmentation metrics, the history's loss and grad_norm."""
import os
import signal

import mxnet as mx
import numpy as np
import pytest
from gluoncv import model_zoo
from gluoncv.data.transforms.presets.yolo import YOLO3DefaultTrainTransform
from gluoncv.utils.metrics import SegmentationMetric, VOC07MApMetric
from mxnet import autograd, gluon

import gluonkit
from gluonkit.callbacks import Callback, ModelCheckpoint
from gluonkit.train.tally import Tally

TWO = [mx.cpu(0), mx.cpu(1)]
CLASSES = ["box", "disc"]


def yolo(path=None):
    net = model_zoo.get_model("yolo3_mobilenet1.0_custom", classes=CLASSES, pretrained=False,
                              pretrained_base=False)
    if path is None:
        net.initialize(mx.init.Xavier(magnitude=0.5), ctx=TWO)
        net(mx.nd.zeros((1, 3, 64, 64), ctx=TWO[0]))        # finish deferred initialization
    else:
        net.load_parameters(str(path), ctx=TWO)
    return net


def detection_samples(sizes, seed=0):
    """(image, 5 YOLO targets, boxes) per image, made by GluonCV's own train transform."""
    rng = np.random.RandomState(seed)
    maker = model_zoo.get_model("yolo3_mobilenet1.0_custom", classes=CLASSES, pretrained=False,
                                pretrained_base=False)
    maker.initialize()
    samples = []
    np.random.seed(seed)
    for i, size in enumerate(sizes):
        image = mx.nd.array(rng.uniform(0, 255, (size, size, 3)), dtype="uint8")
        rows = []
        for k in range(1 + i % 3):                          # 1 to 3 boxes: ragged labels
            x0, y0 = rng.uniform(0, size / 2, 2)
            rows.append([x0, y0, x0 + size / 3, y0 + size / 4, k % 2])
        samples.append(YOLO3DefaultTrainTransform(size, size, maker, mixup=False)(
            image, np.array(rows, dtype="float32")))
    return samples


def yolo_batch_fn(net, batch, ctx_list):
    """GluonCV's YOLOv3 training step: the network takes targets and returns its losses."""
    fields = list(zip(*batch))
    images = gluonkit.split_and_load(list(fields[0]), ctx_list)
    targets = [gluonkit.split_and_load(list(f), ctx_list) for f in fields[1:6]]
    boxes = gluonkit.split_and_load(list(fields[6]), ctx_list, pad_value=-1)
    losses = []
    for i, x in enumerate(images):
        parts = net(mx.nd.stack(*x), boxes[i], *[mx.nd.stack(*t[i]) for t in targets])
        losses.append(mx.nd.add_n(*parts))
    return losses, len(batch)


def test_yolo3_through_fit_equals_a_hand_written_loop(tmp_path):
    """Two CPU devices, one image per device, image sizes changing per micro-batch, accumulate=2."""
    sizes = [64, 96, 96, 64, 64, 64, 96, 64, 64, 96]   # 5 micro-batches: windows 2, 2, 1 (flushed)
    samples = detection_samples(sizes)
    batches = [samples[i:i + 2] for i in range(0, len(samples), 2)]
    yolo().save_parameters(str(tmp_path / "init.params"))

    net = yolo(tmp_path / "init.params")
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                               accumulate=2)
    history = gluonkit.fit(net, None, trainer, batches, epochs=2, ctx=TWO, batch_fn=yolo_batch_fn,
                           progress=False)

    ref = yolo(tmp_path / "init.params")
    by_hand = gluonkit.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                               accumulate=2)
    epoch_losses = []
    for _ in range(2):
        total = 0.0
        for batch in batches:
            with autograd.record():
                losses = []
                for sample, ctx in zip(batch, TWO):
                    x, *targets, boxes = [a.as_in_context(ctx).expand_dims(0) for a in sample]
                    losses.append(mx.nd.add_n(*ref(x, boxes, *targets)))
            autograd.backward(losses)
            by_hand.step(len(batch))
            total += sum(float(v.sum().asscalar()) for v in losses)
        by_hand.flush()
        epoch_losses.append(total / len(samples))
    for (name, a), b in zip(ref.collect_params().items(), net.collect_params().values()):
        for ctx in TWO:
            np.testing.assert_allclose(b.data(ctx).asnumpy(), a.data(ctx).asnumpy(), rtol=1e-6,
                                       atol=1e-6, err_msg=name)
    np.testing.assert_allclose(history["loss"], epoch_losses, rtol=1e-6)
    assert history["epoch"] == [1, 2]


def test_yolo3_eval_fn_feeds_voc07_map_like_the_metric_fed_by_hand():
    samples = detection_samples([64, 96, 64, 128], seed=4)
    net = yolo()
    data = [[(s[0], mx.nd.concat(s[6], mx.nd.array(np.full((s[6].shape[0], 1), i % 2)), dim=1))
             for i, s in enumerate(samples[j:j + 2])] for j in (0, 2)]

    def eval_fn(net, batch, ctx_list):
        images = gluonkit.split_and_load([x for x, _ in batch], ctx_list)
        labels = gluonkit.split_and_load([y for _, y in batch], ctx_list, pad_value=-1)
        outputs, truths = [], []
        for x, y in zip(images, labels):
            ids, scores, boxes = net(mx.nd.stack(*x))
            outputs.append((boxes, ids, scores))
            truths.append((y.slice_axis(axis=-1, begin=0, end=4), y.slice_axis(axis=-1, begin=4, end=5)))
        return outputs, truths

    got = gluonkit.evaluate(net, data, ctx=TWO, metrics=VOC07MApMetric(class_names=CLASSES),
                            eval_fn=eval_fn)
    by_hand = VOC07MApMetric(class_names=CLASSES)
    for batch in data:
        for x, y in batch:
            ids, scores, boxes = net(x.expand_dims(0).as_in_context(TWO[0]))
            by_hand.update(boxes, ids, scores, y.expand_dims(0)[:, :, :4], y.expand_dims(0)[:, :, 4:5])
    names, values = by_hand.get()
    assert list(got) == names
    np.testing.assert_allclose([got[n] for n in names], values, rtol=1e-6)
    assert "mAP" in got

    class TakesFour(VOC07MApMetric):
        def update(self, pred_bboxes, pred_labels, gt_bboxes, gt_labels):
            raise AssertionError("never called")
    with pytest.raises(TypeError, match=r"TakesFour.update takes 4 to 4 arrays but .* give 5"):
        gluonkit.evaluate(net, data, ctx=TWO, metrics=TakesFour(class_names=CLASSES), eval_fn=eval_fn)


def segmentation_data(n=12, seed=2):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2, 6, 6).astype("float32")
    y = (x[:, 0] > 0).astype("float32") + (x[:, 1] > 1).astype("float32")
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=4)


def seg_net():
    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(8, 3, padding=1, activation="relu"), gluon.nn.Conv2D(3, 1))
    net.initialize(mx.init.Xavier(), ctx=TWO)
    return net


PIXEL_LOSS = gluon.loss.SoftmaxCrossEntropyLoss(axis=1)


def seg_batch_fn(net, batch, ctx_list):
    """Per-pixel losses normalized by the number of pixels."""
    data, label = batch
    xs, ys = gluonkit.split_and_load(data, ctx_list), gluonkit.split_and_load(label, ctx_list)
    outputs = [net(x) for x in xs]
    losses = [PIXEL_LOSS(out, y) * y[0].size for out, y in zip(outputs, ys)]   # pixel sums
    return losses, label.size, outputs, ys


def seg_eval_fn(net, batch, ctx_list):
    data, label = batch
    return [net(x) for x in gluonkit.split_and_load(data, ctx_list)], \
        gluonkit.split_and_load(label, ctx_list)


def test_segmentation_metric_through_eval_fn_and_loss_per_pixel():
    loader = segmentation_data()
    net = seg_net()
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    history = gluonkit.fit(net, None, trainer, loader, epochs=1, ctx=TWO, batch_fn=seg_batch_fn,
                           val_data=loader, eval_fn=seg_eval_fn, metrics=SegmentationMetric(3),
                           progress=False)
    by_hand = SegmentationMetric(3)
    for x, y in loader:
        by_hand.update([y], [net(x.as_in_context(TWO[0]))])
    pix_acc, miou = by_hand.get()
    assert history["val_pixAcc"] == [pytest.approx(pix_acc)]
    assert history["val_mIoU"] == [pytest.approx(miou)]
    assert {"pixAcc", "mIoU", "loss"} <= set(history)

    net2 = seg_net()                          # the 'loss' is the sum of the losses over the counts
    trainer2 = gluonkit.Trainer(net2.collect_params(), "sgd", {"learning_rate": 0.0})
    history2 = gluonkit.fit(net2, None, trainer2, loader, epochs=1, ctx=TWO, batch_fn=seg_batch_fn,
                            progress=False)
    pixel_sum = sum(PIXEL_LOSS(net2(x.as_in_context(TWO[0])), y.as_in_context(TWO[0])).sum().asscalar()
                    for x, y in loader) * 36
    assert history2["loss"] == [pytest.approx(pixel_sum / (12 * 36), rel=1e-5)]


class NormTrainer(gluonkit.Trainer):
    """Sets ``global_norm`` after each update to a known value, the samples of its window, as a
    Trainer that clips gradients reports the update's norm."""

    global_norm = None   # a plain attribute in place of the Trainer's measured, read-only one

    def step(self, batch_size, ignore_stale_grad=False):
        return self._report(self.pending[1] + batch_size, super().step(batch_size, ignore_stale_grad))

    def flush(self):
        return self._report(self.pending[1], super().flush())

    def _report(self, window, updated):
        if updated:
            self.global_norm = float(window)
            self.norms = getattr(self, "norms", []) + [self.global_norm]
        return updated


def dense_batch_fn(net, batch, ctx_list):
    x, y = batch
    xs, ys = gluonkit.split_and_load(x, ctx_list), gluonkit.split_and_load(y, ctx_list)
    outputs = [net(a) for a in xs]
    return [LOSS(o, b) for o, b in zip(outputs, ys)], x.shape[0], outputs, ys


LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def dense_net(ctx, seed=1):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=6, activation="relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    return net


def dense_loader(n=44, seed=3):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 6).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32") + (x[:, 2] > 1).astype("int32")
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=8, shuffle=True)


def test_history_grad_norm_is_the_epoch_mean_of_the_trainers_global_norm():
    net = dense_net(TWO)
    trainer = NormTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, accumulate=2)
    history = gluonkit.fit(net, None, trainer, dense_loader(), epochs=2, ctx=TWO,
                           batch_fn=dense_batch_fn, progress=False)
    # 44 samples in batches of 8: windows of 16, 16, 12 (the last flushed) per epoch
    assert trainer.norms == [16.0, 16.0, 12.0] * 2
    assert history["grad_norm"] == [pytest.approx(44 / 3)] * 2
    plain = gluonkit.fit(net, None, gluonkit.Trainer(net.collect_params(), "sgd"), dense_loader(),
                         epochs=1, ctx=TWO, batch_fn=dense_batch_fn, progress=False)
    assert "grad_norm" not in plain


class StopAt(Callback):
    def __init__(self, epoch, batch):
        self.at = (epoch, batch)

    def on_batch_end(self, state):
        if (state.epoch, state.batch) == self.at:
            os.kill(os.getpid(), signal.SIGINT)


def run(tmp_path, name, callbacks=(), resume=False):
    net = dense_net(TWO, seed=7 if resume else 1)
    cbs = list(callbacks) + ([ModelCheckpoint(tmp_path / name, resume=resume)] if name else [])
    history = gluonkit.fit(net, None, NormTrainer(net.collect_params(), "sgd",
                                                  {"learning_rate": 0.2, "momentum": 0.9},
                                                  accumulate=2),
                           dense_loader(), epochs=3, ctx=TWO, metrics="acc", callbacks=cbs,
                           batch_fn=dense_batch_fn, progress=False)
    return {k: p.data(TWO[1]).asnumpy() for k, p in net._collect_params_with_prefix().items()}, history


def test_mid_epoch_resume_with_batch_fn_is_exact(tmp_path, monkeypatch):
    monkeypatch.setattr(Tally, "METRIC_BATCHES", 2)
    np.random.seed(0)
    straight, history = run(tmp_path, None)
    np.random.seed(0)
    with pytest.raises(KeyboardInterrupt):                  # batch 3 of epoch 2: mid-window
        run(tmp_path, "b", callbacks=[StopAt(1, 3)])
    np.random.seed(99)
    resumed, resumed_history = run(tmp_path, "b", resume=True)
    for k in straight:
        np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)
    for key in ("loss", "accuracy", "grad_norm"):
        assert resumed_history[key] == history[key], key


def test_batch_fn_mistakes_are_named():
    net = dense_net([mx.cpu()])
    trainer = gluonkit.Trainer(net.collect_params(), "sgd")
    data = dense_loader(16)
    with pytest.raises(ValueError, match="loss is None; pass a gluon.loss.Loss, or a batch_fn"):
        gluonkit.fit(net, None, trainer, data, epochs=1, progress=False)
    with pytest.raises(TypeError, match="batch_fn must be a function"):
        gluonkit.fit(net, None, trainer, data, epochs=1, batch_fn=3, progress=False)

    def bad(result):
        return lambda net, batch, ctx: result(net, batch, ctx)
    with pytest.raises(TypeError, match=r"return \(losses, count\) or"):
        gluonkit.fit(net, None, trainer, data, epochs=1, progress=False,
                     batch_fn=bad(lambda n, b, c: dense_batch_fn(n, b, c)[0]))
    with pytest.raises(ValueError, match="the count -1 for batch 0"):
        gluonkit.fit(net, None, trainer, data, epochs=1, progress=False,
                     batch_fn=bad(lambda n, b, c: (dense_batch_fn(n, b, c)[0], -1)))
    with pytest.raises(ValueError, match=r"metrics need outputs and labels.*\(losses, count, outputs"):
        gluonkit.fit(net, None, trainer, data, epochs=1, progress=False, metrics="acc",
                     batch_fn=bad(lambda n, b, c: dense_batch_fn(n, b, c)[:2]))


def test_counts_given_as_ndarrays_on_the_devices_give_the_same_training_and_loss():
    def on_device(net, batch, ctx_list):
        losses, count, outputs, labels = seg_batch_fn(net, batch, ctx_list)
        valid = mx.nd.add_n(*[(y >= 0).sum().as_in_context(ctx_list[0]) for y in labels])
        return losses, valid, outputs, labels            # = count, computed on the devices

    histories, nets = [], []
    for fn in (seg_batch_fn, on_device):
        net = seg_net()
        trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}, accumulate=2)
        histories.append(gluonkit.fit(net, None, trainer, segmentation_data(), epochs=2, ctx=TWO,
                                      batch_fn=fn, progress=False))
        nets.append(net)
    assert histories[1]["loss"] == pytest.approx(histories[0]["loss"], rel=1e-6)
    for a, b in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        np.testing.assert_array_equal(a.data(TWO[0]).asnumpy(), b.data(TWO[0]).asnumpy())


def test_a_batch_fn_without_outputs_leaves_the_metrics_to_validation():
    """A detector in training mode returns losses only: metrics are measured on val_data."""
    loader = segmentation_data()
    histories = []
    for returns_outputs in (True, False):
        net = seg_net()
        trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})

        def batch_fn(net, batch, ctx_list):
            result = seg_batch_fn(net, batch, ctx_list)
            return result if returns_outputs else result[:2]
        histories.append(gluonkit.fit(net, None, trainer, loader, epochs=2, ctx=TWO, batch_fn=batch_fn,
                                      val_data=loader, eval_fn=seg_eval_fn,
                                      metrics=SegmentationMetric(3), progress=False))
    with_outputs, without = histories
    assert "pixAcc" in with_outputs and "pixAcc" not in without and "mIoU" not in without
    for key in ("loss", "val_pixAcc", "val_mIoU"):
        assert without[key] == pytest.approx(with_outputs[key], rel=1e-6), key

    net = seg_net()                               # without val_data the metrics would see nothing
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    with pytest.raises(ValueError, match="pass val_data"):
        gluonkit.fit(net, None, trainer, loader, epochs=1, ctx=TWO, metrics=SegmentationMetric(3),
                     batch_fn=lambda n, b, c: seg_batch_fn(n, b, c)[:2], progress=False)


def test_a_micro_batch_without_positives_is_part_of_its_window():
    """A count of 0 (no positive anchor in the batch) adds gradients of 0 and no count."""
    batches = list(dense_loader(24))

    def batch_fn(net, batch, ctx_list):
        if batch is None:                          # a batch whose loss is 0, as with no positives
            return [net(mx.nd.zeros((2, 6), ctx=ctx_list[0])).sum() * 0], 0
        return dense_batch_fn(net, batch, ctx_list)[:2]
    net = dense_net(TWO)
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.3}, accumulate=2)
    gluonkit.fit(net, None, trainer, [None] + batches, epochs=1, ctx=TWO, batch_fn=batch_fn,
                 progress=False)

    ref = dense_net(TWO)                           # the windows (empty, b0) and (b1, b2) by hand
    trainer = gluonkit.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.3}, accumulate=2)
    for window in ([batches[0]], batches[1:3]):
        for batch in window:
            with autograd.record():
                losses, count = dense_batch_fn(ref, batch, TWO)[:2]
            autograd.backward(losses)
            trainer.step(count)
        trainer.flush()
    for a, b in zip(ref.collect_params().values(), net.collect_params().values()):
        np.testing.assert_allclose(b.data(TWO[0]).asnumpy(), a.data(TWO[0]).asnumpy(), rtol=1e-6, atol=1e-7)


def test_one_device_may_return_arrays_instead_of_lists():
    """On one device a batch_fn or eval_fn may return its outputs and labels as bare arrays
    (as a hand-written loop has them), not lists over the devices: the same numbers."""
    def bare_batch_fn(net, batch, ctx_list):
        losses, count, outputs, labels = dense_batch_fn(net, batch, ctx_list)
        return losses[0], count, outputs[0], labels[0]

    def eval_fn(net, batch, ctx_list, bare):
        outputs, labels = dense_batch_fn(net, batch, ctx_list)[2:]
        return (outputs[0], labels[0]) if bare else (outputs, labels)

    histories = []
    for bare in (False, True):
        np.random.seed(0)
        net = dense_net([mx.cpu()])
        trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        history = gluonkit.fit(net, None, trainer, dense_loader(), epochs=2, metrics=["acc", "mae"],
                               batch_fn=bare_batch_fn if bare else dense_batch_fn,
                               val_data=dense_loader(16), progress=False,
                               eval_fn=lambda n, b, c, bare=bare: eval_fn(n, b, c, bare))
        histories.append({k: v for k, v in history.items() if k not in ("time", "samples_per_sec")})
        scores = []
        for fn in (lambda n, b, c, bare=bare: eval_fn(n, b, c, bare), None):
            np.random.seed(1)                                    # the same shuffled order
            scores.append(gluonkit.evaluate(net, dense_loader(16), metrics=["acc", "mae"], eval_fn=fn))
        assert scores[0] == scores[1]
    assert histories[1] == histories[0]


def test_a_batch_fn_may_return_a_real_count_as_gluon_trainer_takes_it():
    """Losses weighted per sample, normalized by the sum of the weights (a float): fit steps
    as gluon.Trainer.step(sum of weights) on each batch."""
    weights = np.random.RandomState(8).rand(44).astype("float32") + 0.1
    data = gluon.data.DataLoader(gluon.data.ArrayDataset(np.random.RandomState(3).randn(44, 6).astype("float32"),
                                                         np.arange(44) % 3, weights), batch_size=8)

    def weighted(net, batch, ctx_list):
        x, y, w = (a.as_in_context(ctx_list[0]) for a in batch)
        return [LOSS(net(x), y) * w], float(w.sum().asscalar())

    net, ref = dense_net([mx.cpu()]), dense_net([mx.cpu()])
    gluonkit.fit(net, None, gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}), data,
                 epochs=1, batch_fn=weighted, progress=False)
    plain = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.5})
    for x, y, w in data:
        with autograd.record():
            loss = LOSS(ref(x), y) * w
        loss.backward()
        plain.step(float(w.sum().asscalar()))
    for a, b in zip(net.collect_params().values(), ref.collect_params().values()):
        np.testing.assert_array_equal(a.data().asnumpy(), b.data().asnumpy())
    with pytest.raises(ValueError, match="the count nan for batch 0: count .* must be a finite number >= 0"):
        gluonkit.fit(net, None, gluonkit.Trainer(net.collect_params(), "sgd"), data, epochs=1, progress=False,
                     batch_fn=lambda n, b, c: (weighted(n, b, c)[0], float("nan")))


def test_fits_default_step_casts_float64_labels_with_the_data_for_a_float32_network():
    """A float64 loader (gluon's batchify keeps NumPy float64) into a float32 network with
    L2Loss: before, the label reached the loss as float64 and MXNet failed to infer types."""
    rng = np.random.RandomState(5)
    x, y = rng.randn(24, 6), rng.randn(24, 3)
    nets = []
    for dtype in ("float64", "float32"):
        net = dense_net([mx.cpu()])
        loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x.astype(dtype), y.astype(dtype)), batch_size=8)
        history = gluonkit.fit(net, gluon.loss.L2Loss(), gluonkit.Trainer(net.collect_params(), "sgd"), loader,
                               epochs=1, progress=False)
        nets.append((net, history))
    (net64, history64), (net32, history32) = nets
    assert history64["loss"] == history32["loss"]
    for a, b in zip(net64.collect_params().values(), net32.collect_params().values()):
        np.testing.assert_array_equal(a.data().asnumpy(), b.data().asnumpy())
