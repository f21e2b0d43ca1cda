"""gluonkit.data.images: one decoding path, with limits, whose every error names the file."""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluonkit.data.images import (DECODER_MAX_PIXELS, ImageError, ImageFolderDataset,
                                  ImageRecordDataset, check_limits, decode_image, read_image)
from image_files import encoded, pixels, png_header_only, zero_png


@pytest.mark.parametrize("suffix", [".png", ".bmp", ".tif", ".jpg"])
def test_images_decode_as_mxnet_decodes_them(tmp_path, suffix):
    image = pixels()
    path = tmp_path / f"image{suffix}"
    path.write_bytes(encoded(image, suffix))
    expected = mx.image.imread(str(path)).asnumpy()
    got = read_image(path)
    assert got.dtype == np.uint8 and got.shape == (40, 50, 3)
    np.testing.assert_array_equal(got.asnumpy(), expected)
    if suffix != ".jpg":                                  # lossless: the pixels themselves, RGB
        np.testing.assert_array_equal(got.asnumpy(), image)
    np.testing.assert_array_equal(read_image(path, 1).asnumpy(),
                                  mx.image.imread(str(path), flag=0).asnumpy())
    np.testing.assert_array_equal(decode_image(path.read_bytes(), "x").asnumpy(), expected)


def _cut(suffix, keep=0.5):
    data = encoded(pixels(), suffix)
    return data[:int(len(data) * keep)]


@pytest.mark.parametrize("data, message", [
    (b"", "is empty"),
    (b"name,label\ncat,1\n", "cannot be decoded as an image"),
    (png_header_only(pixels()), "is cut short"),                    # MXNet: blank pixels
    (_cut(".png"), "is cut short"),                                 # MXNet: an error later
    (_cut(".png", 0.95), "is cut short"),
    (_cut(".jpg"), "is cut short"),                                 # MXNet: grey pixels
    (_cut(".bmp"), "cannot be decoded: its BMP data"),
    (_cut(".tif"), "cannot be decoded"),
    (zero_png(100000, 1), "aspect ratio above the limit of 100:1"),
    (zero_png(1, 100000), "aspect ratio above the limit"),
    (zero_png(20000, 20000), "20000x20000 = 400,000,000 pixels, above the limit of 89,478,485"),
    (zero_png(40000, 30000), "above the limit"),                    # over 2^30: MXNet fails later
], ids=["empty", "text", "png-header-only", "png-cut", "png-cut-near-end", "jpeg-cut", "bmp-cut",
        "tiff-cut", "1x100000", "100000x1", "20000x20000", "over-2^30"])
def test_refused_files_fail_at_once_naming_the_file(tmp_path, data, message):
    path = tmp_path / "bad.png"
    path.write_bytes(data)
    with pytest.raises(ImageError, match=message) as refused:
        read_image(path)
    assert str(refused.value).startswith(str(path)) and "\n" not in str(refused.value)
    mx.nd.waitall()                                      # nothing left to fail later
    with pytest.raises(ImageError, match=message):
        decode_image(data, "record 3")


def test_limits_can_be_raised_and_are_checked(tmp_path):
    path = tmp_path / "strip.png"
    path.write_bytes(zero_png(100000, 1))
    strip = read_image(path, max_aspect=100000)
    assert strip.shape == (1, 100000, 3) and strip.asnumpy().max() == 0
    path.write_bytes(encoded(pixels(), ".png"))          # 50 x 40 = 2000 pixels
    with pytest.raises(ImageError, match="2,000 pixels, above the limit of 1,999.*--max-image-pixels"):
        read_image(path, max_pixels=1999)
    assert read_image(path, max_pixels=2000).shape == (40, 50, 3)
    assert check_limits(DECODER_MAX_PIXELS, 1) == (DECODER_MAX_PIXELS, 1.0)
    for pixels_, aspect, error in ((DECODER_MAX_PIXELS + 1, 100, ValueError), (0, 100, ValueError),
                                   (1.5, 100, TypeError), (100, 0.5, ValueError)):
        with pytest.raises(error):
            read_image(path, max_pixels=pixels_, max_aspect=aspect)


def test_a_file_larger_than_its_image_can_be_is_not_read(tmp_path):
    path = tmp_path / "padded.png"
    with open(path, "wb") as f:
        f.write(encoded(pixels(4, 4), ".png"))
        f.truncate(80 << 20)                              # 80 MB behind a 4 x 4 image
    with pytest.raises(ImageError, match="padded.png is 83,886,080 bytes, more than a 4x4 image"):
        read_image(path)


