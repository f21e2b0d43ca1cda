"""ShapeCache: one compiled graph per input shape, all sharing one network's parameters."""
from mxnet.gluon import HybridBlock
from mxnet.ndarray import NDArray

from ..validate import positive_int
from .views import Views, flatten

__all__ = ["ShapeCache"]


class _View(HybridBlock):
    """The wrapped network under a cached graph of its own; its parameters are the network's."""

    def __init__(self, net):
        super().__init__(prefix="", params=None)
        self.net = net

    def hybrid_forward(self, F, *args):
        return self.net(*args)

    def release(self):
        """Free the compiled graph (and the memory it holds) now, not at the next garbage
        collection."""
        self._clear_cached_op()


class ShapeCache(HybridBlock):
    """A hybridized network that keeps one compiled graph for each input shape it meets.

    A hybridized Gluon block keeps a single graph: when the input shape changes, MXNet infers
    shapes and plans memory anew (with ``static_alloc``, it also rebuilds its executors), and
    again when an earlier shape comes back. ``ShapeCache`` keeps one hybridized view of ``net``
    per input signature (the shapes and dtypes of the inputs), all sharing ``net``'s
    parameters, so a batch of a shape seen before runs on a graph that is ready. Use it with
    inputs from a few shapes (buckets, multi-scale sizes). Views beyond ``max_shapes`` are
    dropped, least recently used first, and their graphs freed at once, so memory stays
    within what ``max_shapes`` graphs hold. Not hybridized, it simply runs ``net``.

    The saving is a fixed cost per change of shape (about a millisecond on a 2-core CPU for a
    ResNet-20): it matters when steps are short, and each view with ``static_alloc`` holds its
    own memory (see benchmarks/README.md).

    Its parameters are ``net``'s, under the same structural names: ``save_parameters``,
    ``load_parameters`` and ``collect_params`` behave as on ``net``.

    Parameters
    ----------
    net : HybridBlock
        The network; it may be uninitialized or deferred.
    max_shapes : int, default 16
        The most graphs kept. Count every batch shape: a bucket's last, smaller batch and the
        slices of an uneven split over devices are shapes too.

    Example::

        net = ShapeCache(gluoncv.model_zoo.get_model('cifar_resnet20_v1', classes=10))
        net.initialize(ctx=ctx)
        net.hybridize(static_alloc=True, static_shape=True)
        for x, y in bucket_loader(dataset, batch_size=32, buckets=4, mode='resize'):
            xs, ys = gluonkit.split_and_load(x, ctx), gluonkit.split_and_load(y, ctx)
            with autograd.record():
                losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
            autograd.backward(losses)
            trainer.step(x.shape[0])
    """

    def __init__(self, net, max_shapes=16):
        if not isinstance(net, HybridBlock):
            raise TypeError(f"net must be a gluon HybridBlock, got {type(net).__name__}; only "
                            "hybridizable networks have a cached graph to keep per shape.")
        max_shapes = positive_int(max_shapes, "max_shapes", "the most graphs kept")
        super().__init__(prefix="", params=None)
        self.net = net
        self._max_shapes = max_shapes
        self._views = Views(limit=max_shapes, on_drop=_View.release)
        self._hybridized = False
        self._view_flags = {}

    @property
    def max_shapes(self):
        """int: The most graphs kept."""
        return self._max_shapes

    @property
    def shapes(self):
        """list: The input signatures that have a graph, least recently used first; each is a
        tuple of ``(shape, dtype)`` per input array."""
        return self._views.keys()

    def _collect_params_with_prefix(self, prefix=""):
        # save_parameters and load_parameters name parameters through this private method:
        # overriding it is the only way to save net's parameters under net's own names.
        return self.net._collect_params_with_prefix(prefix)

    def hybridize(self, active=True, **kwargs):
        """Turn graph caching on or off; ``kwargs`` (e.g. ``static_alloc=True,
        static_shape=True``) apply to every graph. Drops the graphs kept so far."""
        super().hybridize(active, **kwargs)
        self._hybridized = active
        self._view_flags = kwargs
        self._views.clear()

    def _clear_cached_op(self):
        # Gluon drops a block's graph through this private method (hybridize, cast, a child
        # replaced, freeze_batchnorm): the graphs kept per shape hold the same layers
        super()._clear_cached_op()
        if hasattr(self, "_views"):
            self._views.clear()

    def forward(self, x, *args):
        arrays = [a for a in flatten((x,) + args) if a is not None]
        if not self._hybridized or not all(isinstance(a, NDArray) for a in arrays):
            return self.net(x, *args)
        key = tuple((a.shape, a.dtype) for a in arrays)
        view = self._views.get(key)
        if view is None:
            view = _View(self.net)
            view.hybridize(True, **self._view_flags)
            self._views.put(key, view)
        complete = getattr(self.net, "_complete_deferred_init", None)  # a Branches route
        if complete is not None:   # before the view traces the route, which needs them ready
            complete((x,) + args)
        return view(x, *args)

    def hybrid_forward(self, F, x, *args):
        return self.net(x, *args)

    def export(self, path, epoch=0, remove_amp_cast=True):
        """Export the network's graph and parameters (as ``HybridBlock.export``) from the graph
        of the last shape used; call it after a forward in hybridized mode."""
        view = self._views.last()
        if view is None:
            raise RuntimeError("ShapeCache.export needs a compiled graph: call hybridize() and "
                               "run one forward before exporting.")
        return view.export(path, epoch, remove_amp_cast)
