"""Networks a user hands gluonkit-bench as ``module:callable`` (this folder on PYTHONPATH)."""
from mxnet.gluon import nn

__all__ = ["TwoBranchCNN", "two_branch_cnn", "fixed_ten"]


class TwoBranchCNN(nn.HybridBlock):
    """Two images of different sizes, a small convolution stack each, one dense head."""

    def __init__(self, classes, **kwargs):
        super().__init__(**kwargs)
        self.large = nn.HybridSequential()
        self.large.add(nn.Conv2D(4, 3, padding=1, activation="relu"), nn.GlobalAvgPool2D())
        self.small = nn.HybridSequential()
        self.small.add(nn.Conv2D(4, 3, padding=1, activation="relu"), nn.GlobalAvgPool2D())
        self.head = nn.Dense(classes)

    def hybrid_forward(self, F, large, small):
        return self.head(F.concat(F.flatten(self.large(large)), F.flatten(self.small(small)), dim=1))


def two_branch_cnn(classes=10):
    """A :class:`TwoBranchCNN` (gluonkit-bench passes ``--classes``)."""
    return TwoBranchCNN(classes)


def fixed_ten():
    """A one-input network of 10 outputs whatever --classes says."""
    net = nn.HybridSequential()
    net.add(nn.Dense(10))
    return net
