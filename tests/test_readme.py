"""Every ```python block of README.md runs, so the documentation cannot drift from the code.

Blocks run in the order of their section, the blocks of one section in one namespace, in a
temporary directory, after a prelude that defines the names the README's examples take as
given (a small CNN ``net`` with ``features`` and ``output`` on two CPU devices, digits loaders,
a batch ``x, y``, ``micro_batches``, a variable-size ``dataset``, ``trainer``, ``loss``, ...).
A block preceded by the line ``<!-- no-test -->`` (one that needs a GPU, the network or a
cluster) is skipped. Sections are found by their headings, so edits elsewhere in the README
never break this test's bookkeeping.
"""
import re
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
NO_TEST = "<!-- no-test -->"

PRELUDE = '''
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn
import gluonkit

ctx = [mx.cpu(0), mx.cpu(1)]
mx.random.seed(0)
np.random.seed(0)


class CNN(nn.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                              nn.Conv2D(8, 3, padding=1), nn.GlobalAvgPool2D(), nn.Flatten())
            self.output = nn.Dense(10)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


net = CNN()
net.initialize(init.Xavier(), ctx=ctx)
net(nd.zeros((1, 1, 8, 8)))
net.save_parameters("whole.params")
digits = gluonkit.data.digits()
small = gluon.data.SimpleDataset([digits[i] for i in range(64)])
train_loader = train_data = gluon.data.DataLoader(small, batch_size=16, shuffle=True)
test_loader = gluon.data.DataLoader(gluon.data.SimpleDataset([digits[i] for i in range(64, 96)]),
                                    batch_size=16)
x, y = next(iter(train_loader))
micro_batches = [(x[:5], y[:5]), (x[5:16], y[5:16]), (x[:3], y[:3])]
rng = np.random.RandomState(0)
dataset = gluon.data.SimpleDataset([(rng.rand(1, s, s + 2).astype("float32"), i % 10)
                                    for i, s in enumerate([8, 9, 10, 12, 8, 11, 9, 12] * 2)])
loss = loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
trainer = gluonkit.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
aux_head = nn.Dense(3)
aux_head.initialize(ctx=ctx)
score_grad = nd.ones((x.shape[0], 10))
'''

def _slug(heading):
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def readme_sections():
    """[(section slug, [code of each block])] for the ```python blocks, in README order."""
    sections, heading, previous = {}, "top", ""
    block, kind = None, None          # inside a fence: its lines and 'python' / 'skip' / 'other'
    for line in README.read_text().splitlines():
        if kind is not None:
            if line.startswith("```"):
                if kind == "python":
                    sections.setdefault(heading, []).append("\n".join(block))
                kind = None
            else:
                block.append(line)
            continue
        if line.startswith("```python"):
            block, kind = [], "skip" if previous == NO_TEST else "python"
        elif line.startswith("```"):
            block, kind = [], "other"
        elif line.startswith("## "):
            heading = _slug(line[3:])
        if line.strip():
            previous = line.strip()
    return list(sections.items())


@pytest.mark.parametrize("blocks", [pytest.param(blocks, id=slug) for slug, blocks in readme_sections()])
def test_readme_section_runs(blocks, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "readme"}
    exec(compile(PRELUDE, "prelude", "exec"), namespace)
    for index, code in enumerate(blocks):
        exec(compile(code, f"README block {index}", "exec"), namespace)


def test_the_parser_finds_blocks_and_honours_no_test(tmp_path, monkeypatch):
    text = "## A b\n```python\nx = 1\n```\n<!-- no-test -->\n```python\nraise SystemExit\n```\n" \
           "## C\n```bash\nls\n```\n```python\ny = 2\n```\n"
    fake = tmp_path / "README.md"
    fake.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "README", fake)
    assert readme_sections() == [("a-b", ["x = 1"]), ("c", ["y = 2"])]
