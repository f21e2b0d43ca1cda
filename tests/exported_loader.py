"""Load an exported model in a process that never imports gluonkit, by both MXNet routes.

    python exported_loader.py PREFIX INPUT.npy

prints one JSON line: the outputs of ``gluon.SymbolBlock.imports`` ('block') and of
``mx.mod.Module`` ('module') on the array in INPUT.npy, and whether gluonkit was imported.
"""
import json
import sys
import warnings

import mxnet as mx
import numpy as np
from mxnet import gluon


def main(prefix, data_file):
    x = mx.nd.array(np.load(data_file))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        block = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    out = block(x)
    outs = [o.asnumpy().tolist() for o in (out if isinstance(out, (list, tuple)) else [out])]
    symbol, args, auxs = mx.model.load_checkpoint(prefix, 0)
    module = mx.mod.Module(symbol, data_names=["data"], label_names=None)
    module.bind(data_shapes=[("data", x.shape)], for_training=False)
    module.set_params(args, auxs)
    module.forward(mx.io.DataBatch([x]), is_train=False)
    print(json.dumps({"block": outs, "module": [o.asnumpy().tolist() for o in module.get_outputs()],
                      "gluonkit": "gluonkit" in sys.modules}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
