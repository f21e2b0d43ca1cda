"""A triplet network of several inputs and trunk outputs: a head that reads all three, one
that reads only the anchor (the Branches and export tests share it)."""
from mxnet.gluon import nn

from gluonkit.nn import Branches


class TripletTrunk(nn.HybridBlock):
    """One embedding applied to the anchor, the positive and the negative."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = nn.Dense(8, activation="tanh")

    def hybrid_forward(self, F, anchor, positive, negative):
        return self.embed(anchor), self.embed(positive), self.embed(negative)


class Distance(nn.HybridBlock):
    """Reads all three trunk outputs: the triplet margin of projected embeddings."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.proj = nn.Dense(4)

    def hybrid_forward(self, F, anchor, positive, negative):
        a, p, n = self.proj(anchor), self.proj(positive), self.proj(negative)
        return F.sum(F.square(a - p), axis=1) - F.sum(F.square(a - n), axis=1)


class Embedding(nn.HybridBlock):
    """Reads the anchor only."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.out = nn.Dense(3)

    def hybrid_forward(self, F, anchor, positive, negative):
        return self.out(anchor)


class Triplet(Branches):
    """The triplet trunk, then the heads ``distance`` (reads all three outputs) and
    ``embedding`` (reads the anchor only)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.trunk = TripletTrunk()
            self.add("distance", Distance())
            self.add("embedding", Embedding())
