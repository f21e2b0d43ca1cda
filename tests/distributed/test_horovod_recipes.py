"""The classification recipe with ``--kvstore horovod`` under ``horovodrun --gloo -np 2`` on loopback."""
import csv
import os
import re
import sys

from horovod_run import horovodrun, require_horovod

CLASSIFY = os.path.join(os.path.dirname(sys.executable), "gluonkit-classify")


def _history(out):
    with open(out / "history.csv") as f:
        return list(csv.DictReader(f))


def test_classify_on_two_horovod_ranks_trains_its_shards_validates_on_the_whole_test_split_and_exports_once(
        tmp_path):
    require_horovod()
    out = tmp_path / "run"
    code, output = horovodrun(2, [CLASSIFY, "--kvstore", "horovod", "--epochs", "2", "--limit", "400",
                                  "--no-progress", "--out", str(out)], timeout=240, cwd=tmp_path)
    assert code == 0, output[-3000:]
    assert output.count("Training cnn on digits (200 images") == 1   # rank 0 speaks; each rank holds half
    tested = re.findall(r"test accuracy: ([0-9.]+) on (\d+) images", output)
    assert len(tested) == 1, output[-3000:]
    accuracy, images = float(tested[0][0]), int(tested[0][1])
    assert images > 300   # the whole test split, not a rank's half
    rows = _history(out)
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    # the last epoch's validation ran over the same whole split as the final test
    assert abs(float(rows[-1]["val_accuracy"]) - accuracy) < 1e-4
    assert sorted(os.listdir(out)) == ["args.json", "checkpoints", "curves.png", "history.csv",
                                       "model-0000.params", "model-symbol.json", "model.json"]
    assert output.count("exported epoch") == 1

