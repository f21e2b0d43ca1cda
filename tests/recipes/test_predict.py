"""gluonkit.predict and gluonkit-predict on PNG files, against the trained network."""
import json
import os
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np
import pytest

import gluonkit
from gluonkit.data import digits
from gluonkit.data.images import read_image
from gluonkit import Checkpoint
from gluonkit.recipes import classify, predict as predict_cmd
from gluonkit.recipes.models import small_cnn
from image_files import encoded, pixels, png_header_only, zero_png


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    classify.train(classify.parse_args(["--limit", "600", "--epochs", "3", "--batch-size", "32",
                                        "--warmup-epochs", "0.5", "--out", str(out),
                                        "--no-progress"]))
    net = small_cnn(10)            # the exported model is the best checkpoint
    net.initialize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    Checkpoint(out / "checkpoints").load(net, best=True)
    images = out / "images"
    images.mkdir()
    test = digits(train=False)
    pixels = []
    for i in range(6):
        pixel = np.round(test[i][0][0] * 255).astype(np.uint8)
        cv2.imwrite(str(images / f"{i}.png"), pixel)
        pixels.append(pixel)
    return out, net, images, np.stack(pixels)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_predict_from_python_equals_the_trained_network(trained):
    out, net, images, pixels = trained
    results = gluonkit.predict(str(out / "model"), [str(images)], top_k=3)
    assert [r["image"] for r in results] == [str(images / f"{i}.png") for i in range(6)]
    probabilities = softmax(net(mx.nd.array(pixels[:, None] / 255.0)).asnumpy())
    for result, p in zip(results, probabilities):
        best = np.argsort(-p, kind="stable")[:3]
        assert [t["class"] for t in result["top"]] == [str(c) for c in best]
        np.testing.assert_allclose([t["probability"] for t in result["top"]], p[best], rtol=1e-4)
    # arrays work too (HWC), and give the same answers
    arrays = gluonkit.predict(str(out / "model"), list(pixels[:, :, :, None]), top_k=3)
    assert [a["top"] for a in arrays] == [r["top"] for r in results]
    wide = gluonkit.predict(out / "model", list(pixels.astype(np.int64)), top_k=3)   # path-like too
    assert [a["top"] for a in wide] == [r["top"] for r in results]
    # one image alone: the same classes; a batch of one may round the last bits differently
    [alone] = gluonkit.predict(str(out / "model"), images / "0.png", top_k=3)
    assert [t["class"] for t in alone["top"]] == [t["class"] for t in results[0]["top"]]
    np.testing.assert_allclose([t["probability"] for t in alone["top"]],
                               [t["probability"] for t in results[0]["top"]], rtol=1e-5)


def test_arrays_that_are_not_8_bit_pixels_are_refused(trained):
    out, _, _, pixels = trained
    for bad, dtype in ((pixels / 255.0, "float64"), (pixels.astype(np.int32) * 2, "int32")):
        with pytest.raises(ValueError, match=f"uint8.*dtype {dtype}.*astype"):
            gluonkit.predict(str(out / "model"), list(bad))   # floats were read as 0: all blank
    with pytest.raises(ValueError, match=r"one image per array.*\(6, 8, 8, 1\).*list"):
        gluonkit.predict(str(out / "model"), pixels[..., None])


def test_command_prints_text_and_json(trained, capsys):
    out, _, images, _ = trained
    expected = gluonkit.predict(str(out / "model"), [str(images / "0.png"), str(images / "1.png")],
                                top_k=2)
    predict_cmd.main(["--model", str(out / "model"), str(images / "0.png"), str(images / "1.png"),
                      "--top-k", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"{r['image']}: " + ", ".join(f"{t['class']} ({t['probability']:.3f})"
                                                   for t in r["top"]) for r in expected]
    predict_cmd.main(["--model", str(out / "model"), str(images / "0.png"), "--json"])
    # one image alone: the same class; a batch of one may round the last bits differently
    [best] = [r["top"][0] for r in json.loads(capsys.readouterr().out)]
    assert best["class"] == expected[0]["top"][0]["class"]
    np.testing.assert_allclose(best["probability"], expected[0]["top"][0]["probability"], rtol=1e-5)


def test_command_errors_are_one_line(trained, tmp_path):
    out, _, _, _ = trained
    for argv, message in ((["--model", str(out / "model"), str(tmp_path / "nothing.png")],
                           "no such image file or directory"),
                          (["--model", str(tmp_path / "model"), str(out)], "does not exist"),
                          (["--model", str(out / "model"), str(out / "args.json")],
                           "args.json cannot be decoded as an image")):
        done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.predict", *argv],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE"))
        assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.filterwarnings("ignore:Skipping")   # aux is trained on every 3rd batch only
