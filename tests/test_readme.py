"""The README's deterministic claims re-derived: its code runs as written, its figures are what the commands print."""

import contextlib
import io
import os
import re

import pytest

from gatfast.cli import main

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")

pytestmark = pytest.mark.slow


def readme():
    with open(README, encoding="utf-8") as fh:
        return fh.read()


def run_cli(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


def python_blocks():
    """The README's ```python blocks, grouped: a block that starts with an import begins a new group."""
    groups = []
    for block in re.findall(r"```python\n(.*?)```", readme(), re.S):
        if block.startswith(("import ", "from ")) or not groups:
            groups.append([block])
        else:
            groups[-1].append(block)
    return groups


@pytest.mark.parametrize("group", python_blocks(), ids=lambda g: g[0].splitlines()[0][:40])
def test_readme_python_examples_run_as_written(group, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples may write files
    namespace = {"__name__": "readme"}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in group:
            exec(compile(block, README, "exec"), namespace)


def test_karate_figure():
    row = re.search(r"\| karate club \| `gatfast train` \| train accuracy (\S+) \|", readme())
    status, out = run_cli(["train"])
    assert status == 0
    printed = float(re.search(r"train_accuracy: (\S+)", out)[1])
    assert printed == float(row[1])


def test_gradcheck_figure():
    claim = re.search(r"`gatfast gradcheck`\s+prints.*?worst\s+relative error is (\S+) \(`(\w+)`\)", readme(), re.S)
    status, out = run_cli(["gradcheck"])
    assert status == 0
    worst = re.search(r"worst relative error: (\S+) \((\w+)\)", out)
    assert f"{float(worst[1]):.1e}" == f"{float(claim[1]):.1e}" and worst[2] == claim[2], (worst[0], claim[0])
