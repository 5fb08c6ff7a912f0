"""The README's snippets marked ``<!-- readme-test: NAME -->`` run as written, without warnings."""

import re
import warnings
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def snippet(name):
    match = re.search(rf"<!-- readme-test: {name} -->\s*```python\n(.*?)```", README.read_text(encoding="utf-8"),
                      re.S)
    assert match, f"README.md has no snippet marked readme-test: {name}"
    return match.group(1)


def run(name, tmp_path, monkeypatch):
    """Execute the snippet in a fresh namespace; a warning attributed to the snippet fails the test."""
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(snippet(name), f"README.md:{name}", "exec"), {"__name__": "readme"})
    ours = [f"{w.category.__name__}: {w.message}" for w in caught if w.filename == f"README.md:{name}"]
    assert not ours


def test_the_markers_exist():
    text = README.read_text(encoding="utf-8")
    assert set(re.findall(r"<!-- readme-test: ([\w-]+) -->", text)) == {"estimator", "graph-estimator", "pyg"}


def test_estimator_snippet(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sklearn")
    run("estimator", tmp_path, monkeypatch)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[") and "lr" in out[1]


def test_graph_estimator_snippet(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    run("graph-estimator", tmp_path, monkeypatch)


def test_coming_from_pyg_snippet(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    run("pyg", tmp_path, monkeypatch)
    differences = [float(line) for line in capsys.readouterr().out.split()]
    assert len(differences) == 2 and max(differences) < 1e-12
