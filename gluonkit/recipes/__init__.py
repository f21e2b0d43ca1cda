"""The recipes as modules, each a console command and ``python -m gluonkit.recipes.<name>``.

``classify`` (``gluonkit-classify``) trains an image classifier, ``multitask``
(``gluonkit-multitask``) a multi-head network, ``detect`` (``gluonkit-detect``) a GluonCV
detector, and ``predict`` (``gluonkit-predict``) runs an exported model on image files.
"""
from gluonkit.versions import check_at_import

__all__ = []

check_at_import()    # a command's user gets the fix for a wrong mxnet or numpy as one line
