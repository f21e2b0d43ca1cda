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


def _module_run(argv):
    """The module that ``python [options] -m MODULE ...`` runs, from the interpreter's own
    ``argv`` (``sys.orig_argv``); None for a script, ``-c`` or standard input."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--check-hash-based-pycs":  # the one long option that takes a value
            next(args, None)
            continue
        if arg.startswith("--"):
            continue
        if not arg.startswith("-") or arg == "-":
            return None                       # the script (or standard input): no -m
        for i, flag in enumerate(arg[1:], 1):
            if flag == "m":
                return arg[i + 1:] or next(args, None)
            if flag == "c":
                return None
            if flag in "WX":                  # an option whose value follows
                if i == len(arg) - 1:
                    next(args, None)
                break
    return None


def _console_scripts():
    """The names of gluonkit's console commands, as installed (``gluonkit-classify``, ...)."""
    from importlib.metadata import entry_points

    return {point.name for point in entry_points(group="console_scripts")
            if point.value.startswith("gluonkit.")}


def running_command():
    """The gluonkit command this process runs (``gluonkit-classify``, ``python -m
    gluonkit.recipes.classify``, a clone's ``python recipes/classify.py``), or None when
    gluonkit is imported by another program."""
    module = _module_run(list(getattr(sys, "orig_argv", None) or []))   # Python 3.10+
    if module is not None:
        return f"python -m {module}" if module.startswith("gluonkit.") else None
    script = sys.argv[0] if sys.argv else ""
    if script == "-m":       # before 3.10: runpy is still importing the package of the -m module
        return "gluonkit"
    name = os.path.basename(script)
    if name.startswith("gluonkit-") and name in _console_scripts():
        return name
    clone = os.path.dirname(os.path.dirname(os.path.abspath(script)))
    if name in _CLONE_WRAPPERS and os.path.isfile(os.path.join(clone, "gluonkit", "recipes", name)):
        return f"python {os.path.join('recipes', name)}"       # a clone's recipes/classify.py
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
