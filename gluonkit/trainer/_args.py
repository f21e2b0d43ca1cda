"""The Trainer's arguments: each checked before anything changes, with the value and the fix."""
import math
import numbers
import os
import sys
import warnings

import mxnet as mx
import numpy as np
from mxnet import gluon

from ..validate import choice, finite_real, is_int
from ..names import first_names
from .horovod import launched_ranks

__all__ = ["check_clip", "check_clip_setting", "check_horovod", "check_horovod_options", "check_kvstore",
           "check_launched", "check_learning_rate", "check_optimizer", "check_pending", "check_policy",
           "check_update_on_kvstore", "is_distributed", "unique_params", "warn_if_launched"]

_NONFINITE_POLICIES = ("ignore", "skip", "raise")
_KVSTORES = ("local", "device", "nccl", "dist_sync", "dist_device_sync", "dist_async", "dist_device_async",
             "horovod")
_LAUNCHER_ENV = ("DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT")


def check_kvstore(kvstore):
    """Refuse a kvstore name MXNet does not know (it would silently give 'local') or another type."""
    if kvstore is None or isinstance(kvstore, mx.kv.KVStoreBase):
        return
    if not isinstance(kvstore, str):
        raise TypeError(f"kvstore must be a kvstore name, a KVStore or None, got {kvstore!r}; "
                        "e.g. kvstore='device'.")
    known = _KVSTORES + tuple(sorted(mx.kv.KVStoreBase.kv_registry))
    if kvstore.lower() not in known:
        raise ValueError(f"kvstore={kvstore!r} is not a kvstore MXNet knows (it would silently use "
                         f"'local'); use one of {', '.join(map(repr, known))}, a KVStore or None.")


def warn_if_launched(kvstore):
    """Warn a worker of a launched job (``gluonkit-launch``, ``horovodrun`` or ``mpirun``) whose
    Trainer does not reduce across workers."""
    workers, ranks = os.environ.get("DMLC_NUM_WORKER", "1"), launched_ranks()
    if os.environ.get("DMLC_ROLE") == "worker" and workers != "1":
        job, fix = f"a worker of a job of {workers} workers (DMLC_ROLE=worker, set by the launcher)", \
            "Pass kvstore='dist_sync' (or mx.kv.create('dist_sync'))."
    elif ranks is not None and ranks > 1:
        job, fix = f"a rank of a job of {ranks} ranks (started by horovodrun or mpirun)", "Pass kvstore='horovod'."
    else:
        return
    warnings.warn(f"This process is {job} but its Trainer's kvstore is {kvstore!r}: each worker trains a copy "
                  f"of its own. {fix}", stacklevel=3)


def check_launched(kvstore):
    """A distributed kvstore name needs the environment the launcher sets."""
    missing = [name for name in _LAUNCHER_ENV if name not in os.environ]
    if isinstance(kvstore, str) and missing:
        raise RuntimeError(f"kvstore={kvstore!r} needs a distributed job, but this process was not "
                           f"started by a launcher ({', '.join(missing)} not set). Start it with "
                           f"`python -m gluonkit.launch -n 2 -- python {sys.argv[0] or 'train.py'} ...`, "
                           "or use kvstore='device' on one machine.")


def check_horovod(params, compression_params, update_on_kvstore):
    """What Horovod cannot do: update on the kvstore, compress gradients MXNet's way, sparse gradients."""
    if update_on_kvstore:
        raise ValueError("update_on_kvstore=True cannot be used with kvstore='horovod': Horovod runs no "
                         "optimizer, every rank applies the same update. Leave update_on_kvstore unset.")
    if compression_params:
        raise ValueError(f"compression_params={compression_params!r} cannot be used with kvstore='horovod' "
                         "(it sets the 1-bit or 2-bit compression of MXNet's kvstores); for Horovod's float16 "
                         "compression pass kvstore=gluonkit.trainer.Horovod(compression=hvd.Compression.fp16).")
    sparse = [p.name for p in _param_list(params) if p._stype != "default" or p._grad_stype != "default"]
    if sparse:
        raise ValueError(f"kvstore='horovod' sums dense gradients; {', '.join(sparse)} are sparse. Use "
                         "kvstore='dist_sync' for sparse parameters.")


def check_horovod_options(kvstore, options):
    """Horovod's own options (``compression``, ``gradient_predivide_factor``) only for a Horovod
    the Trainer creates from ``kvstore='horovod'``."""
    if not options:
        return
    name = next(iter(options))
    if not (isinstance(kvstore, str) and kvstore.lower() == "horovod"):
        fix = (f"pass it to gluonkit.trainer.Horovod({name}=...)" if isinstance(kvstore, mx.kv.KVStoreBase)
               and getattr(kvstore, "type", None) == "horovod" else "use kvstore='horovod' under horovodrun")
        raise ValueError(f"{name}={options[name]!r} is an option of Horovod's all-reduce, given with "
                         f"kvstore={kvstore!r}; {fix}, or leave {name} unset.")


def check_optimizer(optimizer, optimizer_params):
    """An Optimizer instance alone, or a name MXNet knows with settings; a finite learning rate >= 0."""
    if isinstance(optimizer, str):
        known = sorted(mx.optimizer.Optimizer.opt_registry)
        if optimizer.lower() not in known:
            raise ValueError(f"optimizer={optimizer!r} is not an optimizer MXNet knows; use one of "
                             f"{', '.join(map(repr, known))}, or an mx.optimizer.Optimizer.")
    elif not isinstance(optimizer, mx.optimizer.Optimizer):
        raise TypeError(f"optimizer must be a name such as 'sgd' or an mx.optimizer.Optimizer, got "
                        f"{optimizer!r}.")
    if isinstance(optimizer, mx.optimizer.Optimizer):
        if optimizer_params:
            raise ValueError(f"optimizer_params={optimizer_params!r} was given with an Optimizer "
                             f"instance ({type(optimizer).__name__}); pass the settings to the "
                             "Optimizer's constructor, or give the optimizer by name.")
        check_learning_rate(optimizer.learning_rate)
    elif optimizer_params and "learning_rate" in optimizer_params:
        check_learning_rate(optimizer_params["learning_rate"])


