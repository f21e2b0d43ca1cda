"""gluonkit-detect's image checks before training, its options' help, and class names from a file."""
import logging
import os
import warnings

import pytest

from detection_files import shapes_voc
from gluonkit.data.images import ImageError
from gluonkit.recipes import detect, detection as det


def test_a_damaged_validation_image_is_named_before_training(tmp_path):
    root = shapes_voc(str(tmp_path / "voc"), train=4, val=3, empty_train=(), empty_val=())
    bad = os.path.join(root, "JPEGImages", "0005.jpg")          # the second validation image
    with open(bad, "r+b") as f:
        f.truncate(12)
    with pytest.raises(ImageError, match="0005.jpg"):
        detect.load_detection(f"voc:{root}")
    args = detect.parse_args(["--dataset", f"voc:{root}", "--out", str(tmp_path / "out"),
                              "--no-progress"])
    with pytest.raises(ImageError, match="0005.jpg"):
        detect.train(args)
    assert not (tmp_path / "out" / "checkpoints").exists()           # nothing trained


def test_the_pixel_limit_the_message_names_is_an_option_of_gluonkit_detect(tmp_path):
    root = shapes_voc(str(tmp_path / "voc"), train=4, val=2, empty_train=(), empty_val=())
    with pytest.raises(ImageError, match="--max-image-pixels") as refused:
        detect.load_detection(f"voc:{root}", max_pixels=100)
    assert "0000.jpg" in str(refused.value)
    args = detect.parse_args(["--dataset", f"voc:{root}", "--max-image-pixels", "100000"])
    train, _, _ = detect.load_detection(args.dataset, max_pixels=args.max_image_pixels)
    assert len(train) == 4


def test_help_gives_each_default_once(capsys):
    with pytest.raises(SystemExit):
        detect.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: True)" not in text and "(default: None)" not in text
    batch = text[text.index("--batch-size BATCH_SIZE images"):text.index("--per-device N images")]
    assert batch.count("default") == 1
    assert "--lr LR learning rate (default: 0.01)" in text


def test_class_names_with_commas_come_from_a_file(tmp_path, capsys):
    names = tmp_path / "classes.txt"
    names.write_text("circle, round\nsquare\n\ntriangle\n", encoding="utf-8")
    assert detect.parse_args(["--classes", str(names)]).classes == ["circle, round", "square", "triangle"]
    assert detect.parse_args(["--classes", "a,b"]).classes == ["a", "b"]
    with pytest.raises(SystemExit):
        detect.parse_args(["--classes", str(tmp_path / "clases.txt")])     # a typo is no class
    assert "clases.txt: no such file" in capsys.readouterr().err


def test_an_ssd_is_built_without_mxnets_type_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det.build_detector("ssd_300_mobilenet0.25_custom", ["a", "b"])
    assert not [w for w in caught if "Cannot decide type" in str(w.message)]


def _warned(call):
    """``call()``'s result and the texts of the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught]


def test_validation_images_that_are_training_images_are_warned_about_in_one_line(tmp_path):
    from coco_files import TRAIN, VAL, write_coco
    train, val = write_coco(str(tmp_path), {"train": TRAIN, "val": TRAIN})
    images = str(tmp_path / "images")
    for folders in (None, f"{images},{images}"):
        _, texts = _warned(lambda: detect.load_detection(f"coco:{train},{val}", images_dir=folders))
        assert texts == ["the validation images are the training images, so the validation "
                         "figures measure images the network trains on; validate on other "
                         "images (another file, list or --images folder)."]
    train, val = write_coco(str(tmp_path / "b"), {"train": TRAIN, "val": VAL + TRAIN[1:2]})
    _, texts = _warned(lambda: detect.load_detection(f"coco:{train},{val}"))
    assert texts == [f"1 of the 2 validation images are training images too (the first: "
                     f"{tmp_path / 'b' / 'images' / 'sub' / 'b.jpg'}), so the validation figures "
                     "measure images the network trains on; validate on other images (another "
                     "file, list or --images folder)."]
    _, texts = _warned(lambda: detect.load_detection(f"coco:{train},{train}"))   # one file twice
    assert len(texts) == 1 and texts[0].startswith("the validation images are the training images")


def test_exif_orientation_is_refused_for_the_shapes_set(capsys):
    assert detect.parse_args([]).exif_orientation is None
    assert detect.parse_args(["--dataset", "voc:somewhere"]).exif_orientation == "apply"
    with pytest.raises(SystemExit) as stop:
        detect.parse_args(["--exif-orientation", "ignore"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "gluonkit-detect: error: --exif-orientation ignore applies to photos read from files "
        "(--dataset voc:, coco:, rec:); the shapes set is drawn in memory and holds no EXIF tag: "
        "leave it out.")


def test_a_file_given_for_a_voc_folder_is_named_so(tmp_path):
    path = tmp_path / "annotations.xml"
    path.write_text("<annotation/>")
    with pytest.raises(NotADirectoryError) as info:
        detect.load_detection(f"voc:{path}")
    assert str(info.value) == (f"--dataset voc:{path}: {path} is a file, not a folder; pass the "
                               "VOC folder (Annotations/, JPEGImages/, ImageSets/Main/).")


def test_warnings_become_log_lines_once_each_but_left_out_records_wait_for_the_end(caplog):
    from gluonkit.data.badrecords import LeftOutWarning
    from gluonkit.recipes import common
    with caplog.at_level(logging.WARNING, logger="gluonkit"):
        with common.warnings_logged(leave=LeftOutWarning):
            for _ in range(2):
                warnings.warn("a.json: a.jpg is listed under image ids 1 and 2")
            warnings.warn("--skip-bad-annotations left out 1 record", LeftOutWarning)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "a.json: a.jpg is listed under image ids 1 and 2")]
