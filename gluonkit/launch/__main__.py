"""``python -m gluonkit.launch``: see :mod:`gluonkit.launch`."""
import sys

from gluonkit.launch import main

if __name__ == "__main__":
    sys.exit(main())
