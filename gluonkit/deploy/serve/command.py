"""The ``gluonkit-serve`` command: classify image files, or find objects in them, with a
``model.onnx`` in onnxruntime, where MXNet is not installed.

    gluonkit-serve model.onnx photo.png more_photos/ --top-k 3
    gluonkit-serve model.onnx photo.png --json
    gluonkit-serve model.onnx street.png --score-threshold 0.3
    gluonkit-serve model.onnx photos/ --dump conformance/

Prints what ``gluonkit-predict`` prints for the MXNet export: per image the top classes with
their probabilities, or the boxes with class, score and corners in the image's own pixels;
``--json`` prints one JSON list. A file that cannot be used (a damaged model or image, an
image beyond the limits) ends the command with one line naming it, and status 1.
"""
from ...arguments import OneLineParser
from ..imagefiles import add_limit_options
from ..results import command_options, exit_as_command, print_stream
from ...validate import argument_type, finite_real, positive_int
from .model import check_threads, load
from .predict import iter_predict

__all__ = ["parse_args", "main"]

_score = argument_type(lambda value, name: finite_real(value, name, minimum=0.0), float,
                       "a number")


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``)."""
    parser = OneLineParser(prog="gluonkit-serve", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("model", metavar="MODEL.onnx", help="the model.onnx of an export")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR",
                        help="image files, or directories searched for them")
    parser.add_argument("--top-k", type=argument_type(positive_int),
                        help="classes per image (classifiers; default 5)")
    parser.add_argument("--score-threshold", type=_score, metavar="S",
                        help="the lowest score of a box printed (detectors; default: the one the "
                             "model's run recorded, its best F1 on the validation set, else 0.5)")
    parser.add_argument("--batch-size", type=argument_type(positive_int), default=32,
                        help="images read and run together")
    parser.add_argument("--threads", type=argument_type(check_threads), default=None,
                        help="onnxruntime's threads within an operator, at most the CPUs this "
                             "process may use (default: all of them)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--dump", metavar="DIR",
                        help="write every image's input tensor, the graph's outputs and the "
                             "results to DIR (index.json and .npy files): conformance data for "
                             "another implementation of the preprocessing (docs/preprocessing.md)")
    add_limit_options(parser.add_argument_group("image limits"))
    return parser.parse_args(argv)


def main(argv=None):
    """The ``gluonkit-serve`` command."""
    args = parse_args(argv)

    def serve():
        model = load(args.model, args.threads)
        top_k, threshold = command_options(model, args.model, args.top_k, args.score_threshold)
        results = iter_predict(model, args.images, top_k=top_k, batch_size=args.batch_size,
                               score_threshold=threshold,
                               max_pixels=args.max_image_pixels, max_aspect=args.max_aspect_ratio,
                               on_error="report", dump=args.dump)
        return print_stream(results, args.json, prog="gluonkit-serve")

    exit_as_command("gluonkit-serve", serve, (OSError, ValueError, ImportError))   # no onnxruntime: ImportError


if __name__ == "__main__":
    main()