def test_multitask_model_predicts_every_head(tmp_path):
    from gluonkit.recipes import multitask

    multitask.train(multitask.parse_args(["--epochs", "1", "--train-size", "64", "--out",
                                          str(tmp_path), "--no-progress"]))
    image = np.zeros((8, 8), dtype=np.uint8)
    result = gluonkit.predict(str(tmp_path / "model"), [image], top_k=1)[0]
    assert list(result["outputs"]) == ["digit", "parity", "aux"]
    assert result["outputs"]["parity"][0]["class"] in ("even", "odd")
    assert predict_cmd.format_results([result])[0].startswith("0: digit: ")


def test_an_export_copied_under_another_prefix_loads_from_its_own_files(trained, tmp_path):
    """Copied as MXNet checkpoints are (digits-symbol.json, digits-0000.params, digits.json),
    the model loads from the copy's files, not from the names it was exported under."""
    out, _, images, _ = trained
    for name in ("model-symbol.json", "model-0000.params", "model.json"):
        (tmp_path / name.replace("model", "digits")).write_bytes((out / name).read_bytes())
    expected = gluonkit.predict(str(out / "model"), [str(images)], top_k=3)
    assert gluonkit.predict(str(tmp_path / "digits"), [str(images)], top_k=3) == expected
    (tmp_path / "digits-0000.params").unlink()
    with pytest.raises(FileNotFoundError, match="digits-0000.params"):
        gluonkit.load_model(str(tmp_path / "digits"))


def run_command(argv, cwd):
    """``gluonkit-predict argv`` in a fresh process: (status, stdout, stderr, peak RSS in MB)."""
    code = ("import resource, sys\n"
            "from gluonkit.recipes import predict\n"
            "try:\n"
            "    predict.main(sys.argv[1:])\n"
            "finally:\n"
            "    print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True,
                          text=True, timeout=300, cwd=str(cwd),
                          env=dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE"))
    lines = done.stderr.strip().splitlines()        # the exit message comes after the peak
    peak = [line for line in lines if line.startswith("peak ")][-1]
    lines.remove(peak)
    return done.returncode, done.stdout, "\n".join(lines), int(peak.split()[1]) / 1024


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    """A tiny classifier whose input is 3 x 224 x 224: 0.6 MB a preprocessed image."""
    out = tmp_path_factory.mktemp("wide")
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.GlobalAvgPool2D(), mx.gluon.nn.Flatten(), mx.gluon.nn.Dense(2))
    net.initialize()
    gluonkit.export_model(net, str(out / "model"), (3, 224, 224), outputs=["x", "y"],
                          preprocessing={"channels": 3, "resize": [224, 224]})
    (out / "normal.png").write_bytes(encoded(pixels(224, 224), ".png"))
    return out


@pytest.mark.parametrize("width, height", [(20000, 20000), (30000, 30000), (100000, 1)],
                         ids=["20000^2", "30000^2", "1x100000"])
