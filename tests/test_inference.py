"""gluonkit.inference: batches streamed, results independent of the batch, boxes mapped back to
the image's own pixels, resizes checked before they run."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import gluonkit
from gluonkit.inference import iter_predict, preprocess
from image_files import encoded, pixels, zero_png

PREPROCESSING = {"channels": 3, "resize": [8, 8], "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.3, 0.4]}


def tiny_classifier(prefix, preprocessing=PREPROCESSING, shape=(3, 8, 8)):
    mx.random.seed(3)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3), gluon.nn.GlobalAvgPool2D(), gluon.nn.Flatten(), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    gluonkit.export_model(net, prefix, shape, outputs=["a", "b", "c"], preprocessing=preprocessing)
    return net


def by_hand(net, image):
    """The class probabilities of ``image`` (HWC uint8), resized and normalized with NumPy."""
    resized = mx.image.imresize(mx.nd.array(image, dtype="uint8"), 8, 8).asnumpy() / 255.0
    x = ((resized - PREPROCESSING["mean"]) / PREPROCESSING["std"]).transpose(2, 0, 1)[None]
    z = net(mx.nd.array(x)).asnumpy()[0]
    return np.exp(z - z.max()) / np.exp(z - z.max()).sum()


def test_results_stream_batch_by_batch(tmp_path):
    """The first batch's results come before the later files are read: files replaced after
    them are predicted as they are then."""
    net = tiny_classifier(str(tmp_path / "model"))
    folder = tmp_path / "images"
    folder.mkdir()
    images = [pixels(12, 20, seed=i) for i in range(6)]
    for i, image in enumerate(images):
        (folder / f"{i}.png").write_bytes(encoded(image, ".png"))
    stream = iter_predict(str(tmp_path / "model"), [str(folder)], top_k=3, batch_size=2)
    first = [next(stream), next(stream)]
    for i in (4, 5):                                   # replaced before the third batch is read
        (folder / f"{i}.png").write_bytes(encoded(images[i - 4], ".png"))
    results = first + list(stream)
    assert [r["image"] for r in results] == [str(folder / f"{i}.png") for i in range(6)]
    for result, image in zip(results, images[:4] + images[:2]):
        p = by_hand(net, image)
        assert [t["class"] for t in result["top"]] == [("a", "b", "c")[i] for i in np.argsort(-p)]
        np.testing.assert_allclose(sorted(t["probability"] for t in result["top"]), sorted(p),
                                   rtol=1e-5)
    for batch_size in (1, 4, 32):
        again = gluonkit.predict(str(tmp_path / "model"), [str(folder)], batch_size=batch_size)
        for a, b in zip(again, results):
            np.testing.assert_allclose([t["probability"] for t in a["top"]],
                                       [t["probability"] for t in b["top"]], rtol=1e-5)


def test_arguments_are_checked_when_called(tmp_path):
    tiny_classifier(str(tmp_path / "model"))
    for name, value in (("batch_size", 0), ("top_k", 0), ("max_pixels", 2 ** 31)):
        with pytest.raises(ValueError, match=name):
            iter_predict(str(tmp_path / "model"), [pixels()], **{name: value})   # not at next()


def test_no_resize_beyond_the_pixel_limit(tmp_path):
    path = tmp_path / "strip.png"
    path.write_bytes(zero_png(100000, 1))
    steps = dict(PREPROCESSING, resize=None, resize_short=37, crop=[32, 32])
    with pytest.raises(gluonkit.ImageError, match=f"{path} .100000x1 pixels. would be resized "
                                                  "to 3700000x37"):
        preprocess(str(path), steps, max_aspect=100000)
    assert preprocess(str(path), dict(steps, resize_short=8), max_aspect=100000).shape == (3, 32, 32)


def test_boxes_are_mapped_back_to_the_image_own_pixels(tmp_path):
    class Detector(gluon.HybridBlock):
        def hybrid_forward(self, F, x):
            batch = F.slice_axis(F.flatten(x), axis=1, begin=0, end=1) * 0     # (B, 1) zeros
            ids = F.broadcast_add(batch.expand_dims(2), F.reshape(F.arange(3), (1, 3, 1)) - 1)
            scores = F.broadcast_add(batch.expand_dims(2), F.reshape(F.arange(3) * 0.3, (1, 3, 1)))
            box = F.reshape(F.arange(12), (1, 3, 4)) * 2                      # input pixels
            return ids, scores, F.broadcast_add(batch.expand_dims(2), box)

    steps = dict(PREPROCESSING, resize=[16, 32])       # height 16, width 32
    gluonkit.export_model(Detector(), str(tmp_path / "det"), (3, 16, 32), outputs=["x", "y"],
                          preprocessing=steps, kind="detector")
    image = pixels(48, 40)                              # height 48, width 40
    result = gluonkit.predict(str(tmp_path / "det"), [image], score_threshold=0.2)[0]
    # slot 0 has id -1 (none); slot 1: id 0, score 0.3, box 8,10,12,14; slot 2: id 1, score 0.6
    scale = np.array([40 / 32, 48 / 16] * 2)
    assert (result["width"], result["height"]) == (40, 48)
    assert [(b["class"], round(b["score"], 6)) for b in result["boxes"]] == [("y", 0.6), ("x", 0.3)]
    np.testing.assert_allclose(result["boxes"][0]["box"], np.minimum([16, 18, 20, 22] * scale,
                                                                     [40, 48, 40, 48]))
    np.testing.assert_allclose(result["boxes"][1]["box"], np.array([8, 10, 12, 14]) * scale)
    assert gluonkit.predict(str(tmp_path / "det"), [image], score_threshold=0.5)[0]["boxes"][0][
        "class"] == "y"
