"""``python -m gluonkit.serve MODEL.onnx IMAGE...``: the ``gluonkit-serve`` command."""
from .command import main

main()
