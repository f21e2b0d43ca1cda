"""Train an image classifier: ``python recipes/classify.py ...`` from a clone.

The recipe lives in the package, as the ``gluonkit-classify`` command and
``python -m gluonkit.recipes.classify``; this file runs the same (see ``--help``).
"""
from gluonkit.recipes.classify import main

if __name__ == "__main__":
    main()
