"""The command-line parser of gluonkit's commands: errors on one line, misspelled options named.

This module imports no MXNet (``gluonkit-serve`` runs without it).
"""
import argparse
import difflib

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage block), naming the options
    closest to one it does not know.

    Example::

        >>> parser = OneLineParser(prog="tool", allow_abbrev=False)
        >>> _ = parser.add_argument("--epochs", type=int)
        >>> parser.parse_args(["--epcohs", "2"])
        Traceback (most recent call last):
        SystemExit: 2
    """

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            hints = []
            for token in extras:
                option = token.split("=", 1)[0]
                if option.startswith("-"):
                    known = sorted(self._option_string_actions)
                    close = ([name for name in known if name.startswith(option)]   # abbreviated
                             or difflib.get_close_matches(option, known, n=1))     # misspelled
                    if close:
                        hints.append(f"did you mean {' or '.join(close)}?")
            self.error(f"unrecognized arguments: {' '.join(extras)}"
                       + (f" ({'; '.join(hints)})" if hints else f" ({self.prog} --help lists the options)"))
        return namespace

    def error(self, message):
        """Exit with status 2 and ``prog: error: message`` on one line of stderr."""
        self.exit(2, f"{self.prog}: error: {message}\n")