def check_clip(clip):
    """None, or a finite norm > 0 as a float."""
    if clip is None:
        return None
    clip = finite_real(clip, "clip_global_norm", "the largest global gradient norm", minimum=0)
    if clip == 0:
        raise ValueError("clip_global_norm must be > 0 (0 would zero every update), got 0; "
                         "use None for no clipping.")
    return clip


def check_clip_setting(params, kvstore, update_on_kvstore):
    """Clipping needs the summed gradient before any update: refuse settings that never give it."""
    if update_on_kvstore:
        raise ValueError("update_on_kvstore=True cannot be used with clip_global_norm: the kvstore "
                         "would update before the summed gradient could be clipped. Leave "
                         "update_on_kvstore unset.")
    params = _param_list(params)
    sparse = [p.name for p in params if p._stype != "default"]
    if sparse:
        raise ValueError(f"clip_global_norm needs dense weights ({', '.join(sparse)} are sparse: "
                         "they are updated on the kvstore, before any clipping).")
    contexts = params[0].list_ctx() if params else []
    if kvstore is None and len(contexts) > 1:
        raise ValueError(f"clip_global_norm needs the gradients summed over the {len(contexts)} "
                         "contexts, but kvstore=None never sums them; use kvstore='device'.")


def check_update_on_kvstore(params, kvstore, update_on_kvstore):
    """None or a bool; True only where MXNet creates a kvstore to update on.

    MXNet creates none for ``kvstore=None``, nor for a local kvstore name over one context;
    with dense weights and gradients ``gluon.Trainer`` then fails at the first step with an
    ``AttributeError``.
    """
    if update_on_kvstore is None:
        return
    if not isinstance(update_on_kvstore, (bool, np.bool_)):
        raise TypeError(f"update_on_kvstore must be True, False or None, got {update_on_kvstore!r}.")
    params = _param_list(params)
    if not update_on_kvstore or not params:
        return
    contexts = params[0].list_ctx()
    dense = all(p._stype == "default" and p._grad_stype == "default" for p in params)
    local = isinstance(kvstore, str) and "dist" not in kvstore.lower() and len(contexts) == 1
    if dense and (kvstore is None or local):
        plural = "context" if len(contexts) == 1 else "contexts"
        raise ValueError(f"update_on_kvstore=True needs a kvstore, but kvstore={kvstore!r} over "
                         f"{len(contexts)} {plural} creates none (the update runs on the device); "
                         "leave update_on_kvstore unset, or pass a KVStore.")


def _param_list(params):
    """The Parameters among ``params`` (a dict or a list), in order."""
    params = list(params.values()) if isinstance(params, (dict, gluon.ParameterDict)) else params
    return [p for p in params if isinstance(p, gluon.Parameter)]


def unique_params(params):
    """The parameters, each once (a shared one may be collected from several blocks).

    A dict keeps the first key of a parameter it holds twice; a list or tuple becomes a list.
    """
    if isinstance(params, (dict, gluon.ParameterDict)):
        firsts = first_names(params)
        unique = list(firsts.values())
        if len(unique) < len(list(params.keys())):
            params = firsts
    elif isinstance(params, (list, tuple)):
        params = unique = list({id(p): p for p in params}.values())
    else:
        return params   # gluon.Trainer refuses it with its own message
    if not unique:
        raise ValueError("The Trainer got no parameters; pass net.collect_params() of a network "
                         "that has some (check that a regular expression given to "
                         "collect_params matches).")
    contexts = {}
    for param in unique:
        if isinstance(param, gluon.Parameter):
            contexts.setdefault(tuple(param.list_ctx()), param.name)
    if len(contexts) > 1:
        (first, a), (second, b) = list(contexts.items())[:2]
        raise ValueError(f"Parameters are initialized on different contexts: {a} on {list(first)}, "
                         f"{b} on {list(second)}. A Trainer needs every parameter on the same "
                         "contexts: initialize them with the same ctx= or call "
                         "net.reset_ctx(ctx) first.")
    return params


def check_learning_rate(lr):
    """A finite learning rate >= 0 as a float."""
    return finite_real(lr, "learning_rate", minimum=0)


def check_pending(window, accumulate):
    """A pending window ``(steps, count)`` as ``(int, count)``: 0 <= steps < accumulate (any steps
    when ``accumulate`` is None), a finite count >= 0."""
    steps, count = window if isinstance(window, (tuple, list)) and len(window) == 2 else (None, None)
    if not (is_int(steps) and 0 <= steps and (accumulate is None or steps < accumulate)
            and isinstance(count, numbers.Real) and not isinstance(count, bool) and 0 <= count < math.inf):
        bound = "" if accumulate is None else f" < accumulate={accumulate}"
        raise ValueError(f"pending must be (steps, count) with 0 <= steps{bound} and a count >= 0, "
                         f"got {window!r}.")
    return int(steps), count


def check_policy(policy):
    """One of the non-finite policies."""
    return choice(policy, _NONFINITE_POLICIES, "on_nonfinite")


def is_distributed(kvstore):
    """``(distributed, asynchronous)`` for a kvstore name or instance (MXNet ignores the case)."""
    kv_type = str(kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")).lower()
    return "dist" in kv_type or kv_type == "horovod", "async" in kv_type
