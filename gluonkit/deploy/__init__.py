"""Exported models: the wing that writes them and runs them, in two sides.

The MXNet side: :mod:`.export` (``export_model``: symbol, parameters, ``model.json``),
:mod:`.onnx_export` and :mod:`.onnx_detection` (``model.onnx``, with ``box_nms`` translated as
MXNet computes it) and :mod:`.inference` (``load_model``, ``predict``).

The side that never imports mxnet (what a serving machine runs, with NumPy 2 and
onnxruntime): :mod:`.metadata` (``model.json``'s checks), :mod:`.imagefiles` (image-file
checks), :mod:`.preprocessing` (the plan from an image to the input), :mod:`.results` (what a
prediction returns and prints) and :mod:`.serve` (``gluonkit-serve``). Importing this package
imports neither side.
"""
