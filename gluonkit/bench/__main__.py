"""``python -m gluonkit.bench``: the gluonkit-bench command."""
from .command import main

main()
