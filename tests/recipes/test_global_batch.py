"""The recipes' global batch options: what goes together, what is refused with the fix."""
import json

import numpy as np
import pytest

from gluonkit.data import digits
from gluonkit.recipes import classify, global_batch, multitask
from gluonkit.recipes.common import OptionError

RECIPES = [classify, multitask]


def _error(capsys, argv, recipe=classify):
    with pytest.raises(SystemExit) as exit_:
        recipe.parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("recipe", RECIPES)
def test_accumulate_without_per_worker_batch_is_refused_with_the_options_that_do_the_same(capsys, recipe):
    err = _error(capsys, ["--batch-size", "16", "--accumulate", "4", "--out", ""], recipe)
    assert "--accumulate 4: --batch-size is the samples of an update over every worker" in err
    assert "pass --batch-size 64 --micro-batch 16 (the same updates on one device), or --per-worker-batch" in err
    args = recipe.parse_args(["--batch-size", "16", "--accumulate", "4", "--per-worker-batch", "--out", ""])
    assert (args.batch_size, args.accumulate, args.per_worker_batch) == (16, 4, True)


@pytest.mark.parametrize("recipe, argv, message", [
    (recipe, argv, message) for recipe in RECIPES for argv, message in [
        (["--micro-batch", "8", "--per-worker-batch"],
         "--micro-batch cuts a global batch; with --per-worker-batch"),
        (["--micro-batch", "80"], "--micro-batch 80 is larger than the global --batch-size 64"),
        (["--micro-batch", "0"], "argument --micro-batch: the value must be a positive integer, got 0."),
    ]] + [
    (classify, ["--micro-batch", "8", "--multiscale", "8,12"], "--micro-batch cuts batches of one image size"),
])
def test_options_that_do_not_go_together_are_named(capsys, recipe, argv, message):
    assert message in _error(capsys, [*argv, "--out", ""], recipe)


class Workers:
    """The rank and count of a distributed kvstore, as the loader reads them."""

    def __init__(self, workers):
        self.rank, self.num_workers = 0, workers


def _refusal(batch_size, micro_batch, workers, devices=1, resume=False):
    with pytest.raises(OptionError) as refused:
        global_batch.global_train_loader(digits(), batch_size, micro_batch, devices, Workers(workers), 0, 0,
                                         resume=resume)
    return str(refused.value)


def _fits(batch_size, micro_batch, workers, devices=1):
    """Whether the options give each of ``workers`` workers a micro-batch of every global batch."""
    try:
        loader = global_batch.global_train_loader(digits(), batch_size, micro_batch, devices, Workers(workers), 0, 0)
    except OptionError:
        return False
    return loader.batch_sampler.sampler.micro_batches_per_batch >= workers


@pytest.mark.parametrize("batch_size, micro_batch, workers, devices, fix, largest, smallest", [
    (64, 32, 4, 1, "pass --micro-batch 21 or less, or --batch-size 97 or more.", 21, 97),
    (8, 4, 3, 1, "pass --micro-batch 3 or less, or --batch-size 9 or more.", 3, 9),   # 3 micro-batches of 3, 3, 2
    (8, 2, 5, 2, "pass --batch-size 17 or more.", None, 17),   # even 1 per device makes 4 steps of 2
])
def test_too_many_workers_for_the_micro_batches_of_a_global_batch_names_the_largest_micro_batch_that_fits(
        batch_size, micro_batch, workers, devices, fix, largest, smallest):
    message = _refusal(batch_size, micro_batch, workers, devices)
    assert message == (f"--batch-size {batch_size} with --micro-batch {micro_batch} on {devices} device(s) per "
                       f"worker makes {-(-batch_size // (micro_batch * devices))} micro-batch(es) per update, "
                       f"fewer than the {workers} workers; {fix}")
    if largest is not None:
        assert _fits(batch_size, largest, workers, devices) and not _fits(batch_size, largest + 1, workers, devices)
    assert _fits(smallest, micro_batch, workers, devices) and not _fits(smallest - 1, micro_batch, workers, devices)


def test_too_many_workers_without_micro_batch_names_the_micro_batch_and_the_batch_sizes_that_fit():
    assert _refusal(4, None, 3) == ("--batch-size 4 without --micro-batch runs each worker's share of a global "
                                    "batch (2 sample(s)) in one step: 2 micro-batch(es) per update, fewer than the "
                                    "3 workers; pass --micro-batch 1 or less, or a --batch-size that is a multiple "
                                    "of 3 (e.g. 6).")
    assert _fits(4, 1, 3) and _fits(6, None, 3) and _fits(9, None, 3)