def test_image_bombs_are_refused_within_100_mb(wide_model, tmp_path, width, height):
    """Before: +358 MB, +1.2 GB and +808 MB, and predicted. Now refused from the header:
    peak RSS within 100 MB of predicting a normal image."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(zero_png(width, height))
    assert bomb.stat().st_size < 1_000_000
    status, out, _, normal = run_command(["--model", wide_model / "model", wide_model / "normal.png"],
                                         tmp_path)
    assert status == 0 and out.startswith(str(wide_model / "normal.png"))
    status, out, err, peak = run_command(["--model", wide_model / "model", bomb], tmp_path)
    assert status == 1 and out == "" and err.startswith(f"gluonkit-predict: {bomb} is {width}x{height}")
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert peak < normal + 100, (peak, normal)


def test_many_images_cost_the_memory_of_one_batch(wide_model, tmp_path):
    """Before: every image preprocessed before the first result (400 images: +246 MB)."""
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(400):
        (folder / f"{i:03d}.png").write_bytes(encoded(pixels(16, 16, seed=i), ".png"))
    few = tmp_path / "few"
    few.mkdir()
    for i in range(16):
        (few / f"{i:03d}.png").write_bytes(encoded(pixels(16, 16, seed=i), ".png"))
    argv = ["--model", wide_model / "model", "--batch-size", "16"]
    status, out_few, _, small = run_command(argv + [few], tmp_path)
    assert status == 0 and len(out_few.splitlines()) == 16
    status, out, _, large = run_command(argv + [folder], tmp_path)
    assert status == 0 and len(out.splitlines()) == 400
    assert [line.split(": ", 1)[1] for line in out.splitlines()[:16]] == \
        [line.split(": ", 1)[1] for line in out_few.splitlines()]
    assert large < small + 40, (large, small)          # 384 more images: 230 MB if all held


def test_damaged_files_end_the_command_with_one_line(trained, tmp_path):
    out, _, images, _ = trained
    cut = tmp_path / "cut.png"                          # before: predicted from blank pixels
    cut.write_bytes(png_header_only(pixels(8, 8)))
    export = tmp_path / "export"
    export.mkdir()
    for name in ("model-symbol.json", "model-0000.params", "model.json"):
        (export / name).write_bytes((out / name).read_bytes())
    params = export / "model-0000.params"
    params.write_bytes(params.read_bytes()[:1000])
    for argv, message in (([out / "model", cut], f"{cut} is cut short"),
                          ([export / "model", images], f"{params} is not the file")):
        status, stdout, err, _ = run_command(["--model", *argv], tmp_path)
        assert status == 1 and stdout == "" and err.startswith(f"gluonkit-predict: {message}")
        assert len(err.splitlines()) == 1, err


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """The detect recipe trained 1 epoch on its smallest setting (SSD: a YOLOv3 this young
    scores every box under GluonCV's 0.01 floor), and a drawn image of 150 x 90 pixels."""
    from gluonkit.recipes import detect

    out = tmp_path_factory.mktemp("detect")
    detect.train(detect.parse_args(["--limit", "8", "--epochs", "1", "--batch-size", "4",
                                    "--image-size", "64", "--no-progress", "--out", str(out),
                                    "--model", "ssd_300_mobilenet0.25_custom"]))
    image = np.full((90, 150, 3), 230, np.uint8)
    cv2.circle(image, (40, 45), 20, (0, 0, 255), -1)                   # red, as OpenCV is BGR
    cv2.rectangle(image, (90, 20), (130, 60), (0, 200, 0), -1)
    cv2.imwrite(str(out / "drawn.png"), image)
    return out, image[:, :, ::-1]


def test_detector_export_predicts_boxes_in_the_image_own_pixels(detector):
    out, image = detector
    meta = json.loads((out / "model.json").read_text())
    assert meta["kind"] == "detector" and meta["preprocessing"]["resize"] == [64, 64]
    result = gluonkit.predict(str(out / "model"), str(out / "drawn.png"), score_threshold=0.05)[0]
    assert (result["width"], result["height"]) == (150, 90) and result["boxes"]
    # by hand: the exported network, without gluonkit, on the image resized and normalized
    net = mx.gluon.SymbolBlock.imports(str(out / "model-symbol.json"), ["data"],
                                       str(out / "model-0000.params"))
    resized = mx.image.imresize(mx.nd.array(image, dtype="uint8"), 64, 64).asnumpy() / 255.0
    x = (resized - meta["preprocessing"]["mean"]) / meta["preprocessing"]["std"]
    ids, scores, boxes = (a[0].asnumpy() for a in net(mx.nd.array(x.transpose(2, 0, 1)[None])))
    kept = (ids[:, 0] >= 0) & (scores[:, 0] >= 0.05)
    order = np.argsort(-scores[kept, 0], kind="stable")
    expected = np.clip(boxes[kept][order] * [150 / 64, 90 / 64, 150 / 64, 90 / 64], 0,
                       [150, 90, 150, 90])
    assert len(result["boxes"]) == kept.sum()
    np.testing.assert_allclose([b["box"] for b in result["boxes"]], expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose([b["score"] for b in result["boxes"]], scores[kept, 0][order],
                               rtol=1e-5)
    assert [b["class"] for b in result["boxes"]] == [meta["outputs"][0]["classes"][int(i)]
                                                     for i in ids[kept, 0][order]]


def test_detector_command_prints_boxes_as_text_and_json(detector, capsys):
    # 0.05: the young SSD scores its boxes under 0.3 once its extra layers' BatchNorm starts
    # from Gluon's defaults
    out, _ = detector
    expected = gluonkit.predict(str(out / "model"), [str(out / "drawn.png")], score_threshold=0.05)
    predict_cmd.main(["--model", str(out / "model"), str(out / "drawn.png"), "--json",
                      "--score-threshold", "0.05"])
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(expected))
    predict_cmd.main(["--model", str(out / "model"), str(out / "drawn.png"),
                      "--score-threshold", "0.05"])
    line = capsys.readouterr().out.strip()
    box = expected[0]["boxes"][0]
    assert line.startswith(f"{out / 'drawn.png'}: ")
    assert f"{box['class']} ({box['score']:.3f}) at " + ",".join(f"{v:.1f}" for v in box["box"]) in line


def test_json_stays_a_list_when_an_image_fails_and_options_are_spelled_out(trained, tmp_path):
    out, _, images, _ = trained
    cut = tmp_path / "z-cut.png"                        # read after the good images
    cut.write_bytes(png_header_only(pixels(8, 8)))
    status, stdout, err, _ = run_command(["--model", out / "model", "--json", "--batch-size", "2",
                                          images, cut], tmp_path)
    assert status == 1 and err.startswith(f"gluonkit-predict: {cut} is cut short")
    printed = json.loads(stdout)                        # valid JSON: the failure in its place
    assert [os.path.basename(r["image"]) for r in printed] == [f"{i}.png" for i in range(6)] + \
        ["z-cut.png"]
    assert printed[-1]["error"].startswith(f"{cut} is cut short") and "top" not in printed[-1]
    status, _, err, _ = run_command(["--model", out / "model", "--top", "3", images], tmp_path)
    assert status == 2 and "did you mean --top-k?" in err


def test_one_refused_image_does_not_stop_the_others_and_the_status_says_so(trained, tmp_path):
    out, _, images, _ = trained
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("0.png", "1.png"):
        (folder / name).write_bytes((images / name).read_bytes())
    (folder / "0b.png").write_bytes(b"not an image")       # between the two, in sorted order
    # the run folder, or the -symbol.json path, names the export as its prefix does
    expected = gluonkit.predict(str(out / "model"), [str(images / "0.png"), str(images / "1.png")])
    for model in (out, out / "model-symbol.json"):
        status, stdout, err, _ = run_command(["--model", model, folder], tmp_path)
        assert status == 1
        assert stdout.splitlines() == predict_cmd.format_results(
            [{**r, "image": str(folder / os.path.basename(r["image"]))} for r in expected])
        assert err == f"gluonkit-predict: {folder / '0b.png'} cannot be decoded as an image: it " \
                      "is not a whole PNG, JPEG, BMP or TIFF file (the formats MXNet decodes); " \
                      "remove it, or convert it to PNG."
    status, stdout, _, _ = run_command(["--model", out, folder, "--json"], tmp_path)
    listed = json.loads(stdout)
    assert status == 1 and [sorted(r) for r in listed] == \
        [sorted(expected[0]), ["error", "image"], sorted(expected[1])]
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'report'"):
        gluonkit.iter_predict(str(out), [str(folder)], on_error="skip")


def test_json_cut_short_by_its_reader_ends_quietly(trained, tmp_path):
    out, _, images, _ = trained
    code = ("import sys\nfrom gluonkit.recipes import predict\npredict.main(sys.argv[1:])\n")
    many = [str(images / f"{i % 6}.png") for i in range(300)]
    predict = subprocess.Popen([sys.executable, "-c", code, "--model", str(out), "--json", *many],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
    head = predict.stdout.read(100)          # as `| head -c 100`: read a little, then hang up
    predict.stdout.close()
    _, stderr = predict.communicate(timeout=300)
    assert len(head) == 100
    assert stderr.decode() == "", stderr.decode()


def test_an_option_for_the_other_kind_of_model_is_refused(trained, detector, tmp_path):
    status, _, err, _ = run_command(["--model", detector[0], detector[0] / "drawn.png",
                                     "--top-k", "3"], tmp_path)
    assert status == 1 and err == (
        f"gluonkit-predict: --top-k 3: {detector[0]} is a detector, which prints every box above "
        "--score-threshold; drop --top-k or pass --score-threshold S.")
    status, _, err, _ = run_command(["--model", trained[0], trained[2], "--score-threshold",
                                     "0.3"], tmp_path)
    assert status == 1 and err.endswith("is a classifier, which prints its top classes; drop it "
                                        "or pass --top-k K.")


@pytest.mark.parametrize("orientation, turn", [(6, -1), (8, 1), (3, 2)])
def test_a_phone_photo_is_predicted_upright(trained, tmp_path, orientation, turn):
    # EXIF orientation 6 was refused: "decodes to 8x8 ... header says" for non-square photos
    from PIL import Image
    out, _, _, digit_pixels = trained
    stored = np.ascontiguousarray(np.repeat(digit_pixels[2], 2, axis=1))   # 16 wide, 8 tall
    photo = Image.fromarray(stored)
    exif = photo.getexif()
    exif[0x0112] = orientation
    path = tmp_path / "photo.jpg"
    photo.save(path, exif=exif, quality=100)
    as_stored = read_image(path, 1, upright=False).asnumpy()
    upright = np.ascontiguousarray(np.rot90(as_stored, turn))        # as a viewer shows it
    [expected] = gluonkit.predict(str(out / "model"), [upright], top_k=3)
    [got] = gluonkit.predict(str(out / "model"), [str(path)], top_k=3)
    assert got["top"] == expected["top"]
    [sideways] = gluonkit.predict(str(out / "model"), [as_stored], top_k=3)
    assert sideways["top"] != expected["top"]                          # the turn matters
    status, stdout, err, _ = run_command(["--model", out / "model", path, "--json", "--top-k", "3"],
                                         tmp_path)
    assert status == 0, err
    [printed] = json.loads(stdout)
    assert [t["class"] for t in printed["top"]] == [t["class"] for t in expected["top"]]
    np.testing.assert_allclose([t["probability"] for t in printed["top"]],
                               [t["probability"] for t in expected["top"]], rtol=1e-5)


def _coco_file(path, image_ids, category_ids):
    """A COCO file of the detector fixture's drawn image (a circle and a square), under each of
    ``image_ids``, with the shapes' classes under ``category_ids``."""
    from gluonkit.data import ShapesDetection
    classes = list(ShapesDetection("val", length=1).classes)
    circle, square = (category_ids[classes.index(name)] for name in ("circle", "square"))
    images = [{"id": ident, "file_name": "drawn.png", "width": 150, "height": 90}
              for ident in image_ids]
    annotations = [{"id": 1 + 2 * n + k, "image_id": ident, "category_id": category,
                    "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": 0}
                   for n, ident in enumerate(image_ids)
                   for k, (category, bbox) in enumerate(((circle, [20, 25, 40, 40]),
                                                         (square, [90, 20, 40, 40])))]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": [
        {"id": ident, "name": name} for ident, name in zip(category_ids, classes)]}))
    return path


