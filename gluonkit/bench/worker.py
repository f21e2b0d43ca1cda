"""One contestant's process (``python -m gluonkit.bench.worker --worker``): builds the
contestant its parent names and answers the harness's 'setup', 'run' and 'stop'."""
import sys

from .harness import WORKER_FLAG, serve

__all__ = ["build_named"]


def build_named(name, options):
    """The contestant ``name`` of ``options['configs']``."""
    from .contestants import build

    return build(options["configs"][name])


if __name__ == "__main__":
    if sys.argv[1:] != [WORKER_FLAG]:
        sys.exit(f"usage: python -m gluonkit.bench.worker {WORKER_FLAG} (started by gluonkit-bench)")
    serve(build_named)
