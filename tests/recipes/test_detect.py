"""The detection recipe end to end on tiny budgets: every mode, resume, a VOC folder."""
import json
import os

import mxnet as mx
import numpy as np
import pytest
from numpy.testing import assert_allclose

from detection_files import write_rec, write_voc
from gluonkit.data import DataFileError, ShapesDetection
from gluonkit.recipes import detect

TINY = ["--limit", "8", "--epochs", "1", "--batch-size", "4", "--image-size", "64", "--no-progress"]


def _run(tmp_path, *extra, out="out"):
    args = detect.parse_args(TINY + ["--out", str(tmp_path / out)] + list(extra))
    return detect.train(args)


def _params(net):
    return {name: p.list_data()[0].asnumpy() for name, p in net._collect_params_with_prefix().items()}


@pytest.mark.parametrize("extra", [
    [],
    ["--model", "ssd_300_mobilenet0.25_custom"],
    ["--multiscale", "64,96", "--multiscale-interval", "1"],
    ["--image-size", "0", "--buckets", "2"],
    ["--ctx", "cpu:0,cpu:1", "--per-device", "1"],      # 2 micro-batches of 1 image per device
    ["--micro-batch", "2", "--clip-global-norm", "50"],
], ids=["yolo3", "ssd", "multiscale", "buckets", "two-devices-accumulate", "clip"])
def test_every_mode_trains_validates_and_exports(tmp_path, extra):
    result = _run(tmp_path, *extra)
    out = tmp_path / "out"
    history = result["history"]
    assert history["epoch"] == [1] and np.isfinite(history["loss"][0])
    assert {"val_circle", "val_square", "val_triangle", "val_mAP"} <= set(history)
    assert 0.0 <= result["map"] <= 1.0
    for name in ("args.json", "history.csv", "curves.png", "model-symbol.json", "model-0000.params",
                 "model.json", "model.onnx", "predictions.png"):
        assert (out / name).is_file(), name
    meta = json.loads((out / "model.json").read_text())
    assert meta["task"] == "detect" and meta["outputs"][0]["classes"] == list(ShapesDetection.CLASSES)
    exported = mx.gluon.SymbolBlock.imports(str(out / "model-symbol.json"), ["data"],
                                            str(out / "model-0000.params"))
    ids, scores, boxes = exported(mx.nd.zeros((1,) + tuple(meta["input"]["shape"])))
    assert ids.shape[:2] == scores.shape[:2] == boxes.shape[:2] and boxes.shape[2] == 4


