"""Mixed precision training: ``mxnet.contrib.amp`` with the gluonkit Trainer."""
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib.amp import amp as _amp
from mxnet.contrib.amp import loss_scaler as _loss_scaler

from ..validate import choice

__all__ = ["LossScaler", "ScaledLoss", "check_available", "init", "init_trainer", "scaled_batch_fn"]


def check_available(ctx):
    """Raise unless mixed precision can run on ``ctx``: GPU contexts with a CUDA build of MXNet.

    Raises
    ------
    ValueError
        If a context is not a GPU (AMP's float16 kernels exist on GPUs only).
    RuntimeError
        If this MXNet has no CUDA support or sees fewer GPUs than ``ctx`` names.
    """
    contexts = ctx if isinstance(ctx, (list, tuple)) else [ctx]
    cpus = [c for c in contexts if c.device_type != "gpu"]
    if not contexts or cpus:
        raise ValueError(f"mixed precision (AMP) runs on GPUs only, got contexts {list(contexts)}; "
                         "train on GPUs (e.g. --ctx gpu:0) or without AMP (drop --amp).")
    if not mx.runtime.Features().is_enabled("CUDA"):
        raise RuntimeError("mixed precision (AMP) needs MXNet built with CUDA; this MXNet is a "
                           "CPU-only build. Install a CUDA build (e.g. pip install mxnet-cu112) or "
                           "train without AMP (drop --amp).")
    missing = [c for c in contexts if c.device_id >= mx.context.num_gpus()]
    if missing:
        raise RuntimeError(f"mixed precision (AMP): {missing} not found, this machine has "
                           f"{mx.context.num_gpus()} GPU(s); pass existing GPUs to --ctx.")


def init(ctx, target_dtype="float16"):
    """Check ``ctx`` (``check_available``) and switch MXNet's operators to mixed precision.

    Call it once, before building the network; then ``init_trainer`` on its trainer.
    """
    choice(target_dtype, ("float16", "bfloat16"), "target_dtype")
    check_available(ctx)
    _amp.init(target_dtype)


class LossScaler(_loss_scaler.LossScaler):
    """MXNet's dynamic loss scaler, whose new scale applies from the very next window.

    ``record`` (called by the Trainer once per update window) halves the scale after
    an overflow and doubles it after 2000 clean windows; MXNet's ``loss_scale`` reports the
    change one window late, so the window after an overflow would still use the scale that
    overflowed.
    """

    @property
    def loss_scale(self):
        """float: The scale the losses of the current window are multiplied by."""
        return self._next_loss_scale

    def record(self, overflow):
        """Move the scale on after a window whose gradients did (or did not) overflow.

        The Trainer calls it with what its own pass over the summed gradients found, so an
        overflow on any device counts (``has_overflow`` reads the first device only).
        """
        self._loss_scale = self._next_loss_scale
        if overflow:
            self._next_loss_scale = self._loss_scale / 2.0
            self._unskipped = 0
        else:
            self._unskipped += 1
            if self._unskipped == self._scale_seq_len:
                self._unskipped = 0
                self._next_loss_scale = min(self._max_loss_scale, self._loss_scale * 2.0)
        return overflow


def init_trainer(trainer):
    """Attach a dynamic loss scaler to ``trainer`` (after ``init``): ``trainer.attach_loss_scaler(LossScaler())``.

    Train with ``ScaledLoss`` (or ``scaled_batch_fn``), whose gradients the scaler scales
    and ``trainer`` unscales at the update. The scale stays the same within an accumulation
    window. A window whose gradients overflow (hold NaN or Inf) is dropped: parameters and
    optimizer states are left as they were, the gradients are zeroed and the scale is halved.
    The scaler's state is part of ``trainer.state_dict()`` (and checkpoints): attach it
    before loading one. ``trainer.loss_scaler`` returns it.

    Example::

        gluonkit.trainer.amp.init(ctx)                # before the network is built
        net = build(...)
        trainer = gluonkit.Trainer(net, 'sgd', {'learning_rate': 0.1}, accumulate=2)
        gluonkit.trainer.amp.init_trainer(trainer)
        loss = gluonkit.trainer.amp.ScaledLoss(gluon.loss.SoftmaxCrossEntropyLoss(), trainer)
    """
    if not _amp._amp_initialized:   # MXNet keeps whether amp.init ran only in this module field
        raise RuntimeError("mixed precision is not initialized; call gluonkit.trainer.amp.init(ctx) "
                           "before building the network, then init_trainer(trainer).")
    trainer.attach_loss_scaler(LossScaler())


def _scaled(value, trainer):
    """``value`` as is, whose gradient is multiplied by the loss scale when recording."""
    if not autograd.is_recording():
        return value
    scale = trainer.loss_scaler.loss_scale
    trainer.window_loss_scale = scale   # what the update divides this window's gradients by
    return _ScaleGradient(scale)(value)


def scaled_batch_fn(batch_fn, trainer):
    """A ``gluonkit.fit`` ``batch_fn`` whose losses pass back gradients scaled as ``ScaledLoss``'s."""
    def scaled(net, batch, ctx):
        result = batch_fn(net, batch, ctx)
        losses = [_scaled(value, trainer) for value in result[0]]
        return (losses,) + tuple(result[1:])
    return scaled


class _ScaleGradient(autograd.Function):
    """Identity forward; the backward multiplies the gradient by ``scale``."""

    def __init__(self, scale):
        super().__init__()
        self._scale = scale

    def forward(self, x):
        return x.copy()

    def backward(self, dy):
        return dy * self._scale


class ScaledLoss(gluon.Block):
    """``loss`` whose gradient is scaled by the loss scale of ``trainer`` while recording.

    It scales as ``amp.scale_loss`` does, but its values stay unscaled (for the metrics), so
    ``gluonkit.fit`` trains with it as with any loss. ``trainer`` needs ``init_trainer``.
    """

    def __init__(self, loss, trainer):
        super().__init__()
        self.loss = loss
        self._trainer = trainer

    def forward(self, *args):
        return _scaled(self.loss(*args), self._trainer)
