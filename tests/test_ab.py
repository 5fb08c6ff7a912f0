"""bench/ab.py: versions resolved or refused, and a tiny end-to-end A/B that leaves no worktree behind.

No timing assertions: the end-to-end run checks the report's shape only.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import ab  # noqa: E402


def test_versions_are_the_working_tree_or_commits():
    assert ab.resolve(".") == ("working tree", None)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert ab.resolve("HEAD") == ("HEAD", head.stdout.strip())
    with pytest.raises(ValueError, match="not a commit"):
        ab.resolve("no-such-revision-anywhere")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["small-batch", "--base", "no-such-revision-anywhere"], "--base"),
        (["small-batch", "--base", "HEAD", "--new", "no-such-revision-anywhere"], "--new"),
        (["scene", "--base", "HEAD"], "workload"),
        (["small-batch", "--base", "HEAD", "--rounds", "0"], "--rounds"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(argv, message, capsys):
    with pytest.raises(SystemExit):
        ab.main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_ab_end_to_end_leaves_no_worktree(tmp_path):
    out = tmp_path / "ab"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "ab.py"),
            "cora",
            "--base",
            "HEAD",
            "--size",
            "tiny",
            "--rounds",
            "2",
            "--steps",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "ab.json").read_text())
    assert list(result["rounds"]) == ["HEAD", "working tree"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert result["versions"]["HEAD"] == head.stdout.strip()
    assert result["versions"]["working tree"].startswith(head.stdout.strip())
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in result["rounds"].values())
    assert "smoke run" in (out / "ab.md").read_text()
    trees = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert "gatfast-ab-" not in trees
