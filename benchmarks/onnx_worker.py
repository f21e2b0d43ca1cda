"""Time a model.onnx in onnxruntime (run by ``benchmarks.serving`` in the serving environment:
it imports numpy and onnxruntime only).

    python benchmarks/onnx_worker.py MODEL.onnx SHAPE BATCH CALLS REPEATS

prints one JSON list: the seconds per call of each repeat (after a warm-up).
"""
import json
import sys
import time

import numpy as np
import onnxruntime


def main(path, shape, batch, calls, repeats):
    runtime = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
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
    print(json.dumps(main(sys.argv[1], shape, *(int(v) for v in sys.argv[3:6]))))
