"""The recipes as modules, each a console command and ``python -m gluonkit.recipes.<name>``.

``classify`` (``gluonkit-classify``) trains an image classifier, ``multitask``
(``gluonkit-multitask``) a multi-head network, ``detect`` (``gluonkit-detect``) a GluonCV
detector, and ``predict`` (``gluonkit-predict``) runs an exported model on image files.
"""
from gluonkit.commands import prepare_command
from gluonkit.versions import check_at_import

__all__ = []

prepare_command()    # a command's thread settings, before MXNet loads (none for a program)
check_at_import()    # a command's user gets the fix for a wrong mxnet or numpy as one line
