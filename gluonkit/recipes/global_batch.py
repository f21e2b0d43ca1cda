"""A recipe's ``--batch-size`` as the global batch: the same updates on any number of workers.

``--batch-size B`` is the samples of one update over every worker; ``--micro-batch M`` the
samples each device runs in one forward (a worker with D devices runs D * M per step). One
process accumulates the ``ceil(B / (M * D))`` micro-batches of a global batch; N workers run
them side by side, each its share (:class:`gluonkit.data.GlobalBatchSampler`), with the same
data order and per-sample augmentations. Without ``--micro-batch`` a worker runs its whole
share of a global batch in one step: one process is then as before, and N workers make the
same updates with the same learning rate, but BatchNorm normalizes smaller micro-batches.

``--per-worker-batch`` keeps the earlier meaning for those who scale the learning rate
themselves: ``--batch-size`` per worker and step, ``--accumulate`` steps per update, each
worker on its own shard.
"""
import contextlib
import json
import math
import os

import mxnet as mx

from gluonkit import Checkpoint, CheckpointError
from gluonkit.callbacks import MergeRunningStatistics
from gluonkit.data import GlobalBatchSampler, global_loader
from gluonkit.recipes import common, runs

__all__ = ["add_global_batch_options", "check_global_batch", "keep_earlier_meaning", "trained_per_worker",
           "micro_batches_trained", "workers_of", "global_train_loader", "initialize_without_forward",
           "merge_callbacks", "updates_per_epoch", "describe", "describe_per_worker"]


def add_global_batch_options(group):
    """``--micro-batch`` and ``--per-worker-batch``, added to the argument ``group``."""
    group.add_argument("--micro-batch", type=common.positive_int, metavar="M",
                       help="samples per device in one forward; a global batch is ceil(B / (M x devices)) "
                            "micro-batches, shared by the workers (default: each worker's share of a "
                            "global batch in one step)")
    group.add_argument("--per-worker-batch", action="store_true",
                       help="the earlier meaning: --batch-size per worker and step, --accumulate steps per "
                            "update, each worker on a shard of its own (scale the learning rate yourself)")


def check_global_batch(parser, args):
    """``parser.error`` for options that do not go together: ``--accumulate`` without
    ``--per-worker-batch`` (the global batch sets the accumulation; the message gives the
    options of the same updates on ``args.ctx``), ``--micro-batch`` with it, a micro-batch
    larger than the global batch."""
    if args.per_worker_batch:
        if args.micro_batch is not None:
            parser.error("--micro-batch cuts a global batch; with --per-worker-batch, --batch-size is per worker "
                         "and step and --accumulate steps per update: drop one of them.")
        return
    if args.accumulate != 1:
        devices = len(common.parse_ctx(args.ctx))
        where = "one device" if devices == 1 else f"the {devices} devices of --ctx"
        parser.error(f"--accumulate {args.accumulate}: --batch-size is the samples of an update over every "
                     f"worker, and --micro-batch (per device) sets how it is accumulated; pass --batch-size "
                     f"{args.batch_size * args.accumulate} --micro-batch {math.ceil(args.batch_size / devices)} "
                     f"(the same updates on {where}), or --per-worker-batch for the earlier meaning.")
    if args.micro_batch is not None and args.micro_batch > args.batch_size:
        parser.error(f"--micro-batch {args.micro_batch} is larger than the global --batch-size {args.batch_size}; "
                     "pass a micro-batch of at most the global batch.")


def keep_earlier_meaning(args):
    """Set ``args.per_worker_batch`` when ``args`` resume or export a run that trained on batches
    per worker (:func:`trained_per_worker`): it goes on as it was trained."""
    if (args.resume or getattr(args, "export", False)) and args.out and trained_per_worker(args.out):
        args.per_worker_batch = True


def trained_per_worker(out):
    """Whether the run in ``out`` recorded its options (``args.json``) before ``--batch-size``
    meant the global batch: it trained on batches per worker, and resumes or exports on them."""
    try:
        with open(os.path.join(out, runs.ARGS_FILE), "rb") as f:
            recorded = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and "per_worker_batch" not in recorded


