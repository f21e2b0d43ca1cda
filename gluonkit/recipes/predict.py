"""Classify image files with a model exported by a gluonkit recipe (or ``gluonkit.export``).

    gluonkit-predict --model runs/classify/model photo.png more_photos/ --top-k 3
    gluonkit-predict --model runs/classify/model photo.png --json

For each image, prints the top classes with their probabilities, using the preprocessing
saved with the model (``model.json``); ``--json`` prints one JSON list for programs.
"""
import argparse
import json
import sys

from ..inference import load_model, predict
from . import _cli

__all__ = ["parse_args", "main", "format_results"]

_MODULE = "gluonkit.recipes.predict"


def parse_args(argv=None):
    """Parse the command line (``argv``, default ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="gluonkit-predict")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR",
                        help="image files, or directories searched for them")
    parser.add_argument("--model", required=True, metavar="PREFIX",
                        help="the exported model's prefix: OUT/model for OUT/model-symbol.json")
    parser.add_argument("--top-k", type=_cli.positive_int, default=5, help="classes per image")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--ctx", type=_cli.ctx_type, default="cpu:0", help="the device to run on")
    return parser.parse_args(argv)


def format_results(results):
    """Lines of text: ``IMAGE: CLASS (PROBABILITY), ...`` (per output for several outputs)."""
    lines = []
    for result in results:
        parts = [", ".join(f"{t['class']} ({t['probability']:.3f})" for t in top)
                 for top in result["outputs"].values()]
        if len(parts) > 1:
            parts = [f"{name}: {part}" for name, part in zip(result["outputs"], parts)]
        lines.append(f"{result['image']}: " + " | ".join(parts))
    return lines


def main(argv=None):
    """The ``gluonkit-predict`` command."""
    if argv is None:
        _cli.apply_threads(_MODULE)
    args = parse_args(argv)
    try:
        model = load_model(args.model, _cli.parse_ctx(args.ctx)[0])
        results = predict(model, args.images, top_k=args.top_k)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"gluonkit-predict: {err}")
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print("\n".join(format_results(results)))


if __name__ == "__main__":
    main()
