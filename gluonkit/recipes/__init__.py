"""The recipes as modules, each a console command and ``python -m gluonkit.recipes.<name>``."""
