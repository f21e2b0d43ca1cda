"""Detection data written the way users' tools write it: Pascal VOC folders and RecordIO files
packed as GluonCV's detection im2rec packs them, from any list of (image, label) samples.

Test modules import them with ``from detection_files import write_voc``.
"""
import os

import cv2
import mxnet as mx
import numpy as np

from gluonkit.data import ShapesDetection


def write_voc(root, dataset, names, splits=None):
    """A Pascal VOC folder (1-based inclusive pixel boxes) holding ``dataset``'s samples (an
    image without objects gets an annotation without <object>); ``splits`` maps a list name
    to sample indices written to ImageSets/Main/<name>.txt. Returns the image ids."""
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    ids = []
    for i in range(len(dataset)):
        image, label = dataset[i]
        image = image.asnumpy() if isinstance(image, mx.nd.NDArray) else image
        ident = f"{i:04d}"
        ids.append(ident)
        cv2.imwrite(os.path.join(root, "JPEGImages", ident + ".jpg"), image[:, :, ::-1])
        objects = "".join(
            f"<object><name>{names[int(c)]}</name><difficult>{int(d)}</difficult><bndbox>"
            f"<xmin>{int(x0) + 1}</xmin><ymin>{int(y0) + 1}</ymin><xmax>{int(x1) + 1}</xmax>"
            f"<ymax>{int(y1) + 1}</ymax></bndbox></object>" for x0, y0, x1, y1, c, d in label)
        with open(os.path.join(root, "Annotations", ident + ".xml"), "w") as f:
            f.write(f"<annotation><size><width>{image.shape[1]}</width><height>{image.shape[0]}"
                    f"</height><depth>3</depth></size>{objects}</annotation>")
    for split, indices in (splits or {}).items():
        with open(os.path.join(root, "ImageSets", "Main", f"{split}.txt"), "w") as f:
            f.write("".join(ids[i] + "\n" for i in indices))
    return ids


def write_rec(path, dataset, difficult=False):
    """``dataset`` as GluonCV's detection im2rec packs it: per image an ``IRHeader`` whose label
    is [header length 2, object width, class, xmin, ymin, xmax, ymax (0-1), (difficult)...]
    and the image encoded lossless, with the .idx beside the .rec."""
    width = 6 if difficult else 5
    record = mx.recordio.MXIndexedRecordIO(str(path.with_suffix(".idx")), str(path), "w")
    for i in range(len(dataset)):
        image, label = dataset[i]
        image = image.asnumpy() if isinstance(image, mx.nd.NDArray) else image
        height, wide = image.shape[:2]
        objects = [[c, x0 / wide, y0 / height, x1 / wide, y1 / height] + ([d] if difficult else [])
                   for x0, y0, x1, y1, c, d in label]
        header = mx.recordio.IRHeader(0, np.array([2, width] + sum(objects, []), np.float32), i, 0)
        record.write_idx(i, mx.recordio.pack_img(header, image[:, :, ::-1], img_fmt=".png"))
    record.close()


def with_empty_images(dataset, empty, seed=0):
    """The samples of ``dataset`` as a list, those at ``empty`` replaced by images without
    objects (textured noise of the same size, label (0, 6))."""
    rng = np.random.RandomState(seed)
    samples = []
    for i in range(len(dataset)):
        image, label = dataset[i]
        image = image.asnumpy()
        if i in empty:
            image = rng.randint(60, 200, size=image.shape).astype(np.uint8)
            label = np.zeros((0, 6), np.float32)
        samples.append((image, np.asarray(label, np.float32)))
    return samples


def shapes_voc(root, train=6, val=4, empty_train=(1, 3, 4), empty_val=(1,)):
    """A VOC folder of the embedded shapes, some images without objects; returns ``root``."""
    source = with_empty_images(ShapesDetection("train", length=train), set(empty_train)) + \
        with_empty_images(ShapesDetection("val", length=val), set(empty_val), seed=1)
    write_voc(root, source, list(ShapesDetection.CLASSES),
              {"train": range(train), "val": range(train, train + val)})
    return root
