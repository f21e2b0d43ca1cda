"""The trainer wing: :class:`Trainer`, one exact update from the gradients of a window.

Which module holds what:

- ``trainer``: the update path (``step``, ``flush``, the normalizer, clipping, the non-finite
  check) and the Trainer's public properties;
- ``_heads``: counts by head (``begin_window``, ``weigh_losses``, ``step({head: count})``);
- ``self_check``: ``check_accumulation``, an accumulated update against the large batch's;
- ``_window``: the accumulation window (micro-batches, their counts, the running statistics a
  dropped window returns to);
- ``_state``: ``state_dict`` / ``load_state_dict`` and structural parameter names;
- ``_args``: the constructor's argument checks;
- ``_workers``: what the workers of a distributed job agree on at every update (count,
  parameters, data left, stop requests), and their sums;
- ``_gradients``: passes over gradient arrays (zeroing, the sum of squares, clipping);
- ``_loss_scaling`` and ``amp``: mixed precision, attached with ``Trainer.attach_loss_scaler``;
- ``horovod``: the Horovod engine, Horovod's all-reduce behind the kvstore interface
  (``kvstore='horovod'``), beside MXNet's own kvstores.

This wing never imports the fit wing (:mod:`gluonkit.train`): the loop drives a Trainer only
through its public methods, and works with ``gluon.Trainer`` too.
"""
from .horovod import Horovod
from .trainer import Trainer

__all__ = ["Horovod", "Trainer"]