def test_a_resume_on_too_many_workers_names_the_workers_the_runs_global_batches_fit():
    # --resume keeps the run's --batch-size and --micro-batch: the fix is the number of workers
    message = _refusal(4, 2, 3, resume=True)
    assert message == ("--resume on 3 workers: this run's global batch of 4 in micro-batches of 2 fits at most 2 "
                       "worker(s) (each needs a micro-batch of every update); resume on 2 or fewer.")
    assert _fits(4, 2, 2)
    assert _refusal(8, 2, 3, devices=2, resume=True).endswith(
        "in micro-batches of 4 (2 per device on 2) fits at most 2 worker(s) (each needs a micro-batch of every "
        "update); resume on 2 or fewer, or with fewer devices per worker (--ctx; on one device each it fits 4).")
    assert _fits(8, 2, 4, devices=1)
    # without --micro-batch each worker's share is its micro-batch: 3 workers of a batch of 4 get 2 of 2
    assert _refusal(4, None, 3, resume=True) == (
        "--resume on 3 workers: this run's global batch of 4, without --micro-batch, is each worker's share in one "
        "step, 2 sample(s) on 3 workers: 2 micro-batch(es), fewer than the workers; resume on 2 or 4 workers.")
    assert _fits(4, None, 2) and _fits(4, None, 4)


def test_micro_batch_on_the_resume_of_a_run_without_it_says_what_the_run_trained_with(tmp_path, capsys):
    out = str(tmp_path / "run")
    classify.train(classify.parse_args(["--limit", "40", "--epochs", "1", "--batch-size", "8", "--no-progress",
                                        "--out", out]))
    err = _error(capsys, ["--out", out, "--resume", "--epochs", "2", "--micro-batch", "2"])
    assert err.endswith(f"error: --micro-batch 2 differs from the run in {out}, trained without "
                        "--micro-batch, in micro-batches of 8 on 1 worker(s) (its args.json); a resumed run goes on "
                        f"as it was trained: drop --micro-batch, or start a new run with it (--config {out}/args.json "
                        "--micro-batch ... --out NEW).\n")


def test_one_process_runs_every_micro_batch_of_the_global_batch_in_order_and_says_so(tmp_path, caplog):
    caplog.set_level("INFO", logger="gluonkit")
    result = classify.train(classify.parse_args(["--limit", "60", "--epochs", "1", "--batch-size", "20",
                                                 "--micro-batch", "8", "--out", "", "--no-progress"]))
    assert ("Batches: global batch 20 (samples per update over 1 worker(s)), micro-batches of 8 (8 per device "
            "on 1), 3 per global batch; each worker's share of a global batch, in micro-batches: 3 (") in caplog.text
    assert "3 updates per epoch" in caplog.text
    assert np.isfinite(result["history"]["loss"][0])


def test_multitask_on_one_process_says_its_batches_and_accumulates_micro_batches_into_the_update(caplog):
    # no BatchNorm in its network: 4 micro-batches of 8 accumulated are one batch of 32, and
    # the aux head trains on the same updates (every 3rd), so the weights are the same
    caplog.set_level("INFO", logger="gluonkit")
    options = ["--epochs", "2", "--train-size", "160", "--batch-size", "32", "--out", "", "--no-progress"]
    micro = multitask.train(multitask.parse_args([*options, "--micro-batch", "8"]))
    assert ("Batches: global batch 32 (samples per update over 1 worker(s)), micro-batches of 8 (8 per device "
            "on 1), 4 per global batch; each worker's share of a global batch, in micro-batches: 4 (160 samples "
            "an epoch); 5 updates per epoch.") in caplog.text
    whole = multitask.train(multitask.parse_args(options))
    assert "micro-batches of 32 (32 per device on 1), 1 per global batch" in caplog.text
    ours, theirs = micro["net"].collect_params(), whole["net"].collect_params()
    for (name, param), other in zip(ours.items(), theirs.values(), strict=True):
        np.testing.assert_allclose(param.data().asnumpy(), other.data().asnumpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    per_worker = multitask.train(multitask.parse_args([*options, "--batch-size", "8", "--accumulate", "4",
                                                        "--per-worker-batch"]))
    assert "Batches: per worker: 8 per step, 4 step(s) per update, 5 updates per epoch." in caplog.text
    assert np.isfinite(per_worker["history"]["loss"]).all()


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_run_recorded_before_global_batches_resumes_on_batches_per_worker(tmp_path, recipe):
    out = tmp_path / "old"
    size = ["--limit", "60"] if recipe is classify else ["--train-size", "60"]
    argv = [*size, "--epochs", "1", "--batch-size", "8", "--per-worker-batch", "--accumulate", "2",
            "--no-progress", "--out", str(out)]
    recipe.train(recipe.parse_args(argv))
    recorded = json.loads((out / "args.json").read_text())
    del recorded["per_worker_batch"], recorded["micro_batch"]     # as an earlier version wrote it
    (out / "args.json").write_text(json.dumps(recorded))
    args = recipe.parse_args(["--out", str(out), "--resume", "--epochs", "2"])
    assert (args.per_worker_batch, args.batch_size, args.accumulate) == (True, 8, 2)
    assert len(recipe.train(args)["history"]["epoch"]) == 2   # the resumed epoch on the recorded batches
