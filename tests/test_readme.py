"""Every ```python block of README.md and docs/*.md runs as pasted, so the docs cannot rot.

Each block runs alone in a fresh ``python`` process, in an empty temporary directory, with a
timeout: it must import what it uses and build its own network and data. A failure names the
file and the block's index and first line. Blocks that are not Python say so (```bash,
```text); a fence without a language is refused, so no example escapes the test.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLONE_ENV, ROOT

DOCS = [Path(ROOT) / "README.md", *sorted((Path(ROOT) / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash", "text", "javascript"}   # javascript: tests/serve/test_node.py
TIMEOUT = 180   # each block runs in well under 60 s on 2 cores; the margin is for a loaded machine


def fenced_blocks(text):
    """[(language, line number, code)] of the fenced blocks in Markdown ``text``."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if language is None:
            if line.startswith("```"):
                language, start, lines = line[3:].strip(), number, []
        elif line.startswith("```"):
            blocks.append((language, start, "\n".join(lines) + "\n"))
            language = None
        else:
            lines.append(line)
    if language is not None:
        raise ValueError(f"the block opened at line {start} is never closed")
    return blocks


def python_blocks():
    params = []
    for path in DOCS:
        code_blocks = [b for b in fenced_blocks(path.read_text()) if b[0] == "python"]
        for index, (_, line, code) in enumerate(code_blocks):
            params.append(pytest.param(path, line, code, id=f"{path.name}-{index}"))
    return params


@pytest.mark.slow
@pytest.mark.parametrize("path, line, code", python_blocks())
def test_python_block_runs_as_pasted(path, line, code, tmp_path):
    (tmp_path / "block.py").write_text(code)
    result = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=CLONE_ENV,
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, (f"{path.name}, the block at line {line} "
                                    f"({code.splitlines()[0]!r}):\n{result.stderr[-3000:]}")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_block_names_its_language(path):
    languages = [(language, line) for language, line, _ in fenced_blocks(path.read_text())]
    assert [(lang, line) for lang, line in languages if lang not in LANGUAGES] == []


def test_the_docs_link_only_to_pages_that_exist():
    missing = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", path.read_text()):
            if not (path.parent / target).exists():
                missing.append(f"{path.name} -> {target}")
    assert missing == []


def test_the_block_parser_reads_languages_lines_and_code():
    text = "# T\n```python\nx = 1\n```\ntext\n```bash\nls\n```\n```\nbare\n```\n"
    assert fenced_blocks(text) == [("python", 2, "x = 1\n"), ("bash", 6, "ls\n"),
                                   ("", 9, "bare\n")]
    with pytest.raises(ValueError, match="line 2 is never closed"):
        fenced_blocks("#\n```python\nx = 1\n")