def micro_batches_trained(out):
    """What the run in ``out`` ran without ``--micro-batch``, as its newest checkpoint on
    global batches records it ('in micro-batches of 2 on 2 worker(s)': each worker's share of
    a global batch), or None (no such checkpoint)."""
    latest = Checkpoint(os.path.join(out, "checkpoints")).latest
    try:
        position = (Checkpoint.saved_state(latest).get("fit") or {}).get("global") if latest else None
    except CheckpointError:
        return None
    if not position:
        return None
    return f"in micro-batches of {position['plan']['micro_batch']} on {position['workers']} worker(s)"


def workers_of(kvstore):
    """``(rank, num_workers)`` of a kvstore as ``common.create_kvstore`` gives it (a name: one process)."""
    return (0, 1) if isinstance(kvstore, str) else (kvstore.rank, kvstore.num_workers)


def _step_samples(batch_size, micro_batch, devices, workers):
    """The samples a worker runs in one step."""
    if micro_batch is None:
        return math.ceil(batch_size / workers)
    return min(batch_size, micro_batch * devices)


def _fits(batch_size, micro_batch, devices, workers):
    """Whether a global batch cut as the options say gives every one of ``workers`` workers a
    micro-batch."""
    return math.ceil(batch_size / _step_samples(batch_size, micro_batch, devices, workers)) >= workers


def _fewer_micro_batches_than_workers(batch_size, micro_batch, devices, workers):
    """The refusal of options that cut a global batch into fewer micro-batches than ``workers``
    (a new run: the ``--micro-batch`` or ``--batch-size`` that fits)."""
    step = _step_samples(batch_size, micro_batch, devices, workers)
    made = f"{math.ceil(batch_size / step)} micro-batch(es) per update, fewer than the {workers} workers"
    largest = GlobalBatchSampler.largest_micro_batch(batch_size, workers) // devices
    micro_fix = f"--micro-batch {largest} or less, or " if largest else ""
    if micro_batch is None:
        return (f"--batch-size {batch_size} without --micro-batch runs each worker's share of a global batch "
                f"({step} sample(s)) in one step: {made}; pass {micro_fix}a --batch-size that is a multiple of "
                f"{workers} (e.g. {workers * (batch_size // workers + 1)}).")
    return (f"--batch-size {batch_size} with --micro-batch {micro_batch} on {devices} device(s) per worker makes "
            f"{made}; pass {micro_fix}--batch-size {micro_batch * devices * (workers - 1) + 1} or more.")


def _run_fits_fewer_workers(batch_size, micro_batch, devices, workers):
    """The refusal of a resume on ``workers`` workers, more than the global batches of the run
    (whose ``--batch-size`` and ``--micro-batch`` a resume keeps) fit: the workers they fit."""
    if micro_batch is None:
        fit = [w for w in range(1, batch_size + 1) if _fits(batch_size, None, devices, w)]
        nearest = [max(w for w in fit if w < workers)] + [w for w in fit if w > workers][:1]
        step = _step_samples(batch_size, None, devices, workers)
        return (f"--resume on {workers} workers: this run's global batch of {batch_size}, without --micro-batch, "
                f"is each worker's share in one step, {step} sample(s) on {workers} workers: "
                f"{math.ceil(batch_size / step)} micro-batch(es), fewer than the workers; resume on "
                f"{' or '.join(map(str, nearest))} workers.")
    step = _step_samples(batch_size, micro_batch, devices, workers)
    most = math.ceil(batch_size / step)
    text = (f"--resume on {workers} workers: this run's global batch of {batch_size} in micro-batches of {step}"
            + (f" ({micro_batch} per device on {devices})" if devices > 1 else "")
            + f" fits at most {most} worker(s) (each needs a micro-batch of every update); resume on "
            f"{most} or fewer")
    on_one = math.ceil(batch_size / min(batch_size, micro_batch))
    if devices > 1 and on_one > most:
        text += f", or with fewer devices per worker (--ctx; on one device each it fits {on_one})"
    return text + "."