def test_image_folders_name_the_file_that_cannot_be_decoded(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        (tmp_path / cls / "0.png").write_bytes(encoded(pixels(seed=ord(cls)), ".png"))
    (tmp_path / "b" / "1.png").write_bytes(b"")
    dataset = ImageFolderDataset(str(tmp_path))
    image, label = dataset[0]
    np.testing.assert_array_equal(image.asnumpy(), pixels(seed=ord("a")))
    assert label == 0 and [dataset.items[i][0] for i in range(3)][2].endswith("1.png")
    with pytest.raises(ImageError, match=f"{tmp_path / 'b' / '1.png'} is empty"):
        for _ in gluon.data.DataLoader(dataset.transform_first(lambda x: x.astype("float32")),
                                       batch_size=2):
            pass


def test_record_files_name_the_file_and_the_record(tmp_path):
    rec, idx = str(tmp_path / "data.rec"), str(tmp_path / "data.idx")
    writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
    for i, data in enumerate([encoded(pixels(seed=1), ".png"), _cut(".png")]):
        writer.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i), i, 0), data))
    writer.close()
    dataset = ImageRecordDataset(rec)
    image, label = dataset[0]
    np.testing.assert_array_equal(image.asnumpy(), pixels(seed=1))
    assert label == 0.0
    with pytest.raises(ImageError, match=r"data.rec \(record 1\) is cut short"):
        dataset[1]


def test_training_on_a_folder_with_a_damaged_file_ends_with_one_line(tmp_path):
    """Before: MXNet's 'Decoding failed' traceback partway through the epoch, naming no file."""
    import os
    import subprocess
    import sys

    for cls in ("a", "b"):
        for split in ("train", "val"):
            os.makedirs(tmp_path / "data" / split / cls)
            for i in range(4):
                (tmp_path / "data" / split / cls / f"{i}.png").write_bytes(
                    encoded(pixels(12, 10, seed=i), ".png"))
    damaged = tmp_path / "data" / "train" / "b" / "2.png"
    damaged.write_bytes(b"")
    done = subprocess.run([sys.executable, "-m", "gluonkit.recipes.classify", "--dataset",
                           f"imagefolder:{tmp_path / 'data'}", "--image-size", "8", "--epochs", "1",
                           "--batch-size", "4", "--out", "", "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env=dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE"))
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last == f"gluonkit-classify: {damaged} is empty (0 bytes); " \
                                            "remove it or replace it with an image."
    assert "Traceback" not in done.stderr


def test_a_jpeg_with_a_thumbnail_in_a_large_segment_is_read_past_it(tmp_path):
    """The header and end-of-image checks walk the marker segments by their lengths: a
    thumbnail (with markers of its own) in a 60 kB segment before the frame is skipped."""
    data = encoded(pixels(), ".jpg")
    thumbnail = encoded(pixels(8, 8, seed=5), ".jpg")               # SOI ... SOS ... EOI
    payload = b"Exif\x00\x00" + thumbnail + bytes(60000 - len(thumbnail))
    segment = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    path = tmp_path / "photo.jpg"
    path.write_bytes(data[:2] + segment + data[2:])
    np.testing.assert_array_equal(read_image(path).asnumpy(), mx.image.imread(str(path)).asnumpy())
    assert read_image(path).shape == (40, 50, 3)
    path.write_bytes(data[:2] + segment + data[2:len(data) - 200])   # the thumbnail ends, the image not
    with pytest.raises(ImageError, match="photo.jpg is cut short"):
        read_image(path)


@pytest.mark.parametrize("header", [b"\xff\xd8\xff\xe0\x00\x00", b"\xff\xd8\xff\xe0\x00\x01JFIF",
                                    b"\xff\xd8\xff\xff\xff", b"\xff\xd8\xff\xda\x00\x08"])
def test_damaged_jpeg_headers_are_refused(tmp_path, header):
    path = tmp_path / "odd.jpg"
    path.write_bytes(header)
    with pytest.raises(ImageError, match="odd.jpg cannot be decoded as an image"):
        read_image(path)


def test_an_image_folder_lists_every_decodable_format_and_no_hidden_entry(tmp_path):
    """One rule: what read_image decodes (BMP and TIFF too) is an image; a hidden folder
    (.ipynb_checkpoints) is no class; other files are left out with one warning."""
    for name, suffix in [("cat", ".png"), ("cat", ".BMP"), ("dog", ".tif"), ("dog", ".jpg")]:
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / f"a{suffix}").write_bytes(encoded(pixels(seed=len(suffix)), suffix.lower()))
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "x.png").write_bytes(encoded(pixels(), ".png"))
    (tmp_path / "cat" / ".DS_Store").write_bytes(b"\0")
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    with pytest.warns(UserWarning, match=r"dog: left out 1 file\(s\) that are not images \(notes.txt\)"):
        folder = ImageFolderDataset(str(tmp_path))
    assert folder.synsets == ["cat", "dog"]
    assert [(os.path.basename(path), label) for path, label in folder.items] == \
        [("a.BMP", 0), ("a.png", 0), ("a.jpg", 1), ("a.tif", 1)]
    image, label = folder[0]
    assert image.shape == (40, 50, 3) and label == 0


