"""COCO detection files for the tests, written as CVAT exports them: ``annotations/`` with one
JSON per split and ``images/`` beside it, category ids from 1 with gaps, a crowd region, and
an image without objects.

Test modules import them with ``from coco_files import write_coco``.
"""
import json
import os

import cv2
import numpy as np

#: Category ids as a tool numbers them: from 1, with a gap.
CATEGORIES = [{"id": 1, "name": "cat", "supercategory": ""},
              {"id": 3, "name": "dog", "supercategory": ""}]


def cvat_export(images, start_id=1, categories=CATEGORIES):
    """A COCO dict of ``images``: ``[(file_name, width, height, [(category id, [x, y, w, h],
    iscrowd), ...])]`` and ``categories``; segmentation and the other fields CVAT writes are
    filled in too."""
    document = {"licenses": [{"name": "", "id": 0, "url": ""}],
                "info": {"contributor": "", "date_created": "", "description": "", "url": "",
                         "version": "", "year": ""},
                "categories": [dict(c) for c in categories], "images": [], "annotations": []}
    for number, (name, width, height, objects) in enumerate(images):
        image_id = start_id + number
        document["images"].append({"id": image_id, "width": width, "height": height,
                                   "file_name": name, "license": 0, "flickr_url": "",
                                   "coco_url": "", "date_captured": 0})
        for category, (x, y, w, h), crowd in objects:
            document["annotations"].append({
                "id": len(document["annotations"]) + 1, "image_id": image_id,
                "category_id": category, "segmentation": [[x, y, x + w, y, x + w, y + h]],
                "area": w * h, "bbox": [x, y, w, h], "iscrowd": crowd,
                "attributes": {"occluded": False}})
    return document


#: A training split: two objects, a crowd region, an image without objects.
TRAIN = [("a.jpg", 40, 30, [(1, [2.5, 3, 20, 12.25], 0), (3, [10, 8, 29, 22], 0)]),
         ("sub/b.jpg", 36, 48, [(3, [0, 0, 36, 48], 0), (1, [4, 4, 10, 10], 1)]),
         ("c.jpg", 32, 32, [])]
VAL = [("d.jpg", 40, 30, [(1, [5, 5, 10, 10], 0)])]


def write_coco(root, splits=None, documents=None):
    """A CVAT-style export under ``root``: ``annotations/instances_<split>.json`` and the
    images (random JPEGs of the declared sizes) in ``images/``. Returns the JSON paths."""
    splits = splits if splits is not None else {"train": TRAIN, "val": VAL}
    os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
    rng = np.random.RandomState(0)
    paths = []
    for number, (split, images) in enumerate(splits.items()):
        for name, width, height, _ in images:
            path = os.path.join(root, "images", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            cv2.imwrite(path, rng.randint(0, 255, (height, width, 3), np.uint8))
        document = (documents or {}).get(split) or cvat_export(images, start_id=1 + 100 * number)
        path = os.path.join(root, "annotations", f"instances_{split}.json")
        with open(path, "w") as f:
            json.dump(document, f)
        paths.append(path)
    return paths