def global_train_loader(dataset, batch_size, micro_batch, devices, kvstore, seed, num_workers, resume=False,
                        **options):
    """This worker's loader of the global batches of ``dataset`` (every worker reads all of it):
    steps of ``micro_batch`` samples per device on ``devices`` devices; ``options`` go to
    ``global_loader`` (``sizes``, ``interval``, ``batchify_fn``). Fewer micro-batches in a
    global batch than workers is a ``common.OptionError`` (a ``ValueError``) that names the
    options that fit: for a new run, the ``--micro-batch`` or ``--batch-size``; on ``resume``
    (which keeps them), the number of workers."""
    rank, workers = workers_of(kvstore)
    if not _fits(batch_size, micro_batch, devices, workers):
        refusal = _run_fits_fewer_workers if resume else _fewer_micro_batches_than_workers
        raise common.OptionError(refusal(batch_size, micro_batch, devices, workers))
    step = _step_samples(batch_size, micro_batch, devices, workers)
    return global_loader(dataset, batch_size, step, rank, workers, seed=seed, num_workers=num_workers, **options)


def initialize_without_forward(net, input_shapes, ctx, init, train_mode=False):
    """Give ``net``'s deferred parameters (if any) their shapes (``infer_shape`` on one sample
    of each of ``input_shapes`` on ``ctx``: a shape, or a list of them for several inputs) and
    their values from ``init``, running nothing.

    Before a distributed Trainer is created, so that it broadcasts worker 0's values at once
    (not at the first update, which would copy worker 0's BatchNorm statistics over the
    others'). Not by a forward in prediction mode: oneDNN then keeps the convolution
    weights in a layout of its own, which the distributed kvstore cannot send. ``train_mode``
    infers the shapes of the training graph, for a network whose training forward takes
    more inputs and holds more parameters (Faster R-CNN's boxes and labels, its box encoder).
    """
    deferred = []
    for param in net.collect_params().values():
        try:
            param.data(param.list_ctx()[0])
        except mx.gluon.parameter.DeferredInitializationError:
            deferred.append(param)
    if deferred:
        shapes = [input_shapes] if isinstance(input_shapes[0], int) else input_shapes
        with mx.autograd.train_mode() if train_mode else contextlib.nullcontext():
            net.infer_shape(*[mx.nd.zeros((1,) + tuple(shape), ctx=ctx) for shape in shapes])
    for param in deferred:
        param.initialize(default_init=init, ctx=param.list_ctx(), force_reinit=True)


def merge_callbacks(loader):
    """The ``fit`` callbacks that merge BatchNorm's running statistics over the workers (put
    before the checkpoints): nothing on one worker."""
    sampler = loader.batch_sampler.sampler
    return [MergeRunningStatistics(sampler)] if sampler.workers > 1 else []


def updates_per_epoch(trainer, loader, accumulate, per_worker):
    """The updates of an epoch: the global batches of ``loader``, or per worker
    (``common.updates_per_epoch``) those of the worker with the most batches."""
    if per_worker:
        return common.updates_per_epoch(trainer, loader, accumulate)
    return loader.batch_sampler.sampler.updates_per_epoch


def describe_per_worker(batch_size, accumulate, updates):
    """The start-up line of a run on batches per worker (``--per-worker-batch``)."""
    return f"per worker: {batch_size} per step, {accumulate} step(s) per update, {updates} updates per epoch."


def describe(loader, devices):
    """The start-up line of a run on global batches: the global batch, the micro-batch, each
    worker's share and the updates per epoch."""
    sampler = loader.batch_sampler.sampler
    workers = sampler.workers
    per_device = sampler.micro_batch / devices
    shares = [GlobalBatchSampler(sampler.length, sampler.batch_size, sampler.micro_batch, r, workers, seed=0)
              for r in range(workers)]
    share_text = ", ".join(f"{s.accumulate} ({s.share()} samples an epoch)" for s in shares)
    return (f"global batch {sampler.batch_size} (samples per update over {workers} worker(s)), micro-batches of "
            f"{sampler.micro_batch} ({per_device:g} per device on {devices}), "
            f"{sampler.micro_batches_per_batch} per global batch; each worker's share of a global batch, in "
            f"micro-batches: {share_text}; {sampler.updates_per_epoch} updates per epoch.")
