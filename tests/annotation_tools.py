"""The annotation tools' own exporters, for tests on the files they write: Label Studio's
converter (``label-studio-converter``) and CVAT's dataset framework (``datumaro``), in a
virtual environment of their own (they need numpy>=1.24, which mxnet 1.9.1 cannot import
with), built once and reused under ``~/.cache/gluonkit`` or ``GLUONKIT_ANNOTATION_TOOLS_ENV``.

Test modules import it with ``from annotation_tools import tools_python, label_studio_coco``.
Where it cannot be built (no network) the tests that need it skip, unless
``GLUONKIT_REQUIRE_ANNOTATION_TOOL_TESTS=1`` (CI) makes them fail.

    PYTHONPATH=. python tests/annotation_tools.py     # build it (or find it), print its Python
"""
import hashlib
import json
import os
import subprocess
import sys

import cv2
import pytest

from benchmarks.serving_env import built_python

REQUIRE = "GLUONKIT_REQUIRE_ANNOTATION_TOOL_TESTS"
#: The exporters, at the versions the tests were written against.
REQUIREMENTS = ["label-studio-converter==0.0.59", "datumaro==1.13.12"]

#: Label Studio's converter: ``tasks.json`` (a Label Studio JSON export) in the working folder
#: to COCO there (``result.json``, images under ``images/``), for the labelling config argv[1].
LABEL_STUDIO = """
import sys
from label_studio_converter import Converter
Converter(config=sys.argv[1], project_dir=".").convert_to_coco(
    "tasks.json", ".", output_image_dir="images", is_dir=False)
"""

#: datumaro: the items of ``items.json`` (subset, id, image file and its (height, width),
#: boxes [x, y, w, h, label], numbered from 1 over all items)
#: exported in the format argv[1] ('coco_instances', 'voc_detection') to the folder argv[2].
DATUMARO = """
import json, sys
import datumaro as dm
from datumaro.components.annotation import Bbox
from datumaro.components.media import Image
spec = json.load(open("items.json"))
items, number = [], 0
for item in spec["items"]:
    boxes = []
    for x, y, w, h, label in item["boxes"]:
        number += 1
        boxes.append(Bbox(x, y, w, h, label=label, id=number))
    media = Image.from_file(item["image"], size=tuple(item["size"]))     # (height, width)
    items.append(dm.DatasetItem(id=item["id"], subset=item["subset"], media=media,
                                annotations=boxes))
dataset = dm.Dataset.from_iterable(items, categories=spec["classes"])
dataset.export(sys.argv[2], sys.argv[1], save_media=True)
"""


def folder():
    """Where the environment is: ``GLUONKIT_ANNOTATION_TOOLS_ENV``, or a folder of the cache
    named after the requirements and this Python."""
    key = hashlib.sha256(" ".join(REQUIREMENTS + [sys.version]).encode()).hexdigest()[:12]
    default = os.path.join(os.path.expanduser("~"), ".cache", "gluonkit", f"annotation-tools-{key}")
    return os.environ.get("GLUONKIT_ANNOTATION_TOOLS_ENV", default)


@pytest.fixture(scope="session")
def tools_python():
    """The Python of the environment holding the annotation tools."""
    try:
        return built_python(folder(), REQUIREMENTS)
    except (subprocess.SubprocessError, OSError) as err:
        detail = getattr(err, "stderr", b"") or b""
        message = (f"the annotation tools ({', '.join(REQUIREMENTS)}) cannot be installed "
                   f"({err}; {detail.decode(errors='replace').strip()[-300:]})")
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{message}; {REQUIRE}=1 forbids skipping.")
        pytest.skip(message)


def run_tool(python, script, folder, *args):
    """Run ``script`` in the tools' environment in ``folder``; it must succeed."""
    proc = subprocess.run([python, "-c", script, *map(str, args)], cwd=str(folder),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def label_studio_config(categories):
    """A labelling config of rectangles whose labels are ``categories``: ``{name: COCO id}``
    (given in the config as ``category="ID"``, or None for none)."""
    labels = "".join(f'<Label value="{name}"' + (f' category="{ident}"' if ident is not None else "")
                     + "/>" for name, ident in categories.items())
    return ('<View><Image name="image" value="$image"/><RectangleLabels name="label" '
            f'toName="image">{labels}</RectangleLabels></View>')


def label_studio_coco(python, folder, tasks, categories):
    """Label Studio's COCO export of ``tasks``: ``[(image file relative to folder, (width,
    height) as shown, [(name, [x, y, w, h] in pixels as shown), ...])]``, written by the
    converter as ``folder/result.json``, which is returned."""
    exported = []
    for number, (image, (width, height), boxes) in enumerate(tasks, 1):
        result = [{"id": f"r{number}-{k}", "from_name": "label", "to_name": "image",
                   "type": "rectanglelabels", "original_width": width, "original_height": height,
                   "image_rotation": 0,
                   "value": {"x": 100 * x / width, "y": 100 * y / height, "width": 100 * w / width,
                             "height": 100 * h / height, "rotation": 0, "rectanglelabels": [name]}}
                  for k, (name, (x, y, w, h)) in enumerate(boxes)]
        exported.append({"id": number, "data": {"image": image},
                         "annotations": [{"id": number, "result": result}]})
    with open(os.path.join(folder, "tasks.json"), "w") as f:
        json.dump(exported, f)
    run_tool(python, LABEL_STUDIO, folder, label_studio_config(categories))
    return os.path.join(folder, "result.json")


def datumaro_export(python, folder, fmt, items, classes):
    """datumaro's export in ``fmt`` of ``items``: ``[(subset, id, image file, [(x, y, w, h,
    label index), ...])]`` into ``folder/fmt``, which is returned."""
    spec = {"classes": list(classes),
            "items": [{"subset": subset, "id": ident, "image": str(image), "boxes": boxes,
                       "size": cv2.imread(str(image)).shape[:2]}
                      for subset, ident, image, boxes in items]}
    with open(os.path.join(folder, "items.json"), "w") as f:
        json.dump(spec, f)
    run_tool(python, DATUMARO, folder, fmt, fmt)
    return os.path.join(folder, fmt)


if __name__ == "__main__":
    print(built_python(folder(), REQUIREMENTS))
