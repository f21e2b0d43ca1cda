"""Loss scaling on the Trainer: the scaler attached through a public method, the window's scale."""

__all__ = ["LossScaling"]


class LossScaling:
    """``attach_loss_scaler``, ``loss_scaler`` and ``window_loss_scale`` of ``gluonkit.Trainer``.

    A mixin of ``gluonkit.Trainer`` (its only user). The fields are the ones
    ``mxnet.contrib.amp`` sets on a ``gluon.Trainer`` (``_amp_loss_scaler``,
    ``_amp_original_scale`` and the ``_scale`` that divides each update), so MXNet's own
    ``amp.init_trainer`` and ``amp.scale_loss`` work on it too.
    """

    @property
    def loss_scaler(self):
        """LossScaler or None: The dynamic loss scaler attached by ``attach_loss_scaler``."""
        return self._amp_loss_scaler

    def attach_loss_scaler(self, scaler):
        """Unscale every update by ``scaler.loss_scale`` and drop windows that overflow.

        The losses' gradients are multiplied by ``scaler.loss_scale`` (``gluonkit.trainer.amp``'s
        ``ScaledLoss`` does it); each update divides them by the scale the window was scaled
        by, and a window whose gradients hold NaN or Inf is dropped: parameters, optimizer
        states and running statistics are left as they were. A scaler with ``record(overflow)``
        (``gluonkit.trainer.amp.LossScaler``) is told once per window whether it overflowed;
        MXNet's ``LossScaler`` checks with ``has_overflow``. Its state is part of
        ``state_dict``: attach it before loading one. Usually called through
        ``gluonkit.trainer.amp.init_trainer``.

        Parameters
        ----------
        scaler : LossScaler
            Has a ``loss_scale`` and ``record(overflow)`` or ``has_overflow(params)``.
        """
        if not hasattr(scaler, "loss_scale") or not (hasattr(scaler, "record") or hasattr(scaler, "has_overflow")):
            raise TypeError(f"scaler must be a loss scaler (with loss_scale and record or has_overflow), got "
                            f"{scaler!r}; use gluonkit.trainer.amp.LossScaler().")
        self._amp_loss_scaler = scaler
        self.snapshot_statistics()

    @property
    def window_loss_scale(self):
        """float: The loss scale the gradients of the pending window were multiplied by (1.0
        without a loss scaler). ``ScaledLoss`` sets it when it scales a gradient; each update
        divides the window's gradients by it."""
        return self._amp_original_scale / self._scale

    @window_loss_scale.setter
    def window_loss_scale(self, scale):
        self._scale = self._amp_original_scale / scale   # what mxnet.contrib.amp.scale_loss sets
