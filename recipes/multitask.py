"""Train the multi-task digits network: ``python recipes/multitask.py ...`` from a clone.

The recipe lives in the package, as the ``gluonkit-multitask`` command and
``python -m gluonkit.recipes.multitask``; this file runs the same (see ``--help``).
"""
from gluonkit.recipes.multitask import main

if __name__ == "__main__":
    main()
