"""The running statistics ``MergeRunningStatistics`` merges over the workers: those of every
BatchNorm layer that updates them in training, Gluon's layers and the BatchNorm operators in a
SymbolBlock's graph alike, each once, with its own momentum. (The merge itself runs on workers:
tests/distributed/test_global_batches_on_workers.py and test_global_batch_recipes.py.)"""
import mxnet as mx
import pytest
from mxnet import gluon

from gluonkit.train.worker_statistics import _running_statistics


def _found(net):
    return sorted((param.name, momentum) for param, momentum in _running_statistics(net))


def _layers():
    """A HybridBlock with a BatchNorm of momentum 0.7 and a frozen one (use_global_stats)."""
    layers = gluon.nn.HybridSequential(prefix="layers_")
    with layers.name_scope():
        layers.add(gluon.nn.Conv2D(4, 3, in_channels=3), gluon.nn.BatchNorm(momentum=0.7, in_channels=4),
                   gluon.nn.BatchNorm(use_global_stats=True, in_channels=4))
    return layers


def test_batchnorm_of_gluon_layers_and_of_a_symbol_graph_found_once_each_with_its_momentum():
    layers, data = _layers(), mx.sym.var("data", dtype="float32")
    features = layers(data)
    extra = mx.sym.BatchNorm(features, name="extra_bn")   # the operator's defaults, as GluonCV's SSD layers
    frozen = mx.sym.BatchNorm(extra, momentum=0.5, use_global_stats=1, name="frozen_bn")
    graph = gluon.SymbolBlock([features, frozen], data, params=layers.collect_params())
    net = gluon.nn.HybridSequential(prefix="")
    # the SymbolBlock holds the graph of `layers`, which is in the network too
    net.add(layers, graph, gluon.nn.BatchNorm(momentum=0.8, in_channels=4, prefix="beside_"))

    assert _found(net) == [("beside_running_mean", 0.8), ("beside_running_var", 0.8),
                           ("extra_bn_moving_mean", 0.9), ("extra_bn_moving_var", 0.9),
                           ("layers_batchnorm0_running_mean", 0.7), ("layers_batchnorm0_running_var", 0.7)]
    assert _found(graph) == _found(net)[2:]   # the SymbolBlock alone: what its graph holds


def test_a_symbol_block_of_two_inputs_and_the_other_batchnorm_layers_are_read():
    left, right = mx.sym.var("left", dtype="float32"), mx.sym.var("right", dtype="float32")
    graph = gluon.SymbolBlock(mx.sym.BatchNorm(left + right, momentum=0.6, name="sum_bn"), [left, right])
    assert _found(graph) == [("sum_bn_moving_mean", 0.6), ("sum_bn_moving_var", 0.6)]

    relu = gluon.nn.BatchNormReLU(momentum=0.3, in_channels=2, prefix="relu_")
    assert _found(relu) == [("relu_running_mean", 0.3), ("relu_running_var", 0.3)]
    sync = gluon.contrib.nn.SyncBatchNorm(momentum=0.4, in_channels=2, num_devices=1, prefix="sync_")
    assert _found(sync) == [("sync_running_mean", 0.4), ("sync_running_var", 0.4)]


def test_networks_without_batchnorm_that_updates_statistics_give_none():
    plain = gluon.nn.HybridSequential()
    plain.add(gluon.nn.Dense(3, in_units=2), gluon.nn.Activation("relu"))
    data = mx.sym.var("data", dtype="float32")
    frozen = gluon.SymbolBlock(mx.sym.BatchNorm(data, use_global_stats=True), data)
    assert _found(plain) == [] and _found(frozen) == [] and _found(gluon.nn.Dense(2)) == []


def test_a_symbol_block_whose_inputs_cannot_be_given_is_refused_by_name():
    inputs = [mx.sym.var(f"x{i}", dtype="float32") for i in range(65)]
    graph = gluon.SymbolBlock(mx.sym.BatchNorm(mx.sym.add_n(*inputs), name="bn"), inputs)
    with pytest.raises(ValueError, match="the SymbolBlock '.*': it takes none of 1 to 64 Symbols as inputs"):
        _running_statistics(graph)
