"""The serving environment: a virtual environment of its own with onnxruntime, numpy 2,
Pillow and OpenCV (headless), and no mxnet (onnxruntime needs numpy>=1.24, which mxnet 1.9.1 cannot import with),
where ``gluonkit.serve`` runs. Built once and reused, under ``~/.cache/gluonkit`` or
``GLUONKIT_SERVE_ENV``; the serving tests and ``benchmarks.serving`` use it.

    python -m benchmarks.serving_env      # build it (or find it) and print its Python
"""
import fcntl
import hashlib
import os
import subprocess
import sys

__all__ = ["REQUIREMENTS", "folder", "serving_python", "built_python"]

#: What the environment holds: what ``gluonkit[serve]`` needs (OpenCV to decode and resize as
#: gluonkit.predict does), and numpy 2 to prove it.
REQUIREMENTS = ["onnxruntime>=1.16", "numpy>=2", "pillow", "opencv-python-headless"]


def folder():
    """Where the environment is: ``GLUONKIT_SERVE_ENV``, or a folder of the cache named after
    the requirements and this Python."""
    key = hashlib.sha256(" ".join(REQUIREMENTS + [sys.version]).encode()).hexdigest()[:12]
    default = os.path.join(os.path.expanduser("~"), ".cache", "gluonkit", f"serve-env-{key}")
    return os.environ.get("GLUONKIT_SERVE_ENV", default)


def serving_python():
    """The environment's Python, the environment built first if it is not there (once: a lock
    keeps parallel runs apart). Raises ``subprocess.CalledProcessError`` if pip fails."""
    return built_python(folder(), REQUIREMENTS)


def built_python(where, requirements):
    """The Python of the virtual environment ``where`` holding ``requirements``, built first
    if it is not there (once: a lock keeps parallel runs apart)."""
    python, ready = os.path.join(where, "bin", "python"), os.path.join(where, ".ready")
    os.makedirs(os.path.dirname(os.path.abspath(where)), exist_ok=True)
    with open(where + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(ready):
            subprocess.run([sys.executable, "-m", "venv", "--clear", where], check=True,
                           capture_output=True, timeout=300)
            subprocess.run([python, "-m", "pip", "install", "--quiet",
                            "--disable-pip-version-check", *requirements], check=True,
                           capture_output=True, timeout=900)
            open(ready, "w").close()
    return python


if __name__ == "__main__":
    print(serving_python())
