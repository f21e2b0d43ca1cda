"""gluonkit-detect's image checks before training, its options' help, and class names from a file."""
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
