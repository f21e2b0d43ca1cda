"""The ``gluonkit-serve`` command: classify image files, or find objects in them, with a
``model.onnx`` in onnxruntime, where MXNet is not installed.

    gluonkit-serve model.onnx photo.png more_photos/ --top-k 3
    gluonkit-serve model.onnx photo.png --json
    gluonkit-serve model.onnx street.png --score-threshold 0.3

Prints what ``gluonkit-predict`` prints for the MXNet export: per image the top classes with
their probabilities, or the boxes with class, score and corners in the image's own pixels;
``--json`` prints one JSON list. A file that cannot be used (a damaged model or image, an
image beyond the limits) ends the command with one line naming it, and status 1.
"""
import argparse

from ..imagefiles import add_limit_options
from ..results import exit_as_command, print_stream
from ..validate import finite_real, positive_int
from .model import load
from .predict import iter_predict

__all__ = ["parse_args", "main"]


def _typed(check, convert=int):
    """An argparse type: ``text`` converted, then checked by ``check(value, 'value')``."""
    def parse(text):
        try:
            return check(convert(text), "value")
        except (TypeError, ValueError) as err:
            raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    parse.__name__ = check.__name__
    return parse


def _score(value, name):
    return finite_real(value, name, minimum=0.0)


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(prog="gluonkit-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", metavar="MODEL.onnx", help="the model.onnx of an export")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR",
                        help="image files, or directories searched for them")
    parser.add_argument("--top-k", type=_typed(positive_int), default=5,
                        help="classes per image (classifiers)")
    parser.add_argument("--score-threshold", type=_typed(_score, float), metavar="S",
                        help="the lowest score of a box printed (detectors; default: the one the "
                             "model's run recorded, its best F1 on the validation set, else 0.5)")
    parser.add_argument("--batch-size", type=_typed(positive_int), default=32,
                        help="images read and run together")
    parser.add_argument("--threads", type=_typed(positive_int), default=None,
                        help="onnxruntime's threads within an operator (default: all cores)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_limit_options(parser.add_argument_group("image limits"))
    return parser.parse_args(argv)


def main(argv=None):
    """The ``gluonkit-serve`` command."""
    args = parse_args(argv)

    def serve():
        model = load(args.model, args.threads)
        results = iter_predict(model, args.images, top_k=args.top_k, batch_size=args.batch_size,
                               score_threshold=args.score_threshold,
                               max_pixels=args.max_image_pixels, max_aspect=args.max_aspect_ratio,
                               on_error="report")
        return print_stream(results, args.json, prog="gluonkit-serve")

    exit_as_command("gluonkit-serve", serve, (OSError, ValueError, ImportError))   # no onnxruntime: ImportError


if __name__ == "__main__":
    main()