def _cocoeval(annotations, results):
    """pycocotools' bbox stats of ``results`` (a JSON file) on the COCO file ``annotations``."""
    import contextlib
    import io
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(annotations))
        evaluation = COCOeval(truth, truth.loadRes(str(results)), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return evaluation.stats


def test_coco_results_keep_string_ids_so_pycocotools_scores_the_users_file(detector, tmp_path,
                                                                           capsys):
    # "id": "1", as Label Studio's converter writes ids: pycocotools keeps the string, and so must
    # the results
    out, _ = detector
    written = _coco_file(tmp_path / "strings.json", ["7"], ["0", "1", "2"])
    numbers = _coco_file(tmp_path / "numbers.json", [7], [0, 1, 2])
    stats = []
    for annotations in (written, numbers):
        predict_cmd.main(["--model", str(out / "model"), str(out / "drawn.png"), "--coco",
                          str(annotations), "--coco-images", str(out), "--score-threshold", "0.001"])
        results = tmp_path / f"results-{annotations.stem}.json"
        results.write_text(capsys.readouterr().out)
        stats.append(_cocoeval(annotations, results))     # loadRes refused int ids for "7"
        found = json.loads(results.read_text())
        assert found and {d["image_id"] for d in found} == {"7" if annotations is written else 7}
        kinds = {type(d["category_id"]) for d in found}
        assert kinds == ({str} if annotations is written else {int})
    np.testing.assert_array_equal(stats[0], stats[1])       # the same figures as integer ids
    assert stats[0][0] >= 0                                 # objects to score: not COCO's -1


def test_coco_results_of_a_file_under_two_ids_take_the_first(detector, tmp_path, capsys):
    out, _ = detector
    annotations = _coco_file(tmp_path / "twice.json", [9, 4], [0, 1, 2])
    with pytest.warns(UserWarning) as caught:
        predict_cmd.main(["--model", str(out / "model"), str(out / "drawn.png"), "--coco",
                          str(annotations), "--coco-images", str(out), "--score-threshold", "0.001"])
    found = json.loads(capsys.readouterr().out)
    assert found and {d["image_id"] for d in found} == {9}
    assert [str(w.message) for w in caught] == [
        f"{annotations}: {out / 'drawn.png'} is listed under image ids 9 and 4; its results are "
        "written under the first, 9."]