def test_per_device_sets_the_batch_and_bad_options_are_refused(capsys):
    args = detect.parse_args(["--ctx", "cpu:0,cpu:1", "--per-device", "1"])
    assert (args.batch_size, args.micro_batch) == (2, 1) and args.model == "yolo3_mobilenet0.25_custom"
    args = detect.parse_args(["--ctx", "cpu:0,cpu:1", "--per-device", "1", "--batch-size", "8"])
    assert (args.batch_size, args.micro_batch) == (8, 1)     # the global batch, in micro-batches of 1 per device
    args = detect.parse_args(["--ctx", "cpu:0,cpu:1", "--per-device", "1", "--per-worker-batch"])
    assert (args.batch_size, args.micro_batch) == (2, None)  # the earlier meaning: per worker and step
    assert detect.parse_args(["--batchnorm", "sync"]).batchnorm == "sync"   # one device: it works
    defaults = detect.parse_args([])        # the run whose mAP the README quotes
    assert (defaults.epochs, defaults.image_size, defaults.batch_size, defaults.lr) == (24, 96, 8, 0.01)
    assert defaults.augment == "flip"
    for bad, message in [(["--model", "resnet18_v1"], "not a GluonCV YOLOv3 or SSD"),
                         (["--multiscale", "64", "--image-size", "0"], "pass one"),
                         (["--clip-global-norm", "0"], "must be positive"),
                         (["--batchnorm", "group"], "batchnorm"),
                         (["--model", "ssd_300_mobilenet0.25_custom", "--batchnorm", "frozen"],
                          "has no Gluon BatchNorm layer to freeze (SSD's are inside the symbol graph of its "
                          "features); use --batchnorm plain or sync"),
                         (["--batchnorm", "sync", "--ctx", "cpu:0,cpu:1"], "hangs on several CPU devices"),
                         (["--resume", "--out", ""], "--resume"),
                         (["--accumulate", "2"], "pass --batch-size 16 --micro-batch 8 (the same updates on one device)"),
                         (["--accumulate", "2", "--ctx", "cpu:0,cpu:1"],
                          "pass --batch-size 16 --micro-batch 4 (the same updates on the 2 devices of --ctx)"),
                         (["--per-device", "2", "--micro-batch", "4"], "both set the images per device"),
                         (["--image-size", "0", "--micro-batch", "4"], "--image-size 0 trains on batches of each"),
                         (["--micro-batch", "9"], "--micro-batch 9 is larger than the global --batch-size 8"),
                         (["--multiscale-interval", "2"], "gluonkit-detect: error: --multiscale-interval 2 is the "
                          "batches per size drawn from --multiscale, which is not given; pass --multiscale SIZES "
                          "too, or drop --multiscale-interval.\n"),
                         (["--per-device", "2", "--batch-size", "8", "--image-size", "0"],
                          "--per-device 2 on 1 device(s) makes --batch-size 2 per worker and step, not 8; pass one.")]:
        with pytest.raises(SystemExit):
            detect.parse_args(bad)
        assert message in capsys.readouterr().err


def test_buckets_pad_so_validation_boxes_are_the_images_own(tmp_path):
    train, val, classes = detect.load_detection("shapes", limit=8)
    net = detect.det.build_detector("yolo3_mobilenet0.25_custom", classes)
    net.initialize()
    loaders = detect.make_loaders(net, "yolo3", train, val, 4, image_size=0, buckets=2)
    buckets = set(loaders[0].batch_sampler.sampler.sampler.buckets.shapes)   # SeededSamples, BucketSizes
    assert all(h % 32 == 0 and w % 32 == 0 for h, w in buckets)
    seen = 0
    for batch_indices, (images, labels) in zip(loaders[1].batch_sampler, loaders[1]):
        assert tuple(images.shape[2:]) in buckets
        for (index, _), label in zip(batch_indices, labels.asnumpy()):
            own = val[index][1]
            assert_allclose(label[:len(own)], own, atol=1e-4)     # padding moved no box
            assert (label[len(own):] == -1).all()
            seen += 1
    assert seen == 8


def test_resume_equals_an_uninterrupted_run(tmp_path, capsys):
    whole = _run(tmp_path, "--epochs", "2", out="whole")
    _run(tmp_path, "--epochs", "1", out="parts")
    resumed = _run(tmp_path, "--epochs", "2", "--resume", out="parts")
    assert resumed["history"]["epoch"] == [1, 2]
    a, b = _params(whole["net"]), _params(resumed["net"])
    for name in a:
        assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7, err_msg=name)
    assert_allclose(whole["history"]["val_mAP"], resumed["history"]["val_mAP"], atol=1e-7)
    with pytest.raises(SystemExit) as done:   # nothing left to train: said, and only what detect can do
        detect.parse_args(["--out", str(tmp_path / "parts"), "--resume", "--epochs", "2"])
    assert done.value.code == 0
    assert capsys.readouterr().err.strip().endswith("nothing was trained or changed. Pass --epochs 3 or more to "
                                                   "train it further.")


