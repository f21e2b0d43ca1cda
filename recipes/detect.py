"""Train a GluonCV detector: ``python recipes/detect.py ...`` from a clone.

The recipe lives in the package, as the ``gluonkit-detect`` command and
``python -m gluonkit.recipes.detect``; this file runs the same (see ``--help``).
"""
from gluonkit.recipes.detect import main

if __name__ == "__main__":
    main()
