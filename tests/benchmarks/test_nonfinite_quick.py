"""benchmarks/nonfinite.py: the --quick run times every setting, derives the costs right, checks
its clipping and the goal."""
import importlib
import json
import statistics
import subprocess
import sys

import mxnet as mx
import pytest
from mxnet import autograd, gluon

import gluonkit

from conftest import CLONE_ENV as ENV
COMMAND = [sys.executable, "-m", "benchmarks.nonfinite"]
OTHER_SECTION = "<!-- throughput:begin -->\nsomeone else's figures\n<!-- throughput:end -->"
SETTINGS = ("ignore", "skip", "skip+clip", "skip+clipping", "clipping", "skip-device")


@pytest.fixture(scope="module")
def bench():
    return importlib.import_module("benchmarks.nonfinite")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Run --quick once, writing only under a temporary directory: (results, readme text)."""
    out = tmp_path_factory.mktemp("nonfinite")
    readme = out / "README.md"
    readme.write_text(f"# Benchmarks\n\n{OTHER_SECTION}\n")
    command = COMMAND + ["--quick", "--rounds", "5", "--out", str(out / "nonfinite.json"),
                         "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=out, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "nonfinite.json") as f:
        return json.load(f), readme.read_text()


def test_every_setting_is_timed_every_round_and_its_cost_is_the_median_paired_ratio(quick, bench):
    results, _ = quick
    (row,) = results["rows"]
    assert tuple(bench.SETTINGS) == SETTINGS
    assert row["net"] == "cnn" and row["rounds"] == 5 and set(row["seconds"]) == set(SETTINGS)
    ignore = row["seconds"]["ignore"]
    assert len(ignore) == 5 and all(t > 0 for t in ignore)
    assert set(row["extra"]) == set(SETTINGS[1:])
    for name in SETTINGS[1:]:
        extra = [s / i - 1 for i, s in zip(ignore, row["seconds"][name])]
        spread = row["extra"][name]
        assert len(extra) == 5
        assert spread["median"] == pytest.approx(statistics.median(extra))
        assert spread["min"] == pytest.approx(min(extra)) and spread["max"] == pytest.approx(max(extra))
        assert spread["min"] <= spread["q1"] <= spread["median"] <= spread["q3"] <= spread["max"]
        median = statistics.median(row["seconds"][name])
        assert row["ms_per_step"][name] == pytest.approx(1000 * median / row["steps"])


def test_the_clipping_settings_did_what_their_labels_say(quick, bench):
    results, _ = quick
    norms = results["rows"][0]["global_norm"]
    assert 0 < norms["skip+clip"] < bench.NEVER_CLIPS        # the norm was computed, never clipped
    assert norms["skip+clipping"] > bench.CLIPS               # every timed epoch ended clipping


def test_readme_section_holds_the_table_and_keeps_the_rest(quick):
    results, text = quick
    assert OTHER_SECTION in text
    section = text.split("<!-- nonfinite:begin -->")[1].split("<!-- nonfinite:end -->")[0]
    assert "python -m benchmarks.nonfinite" in section and "5 rounds" in section
    row = results["rows"][0]
    ignore, skip = row["ms_per_step"]["ignore"], row["extra"]["skip"]["median"]
    assert f"| cnn | {row['batch']} | {ignore:.1f} | {skip:+.1%}" in section
    assert "clip_global_norm=1e6 (never clips)" in section
    assert "clip_global_norm=1e-6 (clips every update)" in section
    assert section.count("not measured in this run") == 3     # the goal is on resnet18_v1b


def _row(net, skip, clip, clipping=0.5):
    spread = {"q1": -0.01, "q3": 0.05, "min": -0.1, "max": 0.1}
    return {"net": net, "extra": {"skip": dict(spread, median=skip), "skip+clip": dict(spread, median=clip),
                                  "skip+clipping": dict(spread, median=clipping)}}


@pytest.mark.parametrize("skip, clip, clipping, verdicts", [(0.01, 0.019, 0.02, [True, True, True]),
                                                            (0.02, 0.021, 0.01, [True, False, True]),
                                                            (0.035, 0.04, 0.5, [False, False, False])])
def test_the_goal_is_checked_on_resnet18_v1b_only(bench, skip, clip, clipping, verdicts):
    rows = [_row("cnn", 0.5, 0.5), _row("resnet18_v1b", skip, clip, clipping)]
    found = bench.targets(rows)
    assert [t["met"] for t in found] == verdicts
    assert found[1]["target"] == ("resnet18_v1b: 'skip' + clip_global_norm=1e6 (never clips) costs <= 2% "
                                  "of an 'ignore' step")
    assert found[1]["value"].startswith(f"{clip:+.1%} (middle half of the rounds -1.0% .. +5.0%)")
    assert [t["met"] for t in bench.targets(rows[:1])] == [None, None, None]


@pytest.mark.parametrize("clip, scale, refused", [("CLIPS", 1e-8, True), ("CLIPS", 1.0, False),
                                                   ("NEVER_CLIPS", 1e9, True), ("NEVER_CLIPS", 1.0, False)])
def test_a_clipping_setting_that_did_not_do_what_it_says_is_refused(bench, clip, scale, refused):
    net = gluon.nn.Dense(1, in_units=2, use_bias=False)
    net.initialize(mx.init.Zero())
    trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.0},
                               on_nonfinite="skip", clip_global_norm=getattr(bench, clip))
    with autograd.record():
        loss = net(mx.nd.full((1, 2), scale))   # the gradient is the input: norm sqrt(2) * scale
    loss.backward()
    trainer.step(1)
    assert trainer.global_norm == pytest.approx(2 ** 0.5 * scale, rel=1e-5)
    if refused:
        with pytest.raises(RuntimeError, match="the timings would not measure what the table says"):
            bench.check_clipping("dense", trainer)
    else:
        bench.check_clipping("dense", trainer)


def test_bad_arguments_are_refused_with_the_choices():
    result = subprocess.run(COMMAND + ["--nets", "vgg99"], capture_output=True,
                            text=True, timeout=120, env=ENV, cwd="/")
    assert result.returncode == 2 and "unknown network(s) vgg99" in result.stderr
    assert "cifar_resnet20_v1" in result.stderr
