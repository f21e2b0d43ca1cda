"""MXNet's ``box_nms`` in ONNX, as MXNet computes it.

GluonCV's detectors (YOLOv3, SSD, Faster R-CNN) end in ``F.contrib.box_nms``. MXNet 1.9.1's
ONNX converter translates it without the per-class exemption (boxes of different classes
suppress each other), applies ``topk`` after the suppression instead of before it, and pads
differently, so its detectors answer differently in onnxruntime. :func:`box_nms_translation`
puts in its place, while a graph is converted, this translation of what MXNet does:

1. a box is a candidate if its score is above ``valid_thresh`` and (with ``id_index``) its
   class is not ``background_id``;
2. the ``topk`` candidates of highest score are kept (all with ``topk=-1``);
3. ONNX ``NonMaxSuppression`` over per-class scores (a box scores only in its own class,
   whatever its id, -1 included where ``background_id`` is another; one class with
   ``force_suppress`` or without ``id_index``) suppresses boxes whose IoU with a better one
   of its class is above ``overlap_thresh``;
4. the boxes kept come first, by score, then rows of -1 up to the input's number of boxes.
"""
import contextlib

import numpy as np

__all__ = ["box_nms_translation"]

_OP = "_contrib_box_nms"
_LOWEST = np.float32(-np.inf)


class _Graph:
    """Nodes and constants of one translation, named after the MXNet node ``name``."""

    def __init__(self, name, initializer):
        from onnx import helper, numpy_helper

        self.name, self.initializer, self.nodes = name, initializer, []
        self._helper, self._numpy_helper, self._count = helper, numpy_helper, 0

    def const(self, value, dtype):
        self._count += 1
        tensor = self._numpy_helper.from_array(np.asarray(value, dtype=dtype),
                                               f"{self.name}_c{self._count}")
        self.initializer.append(tensor)
        return tensor.name

    def op(self, kind, *inputs, outputs=1, name=None, **attrs):
        self._count += 1
        names = [name] if name else [f"{self.name}_t{self._count}_{i}" for i in range(outputs)]
        self.nodes.append(self._helper.make_node(kind, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def along(self, data, index, axis):
        """``data`` indexed by the scalar ``index`` on ``axis`` (the axis dropped)."""
        return self.op("Gather", data, self.const(index, np.int64), axis=axis)

    def rows(self, data, order):
        """The rows ``order`` (B, K) of ``data`` (B, N, W) along axis 1."""
        width = self.op("Shape", data)
        shape = self.op("Concat", self.op("Shape", order),
                        self.op("Slice", width, self.const([2], np.int64),
                                self.const([3], np.int64)), axis=0)
        index = self.op("Expand", self.op("Unsqueeze", order, self.const([2], np.int64)), shape)
        return self.op("GatherElements", data, index, axis=1)


def _translate(node, **kwargs):
    """The ONNX nodes of one ``box_nms`` node (see the module's description)."""
    attrs = node.get("attrs", {})
    lookup = kwargs["outputs_lookup"]
    data = lookup[node["inputs"][0][0]][node["inputs"][0][1]].name
    if attrs.get("in_format", "corner") != "corner" or attrs.get("out_format", "corner") != "corner":
        raise NotImplementedError("box_nms with center-format boxes")
    overlap = float(attrs.get("overlap_thresh", 0.5))
    valid_thresh = float(attrs.get("valid_thresh", 0))
    topk = int(attrs.get("topk", -1))
    start = int(attrs.get("coord_start", 2))
    score_index, id_index = int(attrs.get("score_index", 1)), int(attrs.get("id_index", -1))
    background = float(attrs.get("background_id", -1))
    per_class = id_index >= 0 and attrs.get("force_suppress", "False") in ("False", "0")

    g = _Graph(node["name"], kwargs["initializer"])
    lowest, minus_one = g.const(_LOWEST, np.float32), g.const(-1.0, np.float32)
    axis1 = g.const([1], np.int64)
    scores = g.along(data, score_index, axis=2)                          # (B, N)
    valid = g.op("Greater", scores, g.const(valid_thresh, np.float32))
    if id_index >= 0:
        ids = g.along(data, id_index, axis=2)
        valid = g.op("And", valid, g.op("Not", g.op("Equal", ids, g.const(background, np.float32))))
    count = g.op("Slice", g.op("Shape", data), axis1, g.const([2], np.int64))     # [N]
    k = count if topk < 0 else g.op("Min", count, g.const([topk], np.int64))
    _, order = g.op("TopK", g.op("Where", valid, scores, lowest), k, axis=1, outputs=2)
    candidates = g.rows(data, order)                                     # (B, K, W), by score
    cand_scores = g.op("Where", g.op("GatherElements", valid, order, axis=1),
                       g.along(candidates, score_index, axis=2), lowest)
    boxes = g.op("Slice", candidates, g.const([start], np.int64), g.const([start + 4], np.int64),
                 g.const([2], np.int64))
    if per_class:                                                        # (B, C, K)
        cand_ids = g.along(candidates, id_index, axis=2)
        low = g.op("Cast", g.op("ReduceMin", cand_ids, keepdims=0), to=7)     # int64
        high = g.op("Add", g.op("Cast", g.op("ReduceMax", cand_ids, keepdims=0), to=7),
                    g.const(1, np.int64))
        classes = g.op("Cast", g.op("Range", low, high, g.const(1, np.int64)), to=1)
        same = g.op("Equal", g.op("Unsqueeze", cand_ids, axis1),
                    g.op("Unsqueeze", classes, g.const([0, 2], np.int64)))
        class_scores = g.op("Where", same, g.op("Unsqueeze", cand_scores, axis1), lowest)
    else:
        class_scores = g.op("Unsqueeze", cand_scores, axis1)
    selected = g.op("NonMaxSuppression", boxes, class_scores, k,
                    g.const([overlap], np.float32), g.const([valid_thresh], np.float32))
    where = g.op("Gather", selected, g.const([0, 2], np.int64), axis=1)  # (S, 2): batch, box
    ones = g.op("ConstantOfShape", g.op("Slice", g.op("Shape", selected), g.const([0], np.int64),
                                        axis1), value=_tensor(1.0))
    zeros = g.op("ConstantOfShape", g.op("Shape", cand_scores), value=_tensor(0.0))
    kept = g.op("Greater", g.op("ScatterND", zeros, where, ones), g.const(0.5, np.float32))
    kept = g.op("And", kept, g.op("Greater", cand_scores, lowest))
    _, final = g.op("TopK", g.op("Where", kept, cand_scores, lowest), k, axis=1, outputs=2)
    rows = g.op("Where", g.op("Unsqueeze", g.op("GatherElements", kept, final, axis=1),
                              g.const([2], np.int64)),
                g.rows(candidates, final), minus_one)
    padding = g.op("Concat", g.const([0, 0, 0, 0], np.int64), g.op("Sub", count, k),
                   g.const([0], np.int64), axis=0)
    g.op("Pad", rows, padding, minus_one, name=node["name"] + "0")
    return g.nodes


def _tensor(value):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray([value], dtype=np.float32))


@contextlib.contextmanager
def box_nms_translation():
    """While in the block, MXNet's converter translates ``box_nms`` with this module."""
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph

    registry = MXNetGraph.registry_
    before = {version: ops.get(_OP) for version, ops in registry.items()}
    for ops in registry.values():
        ops[_OP] = _translate
    try:
        yield
    finally:
        for version, translation in before.items():
            if translation is None:
                registry[version].pop(_OP, None)
            else:
                registry[version][_OP] = translation
