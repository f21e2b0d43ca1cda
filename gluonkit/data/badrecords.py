"""Imperfect records of annotation files: refused by default, or left out and counted.

An export of thousands of images often holds a few records no training can use: a box of
zero width, a box past the image's border, an annotation of an image that is not listed.
By default the first one refuses the whole file (:class:`BadRecord`, a ``DataFileError``
naming the file and the record). With ``skip`` (``--skip-bad-annotations``) each is left out
and counted by kind, and :meth:`BadRecords.summary` says how many of which kind, the first
few named.
"""
from .errors import DataFileError

__all__ = ["BadRecord", "BadRecords", "LeftOutWarning", "summary"]

#: Records named per kind in a summary.
SHOWN = 3


class BadRecord(DataFileError):
    """A record that cannot be used, of a ``kind`` ('empty box', ...) that
    :class:`BadRecords` counts when told to skip such records."""

    def __init__(self, message, kind="malformed record"):
        super().__init__(message)
        self.kind = kind


class LeftOutWarning(UserWarning):
    """The warning of the records a loader left out (:meth:`BadRecords.summary`): a recipe
    that reports them at its end tells it from the loaders' other warnings."""


class BadRecords:
    """The bad records of the annotation files read: raised (``skip`` False) or counted.

    Parameters
    ----------
    skip : bool
        Leave bad records out and count them, instead of raising the first.

    Attributes
    ----------
    left_out : dict
        ``{kind: [where, ...]}`` of the records left out, in the order met; ``where`` names the
        file, the image and the annotation.
    """

    def __init__(self, skip=False):
        self.skip = bool(skip)
        self.left_out = {}

    def refuse(self, error, where):
        """Raise ``error`` (a :class:`BadRecord`, or any ``DataFileError``), or with ``skip``
        count the record ``where`` under its kind."""
        if not self.skip:
            raise error
        self.left_out.setdefault(getattr(error, "kind", "malformed record"), []).append(where)

    def count(self):
        """How many records were left out."""
        return sum(len(places) for places in self.left_out.values())

    def refuse_if_empty(self, objects, where, of="", noun="record"):
        """Raise a ``DataFileError`` naming ``where`` (a file) when records were left out and
        no object (``objects`` 0) is left: the :meth:`summary`, ``of`` saying of how many."""
        if self.left_out and not objects:
            raise DataFileError(f"{where}: no image is left with an object: "
                                f"{self.summary(noun, of).rstrip('.')}; fix those records (or "
                                "export the file again) rather than leave them all out.")

    def summary(self, noun="record", of=""):
        """:func:`summary` of :attr:`left_out`."""
        return summary(self.left_out, noun, of)


def summary(left_out, noun="record", of=""):
    """One line: how many ``noun`` s (``of`` what) ``left_out`` (``{kind: [where, ...]}``)
    holds, by kind, the first :data:`SHOWN` of each named; '' when none.

    Example::

        >>> summary({"empty box": ["a.json: image 1, annotation 2"]}, of=" of a.json")
        '--skip-bad-annotations left out 1 record of a.json: empty box (1: a.json: image 1, annotation 2).'
    """
    count = sum(len(places) for places in left_out.values())
    if not count:
        return ""
    kinds = []
    for kind, places in left_out.items():
        more = f"; {len(places) - SHOWN} more" if len(places) > SHOWN else ""
        kinds.append(f"{kind} ({len(places)}: {'; '.join(places[:SHOWN])}{more})")
    return (f"--skip-bad-annotations left out {count} {noun}{'' if count == 1 else 's'}{of}: "
            + ", ".join(kinds) + ".")
