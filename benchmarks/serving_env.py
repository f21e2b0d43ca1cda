"""The serving environment: a virtual environment of its own with onnxruntime, numpy 2,
Pillow and OpenCV (headless), and no mxnet (onnxruntime needs numpy>=1.24, which mxnet 1.9.1 cannot import with),
where ``gluonkit.serve`` runs. Built once and reused, under ``~/.cache/gluonkit`` or
``GLUONKIT_SERVE_ENV``; the serving tests and ``benchmarks.serving`` use it.

    python -m benchmarks.serving_env      # build it (or find it) and print its Python
    python -m benchmarks.serving_env --node    # the same for onnxruntime-node (npm)

Beside it, :func:`node_modules` installs onnxruntime-node (npm, its CPU binaries: no install
script) for the Node.js example of docs/export.md, under ``~/.cache/gluonkit`` too.
"""
import fcntl
import hashlib
import os
import subprocess
import sys

__all__ = ["REQUIREMENTS", "NODE_PACKAGE", "folder", "serving_python", "built_python", "node_modules"]

#: What the environment holds: what ``gluonkit[serve]`` needs (OpenCV to decode and resize as
#: gluonkit.predict does), and numpy 2 to prove it.
REQUIREMENTS = ["onnxruntime>=1.16", "numpy>=2", "pillow", "opencv-python-headless"]


#: The npm package of the Node.js example (its install script, which fetches GPU binaries, is
#: skipped: the CPU binaries come in the package).
NODE_PACKAGE = "onnxruntime-node@1.30.0"


def node_modules():
    """The ``node_modules`` folder that holds :data:`NODE_PACKAGE`, installed first if it is
    not there (once, under a lock). Raises ``FileNotFoundError`` without node or npm and
    ``subprocess.CalledProcessError`` if npm fails."""
    where = os.path.join(os.path.expanduser("~"), ".cache", "gluonkit",
                         "node-env-" + NODE_PACKAGE.replace("@", "-"))
    ready = os.path.join(where, ".ready")
    os.makedirs(where, exist_ok=True)
    with open(where + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(ready):
            subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts",
                            "--prefix", where, NODE_PACKAGE], check=True, capture_output=True,
                           timeout=900)
            subprocess.run(["node", "-e", "require('onnxruntime-node')"], check=True,
                           capture_output=True, timeout=120,
                           env=dict(os.environ, NODE_PATH=os.path.join(where, "node_modules")))
            open(ready, "w").close()
    return os.path.join(where, "node_modules")


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
    print(node_modules() if sys.argv[1:] == ["--node"] else serving_python())