def _with_orientation(image, suffix, orientation):
    """``image`` (RGB) as a ``suffix`` file's bytes whose EXIF orientation is ``orientation``,
    written by Pillow as a camera writes it."""
    import io

    from PIL import Image
    stored = Image.fromarray(image)
    exif = stored.getexif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    stored.save(out, format={".jpg": "JPEG", ".png": "PNG"}[suffix], exif=exif)
    return out.getvalue()


@pytest.mark.parametrize("suffix", [".jpg", ".png"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_oriented_images_decode_upright_or_as_stored(tmp_path, suffix, orientation):
    # phone photos: a 6 was refused ("decodes to 61x83 pixels but its header says 83x61")
    from PIL import Image, ImageOps
    path = tmp_path / f"photo{suffix}"
    path.write_bytes(_with_orientation(pixels(61, 83), suffix, orientation))
    with Image.open(path) as opened:
        stored = np.asarray(opened.convert("RGB"))
        upright = np.asarray(ImageOps.exif_transpose(opened).convert("RGB"))
    assert upright.shape[:2] == ((83, 61) if orientation >= 5 else (61, 83))
    np.testing.assert_array_equal(read_image(path).asnumpy(), upright)           # Pillow's turn
    np.testing.assert_array_equal(decode_image(path.read_bytes(), "x").asnumpy(), upright)
    assert read_image(path, 1).shape[:2] == upright.shape[:2]
    np.testing.assert_array_equal(read_image(path, upright=False).asnumpy(), stored)
    np.testing.assert_array_equal(read_image(path, upright=False).asnumpy(),
                                  mx.image.imread(str(path)).asnumpy())  # MXNet's decoder: as stored


def _jpeg_with_app1(payload):
    data = encoded(pixels(20, 30), ".jpg")
    return data[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + data[2:]


def _ifd(order, offset, count, entries=b""):
    return order + (b"\x00\x2a" if order == b"MM" else b"\x2a\x00") + offset + count + entries


@pytest.mark.parametrize("payload", [
    b"Exif\0\0",                                                     # no TIFF header
    b"Exif\0\0II*\0",                                                # cut short
    b"Exif\0\0XX*\0\x08\0\0\0",                                      # no byte order
    b"Exif\0\0" + _ifd(b"MM", b"\xff\xff\xff\xff", b""),             # IFD beyond the segment
    b"Exif\0\0" + _ifd(b"MM", b"\0\0\0\x08", b"\xff\xff"),           # 65535 entries announced
    b"Exif\0\0" + _ifd(b"MM", b"\0\0\0\x08", b"\0\x01", b"\x01\x12\0\x03\0\0\0\x01\0\x63\0\0"),
    b"Exif\0\0" + _ifd(b"MM", b"\0\0\0\x08", b"\0\x01", b"\x01\x12\0\x04\0\0\0\x01\0\x00\0\x06"),
    b"Exif\0\0" + _ifd(b"II", b"\x08\0\0\0", b"\x01\0", b"\x12\x01\x03\0\x01\0\0\0\x06"),  # cut
], ids=["empty", "short", "order", "offset", "count", "value-99", "type-long", "entry-cut"])
def test_malformed_exif_counts_as_no_orientation(tmp_path, payload):
    path = tmp_path / "odd.jpg"
    path.write_bytes(_jpeg_with_app1(payload))
    assert read_image(path).shape == (20, 30, 3)


def test_a_well_formed_exif_segment_written_by_hand_is_read_in_both_byte_orders(tmp_path):
    for order, entry in ((b"MM", b"\x01\x12\0\x03\0\0\0\x01\0\x06\0\0"),
                         (b"II", b"\x12\x01\x03\0\x01\0\0\0\x06\0\0\0")):
        offset, count = (b"\0\0\0\x08", b"\0\x01") if order == b"MM" else (b"\x08\0\0\0", b"\x01\0")
        path = tmp_path / "turned.jpg"
        path.write_bytes(_jpeg_with_app1(b"Exif\0\0" + _ifd(order, offset, count, entry)))
        assert read_image(path).shape == (30, 20, 3)
        assert read_image(path, upright=False).shape == (20, 30, 3)
