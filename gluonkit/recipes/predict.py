"""Classify image files, or find objects in them, with a model exported by a gluonkit recipe
(or ``gluonkit.export_model``).

    gluonkit-predict --model runs/classify photo.png more_photos/ --top-k 3
    gluonkit-predict --model runs/classify/model photo.png --json
    gluonkit-predict --model runs/detect/model-symbol.json street.png --score-threshold 0.3
    gluonkit-predict --model runs/detect/model val/ --coco val.json > detections.json

For each image, prints the top classes with their probabilities (a classifier) or the boxes
found, with class, score and corners in the image's own pixels (a detector), using the
preprocessing saved with the model (``model.json``); ``--json`` prints one JSON list for
programs. ``--model`` takes the export's prefix, the run folder that holds it, or one of its
files. Results are printed batch by batch, as the images are read. An image that cannot be
used (damaged, not an image, beyond the limits) is reported in one line on stderr (in the
JSON list as ``{"image", "error"}``) and the others go on; the command then exits with
status 1. A model that cannot be used ends the command with one line naming it (status 1).
Output cut short by its reader (``--json | head``) ends the command quietly.
"""
import json
import os

from gluonkit.data.coco import coco_result_ids
from gluonkit.deploy.inference import iter_predict, load_model
from gluonkit.recipes import common
from gluonkit.recipes.coco_metric import coco_results
from gluonkit.deploy.results import command_options, exit_as_command, format_results, print_stream

__all__ = ["parse_args", "main", "format_results"]


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``)."""
    parser = common.build_parser(__doc__.split("\n\n")[0], prog="gluonkit-predict")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR",
                        help="image files, or directories searched for them")
    parser.add_argument("--model", required=True, metavar="PREFIX",
                        help="the exported model: its prefix (OUT/model for "
                             "OUT/model-symbol.json), the run folder OUT, or one of its files")
    parser.add_argument("--top-k", type=common.positive_int,
                        help="classes per image (classifiers; default 5)")
    parser.add_argument("--score-threshold", type=common.non_negative_float, metavar="S",
                        help="the lowest score of a box printed (detectors; default: the one the "
                             "model's run recorded, its best F1 on the validation set, else 0.5)")
    parser.add_argument("--batch-size", type=common.positive_int, default=32,
                        help="images read and run together")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--coco", nargs="?", const="", metavar="ANNOTATIONS.json",
                        help="detectors: print COCO's results format instead (a JSON list of "
                             "image_id, category_id, bbox as [x, y, width, height], score) for "
                             "other tools to score; the image ids are ANNOTATIONS.json's ids "
                             "of the image files (found as gluonkit-detect finds them), else "
                             "1, 2, ... in order")
    parser.add_argument("--coco-images", metavar="DIR",
                        help="the folder that the --coco file's file_name entries are relative "
                             "to, as gluonkit-detect's --images")
    parser.add_argument("--ctx", type=common.ctx_type, default="cpu:0", help="the device to run on")
    common.add_image_limits(parser)
    return common.parse_with_config(parser, argv)


def _image_id(image, ids, number, annotations):
    """The id in ``ids`` ({real path: id}) of the file ``image``; ``number`` without ``ids``."""
    if ids is None:
        return number
    ident = ids.get(os.path.realpath(image))
    if ident is None:
        raise ValueError(f"{image} is not one of the images of {annotations} (where its "
                         "file_name entries lead); predict on those images, or leave the file "
                         "out to number the images 1, 2, ...")
    return ident


def _print_coco(results, model, annotations, images_dir):
    """Print the detections of ``results`` as one JSON list in COCO's results format, with
    the ids as the file ``annotations`` writes them (pycocotools compares them so)."""
    ids, written = coco_result_ids(annotations, images_dir) if annotations else (None, {})
    classes = model.metadata["outputs"][0].get("classes") or []
    categories = [written.get(c, c) for c in
                  model.metadata.get("category_ids") or range(len(classes))]
    detections = []
    for number, result in enumerate(results, 1):
        image_id = _image_id(result["image"], ids, number, annotations)
        for box in result["boxes"]:
            index = classes.index(box["class"]) if box["class"] in classes else int(box["class"])
            detections += coco_results(image_id, [box["box"]], [index], [box["score"]],
                                       categories)
    print(json.dumps(detections), flush=True)


def main(argv=None):
    """The ``gluonkit-predict`` command."""
    args = parse_args(argv)

    def predict():
        model = load_model(args.model, common.parse_ctx(args.ctx)[0])
        top_k, threshold = command_options(model, args.model, args.top_k, args.score_threshold)
        results = iter_predict(model, args.images, top_k=top_k, batch_size=args.batch_size,
                               score_threshold=threshold, max_pixels=args.max_image_pixels,
                               max_aspect=args.max_aspect_ratio,
                               on_error="raise" if args.coco is not None else "report")
        if args.coco is None:
            return print_stream(results, args.json, prog="gluonkit-predict")
        if model.kind != "detector":
            raise ValueError(f"--coco writes detections; {args.model} is a {model.kind}.")
        _print_coco(results, model, args.coco, args.coco_images)
        return 0

    exit_as_command("gluonkit-predict", predict)   # ExportError, ImageError: ValueErrors


if __name__ == "__main__":
    main()
