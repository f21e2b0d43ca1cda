"""The recipes as modules, each a console command and ``python -m gluonkit.recipes.<name>``.

``classify`` (``gluonkit-classify``) trains an image classifier, ``multitask``
(``gluonkit-multitask``) a multi-head network, ``detect`` (``gluonkit-detect``) a GluonCV
detector, and ``predict`` (``gluonkit-predict``) runs an exported model on image files.
"""
__all__ = []
