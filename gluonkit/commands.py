"""Which gluonkit command this process runs, and what a command sets before MXNet loads.

MXNet reads its OpenMP settings once, when its library loads: by default it runs half the
cores, and its spinning threads slowed training 15-35x whenever other processes kept the cores
busy. A gluonkit command (``gluonkit-classify``, ``python -m gluonkit.recipes.classify``, a
clone's ``python recipes/classify.py``) therefore sets ``OMP_NUM_THREADS`` to the CPUs it may
use and ``OMP_WAIT_POLICY`` to ``PASSIVE``, unless the user set them, while
``gluonkit.recipes`` is imported and before it imports MXNet: the command starts once, from any
folder. A program that imports gluonkit keeps its environment as it is.

This module imports no MXNet.
"""
import os
import sys

from gluonkit.validate import process_cpus

__all__ = ["running_command", "usable_cpus", "thread_settings", "prepare_command"]

_CLONE_WRAPPERS = ("classify.py", "multitask.py", "detect.py")


def running_command():
    """The gluonkit command this process runs (``gluonkit-classify``, ``python -m
    gluonkit.recipes.classify``, a clone's ``python recipes/classify.py``), or None when
    gluonkit is imported by another program."""
    argv = list(getattr(sys, "orig_argv", None) or [])   # the interpreter's own argv (3.10+)
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1].startswith("gluonkit."):
        return "python -m " + argv[argv.index("-m") + 1]
    script = sys.argv[0] if sys.argv else ""
    if script == "-m":       # before 3.10: runpy is still importing the package of the -m module
        return "gluonkit"
    name = os.path.basename(script)
    if name.startswith("gluonkit-"):
        return name
    folder = os.path.basename(os.path.dirname(os.path.abspath(script)))
    if name in _CLONE_WRAPPERS and folder == "recipes":    # a clone's recipes/classify.py
        return f"python {os.path.join('recipes', name)}"
    return None


def usable_cpus():
    """The CPUs this process may run on (its affinity where the system reports one), divided
    among the Horovod ranks started on this machine (``HOROVOD_LOCAL_SIZE``); at least 1."""
    local = os.environ.get("HOROVOD_LOCAL_SIZE", "1")
    ranks = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, process_cpus() // ranks)


def thread_settings():
    """The OpenMP settings a command gives MXNet: one thread per usable CPU
    (:func:`usable_cpus`), waiting passively."""
    return {"OMP_NUM_THREADS": str(usable_cpus()), "OMP_WAIT_POLICY": "PASSIVE"}


def prepare_command():
    """In a gluonkit command's process, set the :func:`thread_settings` the user left unset;
    elsewhere change nothing. Returns the settings it set (a dict, empty if none).

    Called by ``gluonkit.recipes`` before it imports MXNet, which reads them as it loads.
    """
    if running_command() is None:
        return {}
    unset = {name: value for name, value in thread_settings().items() if name not in os.environ}
    os.environ.update(unset)
    return unset
