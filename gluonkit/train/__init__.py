"""The fit wing: a training run around a Trainer.

Which module holds what:

- ``loop``: ``fit``, and the step contract of ``batch_fn``;
- ``evaluate``: ``evaluate``, and the contract of ``eval_fn``;
- ``batches``: what both do with a batch (check it, split it over the devices, run the
  network and the loss);
- ``state``: the run's working state (private) and ``FitState``, the read-only view that
  callbacks and a ``batch_fn`` see;
- ``tally``: losses and metrics summed on the devices, read at a few points per epoch;
- ``resume``: the one home of generator and sampler state, snapshots, and the batches a
  resume skips;
- ``checkpoint`` (with ``_archive``, the file format): atomic checkpoints that run no code
  when opened;
- ``reshard``: a snapshot on global batches taken by another number of workers;
- ``callbacks`` (public as :mod:`gluonkit.callbacks`) and ``metrics``.

This wing never imports the trainer wing (:mod:`gluonkit.trainer`): it drives any Trainer
through its public methods (``step``, ``flush``, ``state_dict``).
"""
