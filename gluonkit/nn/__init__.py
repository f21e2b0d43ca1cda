"""Network building blocks: multi-branch networks that are safe with deferred initialization."""
from .branches import Branches

__all__ = ["Branches"]
