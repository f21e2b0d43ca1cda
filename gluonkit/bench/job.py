"""One process of a gluonkit-bench job (``python -m gluonkit.bench.job SPEC.json``), under
gluonkit-launch or horovodrun. In a server or the scheduler of a 'dist_sync' job, importing
MXNet serves the job and exits; a worker builds its contestant, runs the warm-up epoch and
the timed ones (devices waited for around each), and writes ``worker<rank>.json``."""
import json
import os
import sys
import time

import mxnet as mx  # (in a server or the scheduler of a job, this serves and exits)

__all__ = ["run_job"]


def _timed(run):
    mx.nd.waitall()
    tic = time.perf_counter()
    result = run()
    mx.nd.waitall()
    return time.perf_counter() - tic, result


def run_job(config, epochs, out_dir):
    """Build the contestant, warm up, time ``epochs`` epochs; write this worker's timings."""
    from .contestants import build

    build_s, contestant = _timed(lambda: build(config))
    setup_s, _ = _timed(contestant.setup)
    runs = []
    for _ in range(epochs):
        seconds, work = _timed(contestant.run)
        runs.append(dict(work, seconds=seconds))
    rank = contestant.trainer.rank
    with open(os.path.join(out_dir, f"worker{rank}.json"), "w") as f:
        json.dump({"rank": rank, "workers": contestant.trainer.num_workers, "build_s": build_s,
                   "setup_s": setup_s, "runs": runs}, f)


if __name__ == "__main__":
    with open(sys.argv[1]) as spec:
        run_job(**json.load(spec))
