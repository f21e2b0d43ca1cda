"""What a prediction returns and prints, the same from MXNet (``gluonkit.predict``,
``gluonkit-predict``) and from onnxruntime (``gluonkit.serve``, ``gluonkit-serve``).

A classifier's result is ``{'image', 'top', 'outputs'}`` (the top classes with their
probabilities, per output); a detector's is ``{'image', 'width', 'height', 'score_threshold',
'boxes'}`` (the lowest score reported; class, score and corners in the image's own pixels).
This module imports NumPy only.
"""
import json
import os
import sys

import numpy as np

from .imagefiles import SUFFIXES, ImageError
from .metadata import ExportError

__all__ = ["image_files", "softmax", "check_finite", "not_run", "classified", "detected",
           "format_results", "print_stream", "exit_as_command", "command_options"]

_TOP_K = 5      # the commands' default --top-k


def image_files(paths):
    """The image files among ``paths``: files as given, directories walked (sorted)."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                found += [os.path.join(root, n) for n in sorted(names)
                          if n.lower().endswith(SUFFIXES)]
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such image file or directory.")
    if not found:
        raise FileNotFoundError(f"no image files ({', '.join(SUFFIXES)}) in {list(paths)}.")
    return found


def softmax(scores):
    """The softmax of a 1-D array of class scores (float32, as MXNet's)."""
    scores = np.asarray(scores, dtype=np.float32)
    exp = np.exp(scores - scores.max())
    return exp / exp.sum()


def check_finite(outputs, kind, model, name):
    """``ExportError`` naming the ``model`` file and the image ``name`` unless the network's
    ``outputs`` for that image (NumPy arrays) are finite: a detector's in its boxes (rows of id
    -1, the padding, excepted), a classifier's everywhere. NaN or infinity is what damaged
    weights (or a training that diverged) give, not an answer to print."""
    names = [f"output {i}" for i in range(len(outputs))]
    if kind == "detector":
        ids = np.asarray(outputs[0]).reshape(-1)
        boxes = ~(ids < 0)                        # NaN ids count as boxes
        outputs = [np.asarray(o).reshape(len(ids), -1)[boxes] for o in outputs]
        names = ["class ids", "scores", "box corners"][:len(outputs)] + names[3:]
    for what, values in zip(names, outputs):
        bad = int(np.size(values) - np.isfinite(values).sum())
        if bad:
            raise ExportError(f"{model} gives non-finite {what} (NaN or infinity: {bad} of "
                              f"{np.size(values)} values) for {name}: its weights are damaged, "
                              "or its training diverged or was too short; export it again from "
                              "a good checkpoint, or train longer or at a lower learning rate.")


def _top(probabilities, classes, k):
    order = np.argsort(-probabilities, kind="stable")[:k]
    return [{"class": classes[i] if classes else int(i), "probability": float(probabilities[i])}
            for i in order]


def not_run(name, plan, model_path):
    """The ``ImageError`` of the image ``name`` whose input (``plan``: a
    :class:`gluonkit.preprocessing.Plan`) the network of ``model_path`` failed to run on: said
    in one line, so that the other images are still predicted."""
    (width, height), (in_width, in_height) = plan.size, plan.input_size
    return ImageError(f"{name} ({width}x{height} pixels, input {in_width}x{in_height}) cannot be "
                      f"run by {model_path}: its graph fails on an input of that size; give the "
                      "image another shape (closer to square), or export the model again "
                      "(gluonkit records the smallest input each family takes).")


def classified(name, specs, probabilities, top_k):
    """The result of an image ``name`` whose outputs (``specs``: the metadata's
    ``[{'name', 'classes'}]``) gave ``probabilities`` (one 1-D array per output)."""
    per_output = {spec["name"]: _top(np.asarray(p), spec["classes"], top_k)
                  for spec, p in zip(specs, probabilities)}
    return {"image": name, "top": per_output[specs[0]["name"]], "outputs": per_output}


def detected(name, plan, classes, outputs, threshold):
    """The result of an image ``name`` (its :class:`gluonkit.preprocessing.Plan` ``plan``)
    whose detector ``outputs`` were ids, scores and boxes (NumPy, input pixels): the boxes
    whose id is a class and score at least ``threshold``, best first, in the image's pixels."""
    ids, scores, boxes = (np.asarray(o) for o in outputs)
    ids, scores, boxes = ids.reshape(-1), scores.reshape(-1), boxes.reshape(-1, 4)
    kept = np.flatnonzero((ids >= 0) & (scores >= threshold))
    kept = kept[np.argsort(-scores[kept], kind="stable")]
    width, height = plan.size
    return {"image": name, "width": width, "height": height, "score_threshold": threshold,
            "boxes": [{"class": classes[int(ids[i])] if classes and ids[i] < len(classes)
                       else int(ids[i]), "score": float(scores[i]),
                       "box": [float(v) for v in plan.to_image(boxes[i])]} for i in kept]}


def _format_boxes(result):
    if not result["boxes"]:
        return f"no boxes scoring {result['score_threshold']:g} or more"
    return "; ".join(f"{b['class']} ({b['score']:.3f}) at " + ",".join(f"{v:.1f}" for v in b["box"])
                     for b in result["boxes"])


def _format_classes(result):
    parts = [", ".join(f"{t['class']} ({t['probability']:.3f})" for t in top)
             for top in result["outputs"].values()]
    if len(parts) > 1:
        parts = [f"{name}: {part}" for name, part in zip(result["outputs"], parts)]
    return " | ".join(parts)


def format_results(results):
    """Lines of text, one per image: ``IMAGE: CLASS (PROBABILITY), ...`` (per output for
    several outputs), or for a detector ``IMAGE: CLASS (SCORE) at XMIN,YMIN,XMAX,YMAX; ...``."""
    return [f"{r['image']}: " + (_format_boxes(r) if "boxes" in r else _format_classes(r))
            for r in results]


def print_stream(results, as_json, prog="gluonkit-predict"):
    """Print each result as it comes: a text line, or an element of one JSON list (closed also
    when the model fails, so the output stays valid JSON); an image that failed (a result with
    an 'error') goes to stderr as one line after ``prog``, and into the JSON list. Returns the
    number of images that failed."""
    failed = 0

    def show(result, text):
        nonlocal failed
        if "error" in result:
            failed += 1
            sys.stdout.flush()
            print(f"{prog}: {result['error']}", file=sys.stderr, flush=True)
        elif text:
            print(format_results([result])[0], flush=True)

    if not as_json:
        for result in results:
            show(result, True)
        return failed
    print("[")
    try:
        for count, result in enumerate(results):
            show(result, False)
            print(("" if count == 0 else ",\n") + json.dumps(result, indent=1), end="", flush=True)
    finally:
        print("\n]", flush=True)
    return failed


def exit_as_command(prog, body, errors=(OSError, ValueError)):
    """Run ``body()``, the work of the command ``prog`` that prints results and returns the
    number of images that failed, and exit as a command does: status 1 if an image failed
    (each was named on stderr) or stdout's reader went away (``| head``), and one line
    ``prog: message`` on any of ``errors`` (a file not there or unreadable, a damaged model)."""
    try:
        failed = body()
    except BrokenPipeError:   # the reader stopped: nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except errors as err:
        sys.stdout.flush()
        sys.exit(f"{prog}: {err}")
    if failed:
        sys.exit(1)


def command_options(model, name, top_k, score_threshold):
    """``(top_k, score_threshold)`` for the loaded ``model`` (called ``name``) from the
    commands' ``--top-k`` and ``--score-threshold`` (None where not given): ``ValueError`` for
    an option of the other kind of model, which would be ignored. For a detector, says on
    stderr which threshold applies and where it comes from (the results stay one line per
    image on stdout)."""
    if model.kind == "detector" and top_k is not None:
        raise ValueError(f"--top-k {top_k}: {name} is a detector, which prints every box "
                         "above --score-threshold; drop --top-k or pass --score-threshold S.")
    if model.kind != "detector" and score_threshold is not None:
        raise ValueError(f"--score-threshold {score_threshold}: {name} is a classifier, "
                         "which prints its top classes; drop it or pass --top-k K.")
    if model.kind == "detector":
        given = score_threshold is not None
        print(f"boxes scoring {score_threshold if given else model.score_threshold:g} or more ("
              + ("--score-threshold" if given else "the model's threshold: its run's best F1"
                 if "score_threshold" in model.metadata else "the default") + ")",
              file=sys.stderr, flush=True)
    return top_k or _TOP_K, score_threshold     # None: the model's recorded threshold
