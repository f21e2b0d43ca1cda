"""Conformance data: what ``gluonkit-serve --dump DIR`` writes, so that another implementation
of a model's preprocessing and postprocessing (in any language) checks itself against it.

For every image, ``DIR`` gets its input tensor (``NNNN-input.npy``: the float32 (1, C, H, W)
array the graph was given) and the graph's raw outputs (``NNNN-OUTPUT.npy``, one per output,
as onnxruntime returned them for that image), and ``DIR/index.json`` lists them in order:
``[{"image", "width", "height", "steps", "input", "outputs": {name: file}, "result"}, ...]``
where ``steps`` are the resizes, crops and pads of docs/preprocessing.md, in order, and
``result`` is what the command printed for the image (as ``--json`` prints it). An image that
failed has its ``error`` instead. NumPy's ``.npy`` files read without pickle
(``np.load(path, allow_pickle=False)``, or any ``.npy`` reader).
"""
import json
import os

import numpy as np

from ...atomic import atomic_replace

__all__ = ["Dump"]

INDEX = "index.json"


class Dump:
    """The conformance data of one command run, written to the directory ``folder`` (made if
    missing; ``FileExistsError`` where it holds an ``index.json`` already, or is a file)."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        if os.path.exists(os.path.join(self.folder, INDEX)) or os.path.isfile(self.folder):
            raise FileExistsError(f"--dump {self.folder}: it holds conformance data already (or "
                                  "is a file); give a new or empty directory.")
        os.makedirs(self.folder, exist_ok=True)
        self.entries, self._pending, self._count = [], {}, 0

    def add(self, name, plan, tensor, outputs):
        """Write the input ``tensor`` (CHW) and the graph's ``outputs`` (``{name: array}``)
        of the image ``name`` preprocessed by ``plan``; its result follows (:meth:`result`)."""
        number = f"{self._count:04d}"
        self._count += 1
        given = f"{number}-input.npy"
        np.save(os.path.join(self.folder, given), tensor[None])
        files = {output: f"{number}-{output}.npy" for output in outputs}
        for output, value in outputs.items():
            np.save(os.path.join(self.folder, files[output]), np.asarray(value)[None])
        self._pending.setdefault(name, []).append({
            "image": name, "width": plan.size[0], "height": plan.size[1],
            "steps": [list(step) for step in plan.steps], "input": given, "outputs": files})

    def result(self, result):
        """Record ``result`` (a result dict, or ``{'image', 'error'}``) in the index."""
        waiting = self._pending.get(result["image"])
        entry = waiting.pop(0) if waiting else {"image": result["image"]}
        self.entries.append(dict(entry, **({"error": result["error"]} if "error" in result
                                           else {"result": result})))
        return result

    def close(self):
        """Write ``index.json``: every image recorded so far, in order."""
        text = (json.dumps(self.entries, indent=1) + "\n").encode()
        atomic_replace(self.folder, {INDEX: lambda f: f.write(text)})
