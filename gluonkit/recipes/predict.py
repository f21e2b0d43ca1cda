"""Classify image files, or find objects in them, with a model exported by a gluonkit recipe
(or ``gluonkit.export_model``).

    gluonkit-predict --model runs/classify/model photo.png more_photos/ --top-k 3
    gluonkit-predict --model runs/classify/model photo.png --json
    gluonkit-predict --model runs/detect/model street.png --score-threshold 0.3

For each image, prints the top classes with their probabilities (a classifier) or the boxes
found, with class, score and corners in the image's own pixels (a detector), using the
preprocessing saved with the model (``model.json``); ``--json`` prints one JSON list for
programs. Results are printed batch by batch, as the images are read. A file that cannot be
used (a damaged model or image, an image beyond the limits) ends the command with one line
naming it, and status 1.
"""
import sys

from gluonkit.inference import iter_predict, load_model
from gluonkit.recipes import common
from gluonkit.results import format_results, print_stream

__all__ = ["parse_args", "main", "format_results"]

_MODULE = "gluonkit.recipes.predict"


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``)."""
    parser = common.build_parser(__doc__.split("\n\n")[0], prog="gluonkit-predict")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR",
                        help="image files, or directories searched for them")
    parser.add_argument("--model", required=True, metavar="PREFIX",
                        help="the exported model's prefix: OUT/model for OUT/model-symbol.json")
    parser.add_argument("--top-k", type=common.positive_int, default=5,
                        help="classes per image (classifiers)")
    parser.add_argument("--score-threshold", type=common.non_negative_float, default=0.5,
                        metavar="S", help="the lowest score of a box printed (detectors)")
    parser.add_argument("--batch-size", type=common.positive_int, default=32,
                        help="images read and run together")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--ctx", type=common.ctx_type, default="cpu:0", help="the device to run on")
    common.add_image_limits(parser)
    return common.parse_with_config(parser, argv)


def main(argv=None):
    """The ``gluonkit-predict`` command."""
    if argv is None:
        common.apply_threads(_MODULE)
    args = parse_args(argv)
    try:
        model = load_model(args.model, common.parse_ctx(args.ctx)[0])
        results = iter_predict(model, args.images, top_k=args.top_k, batch_size=args.batch_size,
                               score_threshold=args.score_threshold,
                               max_pixels=args.max_image_pixels, max_aspect=args.max_aspect_ratio)
        print_stream(results, args.json)
    except (OSError, ValueError) as err:   # a file not there or unreadable; ImageError, ExportError
        sys.stdout.flush()
        sys.exit(f"gluonkit-predict: {err}")


if __name__ == "__main__":
    main()
