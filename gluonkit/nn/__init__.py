"""Network building blocks: multi-branch networks safe with deferred initialization, and a
shape cache for hybridized networks fed a few input shapes, frozen BatchNorm."""
from .branches import Branches
from .norm import freeze_batchnorm
from .shapecache import ShapeCache

__all__ = ["Branches", "ShapeCache", "freeze_batchnorm"]
