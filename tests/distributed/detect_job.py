"""The detect recipe as a launched job (every role runs it; servers stop at ``import mxnet``).

``python detect_job.py OUT_DIR [RECIPE ARG...]`` trains with the recipe's own ``train`` under
``--kvstore dist_sync`` and saves this worker's final parameters to
``OUT_DIR/worker-<pid>.params`` (structural names, as ``save_parameters`` writes them).
"""
import logging
import os
import sys

from gluonkit.recipes import detect


def main(out_dir, argv):
    logging.basicConfig(level=logging.INFO)        # the recipe's log, as its command shows it
    result = detect.train(detect.parse_args(list(argv) + ["--kvstore", "dist_sync"]))
    result["net"].save_parameters(os.path.join(out_dir, f"worker-{os.getpid()}.params"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