def test_a_voc_folder_made_here_is_read_and_trained(tmp_path):
    source = ShapesDetection("val", length=10)
    names = ["Circle", "Square", "Triangle"]
    ids = write_voc(str(tmp_path / "voc"), source, names)
    lists = tmp_path / "voc" / "ImageSets" / "Main"
    (lists / "train.txt").write_text("\n".join(ids[:6]) + "\n")
    (lists / "val.txt").write_text("\n".join(ids[6:]) + "\n")
    train, val, classes = detect.load_detection(f"voc:{tmp_path / 'voc'}")
    assert classes == ["circle", "square", "triangle"] and (len(train), len(val)) == (6, 4)
    for i in range(4):
        assert_allclose(val[i][1], source[6 + i][1])                # GluonCV's reader: 0-based
    result = _run(tmp_path, "--dataset", f"voc:{tmp_path / 'voc'}")
    assert "val_mAP" in result["history"] and (tmp_path / "out" / "model.json").is_file()


def test_missing_data_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="ImageSets"):
        detect.load_detection(f"voc:{tmp_path}")
    for unknown in ("coco", "mnist"):          # coco needs its two files
        with pytest.raises(ValueError, match="not 'shapes', 'voc:DIR', 'rec:TRAIN.rec,VAL.rec' or "
                                             "'coco:TRAIN.json,VAL.json'"):
            detect.load_detection(unknown)
    with pytest.raises(ValueError, match="pass two files, coco:TRAIN.json,VAL.json"):
        detect.load_detection(f"coco:{tmp_path / 'a.json'}")
    with pytest.raises(FileNotFoundError, match=r"a\.idx"):
        detect.load_detection(f"rec:{tmp_path / 'a.rec'},{tmp_path / 'b.rec'}")
    with pytest.raises(ValueError, match="rec:TRAIN.rec,VAL.rec"):
        detect.load_detection(f"rec:{tmp_path / 'a.rec'}")


@pytest.mark.parametrize("difficult", [False, True], ids=["5-wide", "6-wide"])
def test_a_recordio_file_packed_here_reads_back_as_its_source_and_trains(tmp_path, difficult):
    sources = ShapesDetection("train", length=6), ShapesDetection("val", length=4)
    paths = tmp_path / "train.rec", tmp_path / "val.rec"
    for path, source in zip(paths, sources):
        write_rec(path, source, difficult)
    dataset = "rec:" + ",".join(map(str, paths))
    train, val, classes = detect.load_detection(dataset, classes=["circle", "square", "triangle"])
    assert classes == ["circle", "square", "triangle"] and (len(train), len(val)) == (6, 4)
    for read, source in zip((train, val), sources):
        for i in range(len(source)):
            (image, label), (own_image, own_label) = read[i], source[i]
            assert (image.asnumpy() == own_image.asnumpy()).all()
            assert label.shape == own_label.shape
            assert_allclose(label, own_label, atol=1e-4)       # pixels back from 0-1 coordinates
    assert detect.load_detection(dataset)[2] == ["0", "1", "2"]
    with pytest.raises(ValueError, match="name every class"):
        detect.load_detection(dataset, classes=["circle"])
    result = _run(tmp_path, "--dataset", dataset, "--classes", "circle,square,triangle")
    assert {"val_circle", "val_square", "val_triangle"} <= set(result["history"])


def test_validation_ids_beyond_the_training_classes_are_refused_when_loading(tmp_path):
    train, val = tmp_path / "train.rec", tmp_path / "val.rec"
    write_rec(train, ShapesDetection("train", length=6), False)      # ids 0..2
    record = mx.recordio.MXIndexedRecordIO(str(val.with_suffix(".idx")), str(val), "w")
    for key, ids in enumerate([(0, 1), (2, 5)]):
        label = np.array([2, 5] + [v for c in ids for v in (c, 0.1, 0.1, 0.6, 0.6)], np.float32)
        record.write_idx(key, mx.recordio.pack_img(mx.recordio.IRHeader(0, label, key, 0),
                                                   np.zeros((16, 16, 3), np.uint8), img_fmt=".png"))
    record.close()
    with pytest.raises(DataFileError, match=rf"val\.rec, record 1, object 1: class 5 is not one of the 3 "
                                            rf"classes \(0..2\); {train} holds no other"):
        detect.load_detection(f"rec:{train},{val}")
    with pytest.raises(DataFileError, match=r"val\.rec, record 1, object 1: class 5 is not one of the 5 "
                                            r"classes \(0..4\); --classes names 5 \(a,b,c,d,e\)"):
        detect.load_detection(f"rec:{train},{val}", classes=list("abcde"))
    assert len(detect.load_detection(f"rec:{train},{val}", classes=list("abcdef"))[1]) == 2


