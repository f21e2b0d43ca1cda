"""Time a model.onnx in onnxruntime (run by ``benchmarks.serving`` in the serving environment:
it imports numpy and onnxruntime only).

    python benchmarks/onnx_worker.py MODEL.onnx SHAPE BATCHES REPEATS

BATCHES is ``BATCHxCALLS,...`` (``1x20,16x4``: 20 calls per repeat at batch 1, then 4 at batch
16); prints one JSON list per batch: the seconds per call of each repeat (after a warm-up).
"""
import json
import sys
import time

import numpy as np
import onnxruntime


def main(path, shape, batches, repeats):
    runtime = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [_times(runtime, shape, batch, calls, repeats) for batch, calls in batches]


def _times(runtime, shape, batch, calls, repeats):
    given = runtime.get_inputs()[0]
    if given.type == "tensor(uint8)":              # an export that takes pixels
        x = np.random.RandomState(0).randint(0, 256, (batch,) + shape).astype(np.uint8)
    else:
        x = np.random.RandomState(0).uniform(-1, 1, (batch,) + shape).astype(np.float32)
    feed = {given.name: x}
    for _ in range(3):
        runtime.run(None, feed)
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        for _ in range(calls):
            runtime.run(None, feed)
        times.append((time.perf_counter() - tic) / calls)
    return times


if __name__ == "__main__":
    shape = tuple(int(n) for n in sys.argv[2].split(","))
    batches = [tuple(int(n) for n in item.split("x")) for item in sys.argv[3].split(",")]
    print(json.dumps(main(sys.argv[1], shape, batches, int(sys.argv[4]))))
