"""Network building blocks: multi-branch networks safe with deferred initialization, and a
shape cache for hybridized networks fed a few input shapes."""
from .branches import Branches
from .shapecache import ShapeCache

__all__ = ["Branches", "ShapeCache"]
