"""The detect recipe under ``gluonkit.launch``: 1 server and 2 workers on loopback, dist_sync."""
import glob
import os
import sys

import mxnet as mx
import numpy as np
from numpy.testing import assert_array_equal

from gluonkit.params import select
from gluonkit.recipes import detect
from watch import Watched, no_process_left

DETECT_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "detect_job.py")
TINY = ["--limit", "8", "--epochs", "1", "--batch-size", "2", "--image-size", "64", "--no-progress"]


def test_detect_recipe_trains_under_the_launcher_and_both_workers_end_equal(tmp_path):
    out = tmp_path / "run"
    run = Watched([sys.executable, "-m", "gluonkit.launch", "-n", "2", "-s", "1", "--timeout", "240", "--",
                   sys.executable, DETECT_JOB, str(tmp_path)] + TINY + ["--out", str(out)],
                  timeout=300, cwd=tmp_path)
    code, output = run.finish()
    assert code == 0, output[-3000:]
    assert no_process_left(run.pids()) == []
    assert output.count("VOC07 mAP:") == 1                          # rank 0 reports and writes
    assert output.count("on shapes (4 images") == 1                 # each worker holds half of 8
    for name in ("args.json", "history.csv", "model-symbol.json", "model-0000.params", "predictions.png"):
        assert (out / name).is_file(), name
    workers = [mx.nd.load(f) for f in sorted(glob.glob(str(tmp_path / "worker-*.params")))]
    assert len(workers) == 2
    initial = detect.train(detect.parse_args(TINY + ["--epochs", "0", "--out", ""]))["net"]
    trained = {name: p for name, p in select(initial).items() if p.grad_req != "null"}
    assert set(trained) <= set(workers[0]) and set(workers[0]) == set(workers[1])
    moved = 0
    for name, param in trained.items():
        # one kvstore update pulled by both: the learned weights are bit-identical
        assert_array_equal(workers[0][name].asnumpy(), workers[1][name].asnumpy(), err_msg=name)
        moved += not np.array_equal(workers[0][name].asnumpy(), param.data().asnumpy())
    assert moved > 0.9 * len(trained)                               # and training moved them