def test_amp_on_a_cpu_context_fails_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit):
        detect.parse_args(["--amp", "--out", str(tmp_path / "a")])
    assert "--amp: mixed precision (AMP) runs on GPUs only" in capsys.readouterr().err
    args = detect.parse_args(["--no-progress", "--out", str(tmp_path / "a")])
    args.amp = True                     # as a caller of train() could set it
    with pytest.raises(ValueError, match="GPUs only"):
        detect.train(args)
    assert not os.path.exists(tmp_path / "a")


def test_a_damaged_image_in_a_detection_record_file_is_named_with_its_record(tmp_path):
    train, val = tmp_path / "train.rec", tmp_path / "val.rec"
    write_rec(train, ShapesDetection("train", length=3), False)
    write_rec(val, ShapesDetection("val", length=2), False)
    record = mx.recordio.MXIndexedRecordIO(str(val.with_suffix(".idx")), str(val), "w")
    label = np.array([2, 5, 0, 0.1, 0.1, 0.6, 0.6], np.float32)
    record.write_idx(0, mx.recordio.pack(mx.recordio.IRHeader(0, label, 0, 0), b"\x89PNG cut short"))
    record.close()
    _, read_val, _ = detect.load_detection(f"rec:{train},{val}")
    with pytest.raises(DataFileError, match=r"val\.rec \(record 0\)"):
        read_val[0]


def test_a_short_ssd_run_keeps_every_running_variance_positive_and_exports(tmp_path):
    # its extra layers' BatchNorm started from Uniform(0.07): negative variances, NaN in onnxruntime
    result = _run(tmp_path, "--model", "ssd_300_mobilenet0.25_custom", "--epochs", "2")
    variances = {name: value for name, value in _params(result["net"]).items()
                 if name.endswith(("running_var", "moving_var"))}
    assert any("expand" in name for name in variances)
    assert {name for name, value in variances.items() if not (value > 0).all()} == set()
    saved = mx.nd.load(str(tmp_path / "out" / result["export"]["files"]["params"]))
    assert all((v.asnumpy() > 0).all() for k, v in saved.items() if k.endswith("moving_var"))


def test_any_number_of_workers_trains_and_resumes_as_this_process_alone(tmp_path):
    # GluonCV's full YOLOv3 augmentation draws from Python's and NumPy's generators: each sample
    # draws from a seed of its own, so 0, 2 and (resumed) 1 workers train the same weights
    source = ShapesDetection("train", length=12)
    ids = write_voc(str(tmp_path / "voc"), source, ["Circle", "Square", "Triangle"])
    lists = tmp_path / "voc" / "ImageSets" / "Main"
    (lists / "train.txt").write_text("\n".join(ids[:8]) + "\n")
    (lists / "val.txt").write_text("\n".join(ids[8:]) + "\n")
    data = ["--dataset", f"voc:{tmp_path / 'voc'}", "--augment", "full"]
    whole = _run(tmp_path, *data, "--epochs", "2", "--num-workers", "0", out="whole")
    _run(tmp_path, *data, "--epochs", "1", "--num-workers", "2", out="parts")
    resumed = _run(tmp_path, *data, "--epochs", "2", "--num-workers", "1", "--resume", out="parts")
    assert resumed["history"]["epoch"] == [1, 2]
    a, b = _params(whole["net"]), _params(resumed["net"])
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert whole["history"]["val_mAP"] == resumed["history"]["val_mAP"]
