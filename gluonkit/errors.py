"""The error of a data file that cannot be used: damaged, malformed, or holding wrong labels."""

__all__ = ["DataFileError"]


class DataFileError(ValueError):
    """A data file (a VOC annotation, a RecordIO file and its index, an image folder) that
    gluonkit refuses to read; the message is one line that names the file, the record or line
    where known, what is wrong and how to fix it.

    A ``ValueError``, so code that catches bad values keeps working. The commands print it
    without a traceback and exit with status 1.
    """
