"""benchmarks/stepcost.py: the --quick run times every setting and the floor, derives the
ratios from paired rounds and checks the goals."""
import importlib
import json
import statistics
import subprocess
import sys

import pytest

from conftest import CLONE_ENV as ENV

COMMAND = [sys.executable, "-m", "benchmarks.stepcost"]
OTHER_SECTION = "<!-- nonfinite:begin -->\nsomeone else's figures\n<!-- nonfinite:end -->"


@pytest.fixture(scope="module")
def bench():
    return importlib.import_module("benchmarks.stepcost")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Run --quick once, writing only under a temporary directory: (results, readme text)."""
    out = tmp_path_factory.mktemp("stepcost")
    readme = out / "README.md"
    readme.write_text(f"# Benchmarks\n\n{OTHER_SECTION}\n")
    command = COMMAND + ["--quick", "--rounds", "3", "--out", str(out / "stepcost.json"), "--readme", str(readme)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=out, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "stepcost.json") as f:
        return json.load(f), readme.read_text()


def test_every_setting_and_the_floor_are_timed_and_ratios_are_paired_medians(quick, bench):
    results, _ = quick
    settings = results["settings"]
    assert set(settings["seconds"]) == set(bench.SETTINGS) | {"floor"}
    reference = settings["seconds"]["ignore"]
    for name, seconds in settings["seconds"].items():
        assert len(seconds) == 3 and all(t > 0 for t in seconds)
        assert settings["ms_per_step"][name] == pytest.approx(1000 * statistics.median(seconds) / settings["steps"])
        if name != "ignore":
            ratios = [a / b for a, b in zip(seconds, reference)]
            assert settings["ratio"][name] == pytest.approx({"median": statistics.median(ratios),
                                                             "min": min(ratios), "max": max(ratios)})
    accumulation = results["accumulation"]
    ratios = [a / b for a, b in zip(accumulation["seconds"]["accumulate"], accumulation["seconds"]["floor"])]
    assert accumulation["ratio"]["median"] == pytest.approx(statistics.median(ratios))


def test_readme_section_holds_the_tables_and_keeps_the_rest(quick):
    results, text = quick
    assert OTHER_SECTION in text
    section = text.split("<!-- stepcost:begin -->")[1].split("<!-- stepcost:end -->")[0]
    assert "python -m benchmarks.stepcost" in section and "3 rounds" in section
    clip = results["settings"]["ratio"]["clip"]
    assert f"| clip_global_norm=1e-6 (clips every update) | {results['settings']['ms_per_step']['clip']:.2f} | " \
           f"{clip['median']:.2f}x" in section
    assert section.count("**met**") + section.count("**NOT met**") == 3


@pytest.mark.parametrize("clip, skip, acc, verdicts", [(1.05, 1.09, 1.02, [True, True, True]),
                                                       (1.2, 1.05, 1.3, [False, True, False])])
def test_the_goals(bench, clip, skip, acc, verdicts):
    settings = {"ratio": {"clip": {"median": clip}, "skip": {"median": skip}}}
    found = bench.targets(settings, {"ratio": {"median": acc}})
    assert [t["met"] for t in found] == verdicts
    assert found[0]["target"] == ("host-bound network: clip_global_norm=1e-6 (clips every update) <= 1.10x an "
                                  "'ignore' step")


def test_bad_arguments_are_refused():
    result = subprocess.run(COMMAND + ["--rounds", "0"], capture_output=True, text=True, timeout=120, env=ENV, cwd="/")
    assert result.returncode == 2 and "--rounds must be positive, got 0" in result.stderr
