"""benchmarks/readme.py --quick: every default run starts, its result line is read, and the
README's figures section is rewritten from what it measured (the rest of the file kept)."""
import json
import subprocess
import sys

import pytest

from conftest import CLONE_ENV


@pytest.mark.slow
def test_quick_run_writes_the_figures_it_measured(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nbefore\n<!-- figures:begin -->\nold\n<!-- figures:end -->\nafter\n")
    result = subprocess.run([sys.executable, "-m", "benchmarks.readme", "--quick", "--runs",
                             "classify,detect,multitask,tests", "--out", str(tmp_path / "readme.json"),
                             "--readme", str(readme)],
                            cwd=tmp_path, env=CLONE_ENV, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    written = json.loads((tmp_path / "readme.json").read_text())
    runs = written["runs"]
    assert list(runs) == ["classify", "detect", "multitask", "tests"]
    assert runs["classify"]["images"] == 64 and 0 <= runs["classify"]["test_accuracy"] <= 1
    assert runs["detect"]["images"] == 8 and 0 <= runs["detect"]["val_map"] <= 1
    assert 0 <= runs["multitask"]["digit_accuracy"] <= 1
    assert runs["tests"]["passed"] >= 1 and runs["tests"]["command"].startswith("python -m pytest")
    for row in runs.values():
        assert row["wall_seconds"] > row.get("train_seconds", 0) >= 0
        assert len(row["load_average"]) == 2
    assert written["machine"]["cores"] >= 1 and written["machine"]["cpu"]
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n<!-- figures:begin -->\n| run |")
    assert text.endswith("<!-- figures:end -->\nafter\n") and "old" not in text
    assert f"test accuracy {runs['classify']['test_accuracy']:.4f} on 64 images" in text
    assert written["markdown"] in text
