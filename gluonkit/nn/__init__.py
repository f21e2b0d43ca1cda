"""Network building blocks: multi-branch networks safe with deferred initialization, and a
shape cache for hybridized networks fed a few input shapes, frozen BatchNorm, Gluon's initializers for
normalization layers built as symbols, and a check that SyncBatchNorm layers can train on the devices given."""
from .branches import Branches
from .norm import check_sync_batchnorm, declare_norm_init, freeze_batchnorm
from .shapecache import ShapeCache

__all__ = ["Branches", "ShapeCache", "check_sync_batchnorm", "declare_norm_init",
           "freeze_batchnorm"]
