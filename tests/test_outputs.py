"""Output paths are checked before any training: clashes, inputs, missing or unwritable directories."""

import os
import re
import shutil
import subprocess

import pytest

from gatfast.cli import main
from gatfast.data import DATA_DIR
from gatfast.models import GATv2Network
from gatfast.training import save_checkpoint, train

KARATE = DATA_DIR / "karate.npz"

pytestmark = pytest.mark.usefixtures("one_numba_thread")


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if training starts: every check must come first."""
    import gatfast.training.run as run_module

    def refuse(*args, **kwargs):
        raise AssertionError("training started before the output paths were checked")

    monkeypatch.setattr(run_module, "fit", refuse)


def cli(argv, capsys):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status, err, *fragments):
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_save_and_metrics_json_on_the_same_file(tmp_path, capsys, no_training):
    target = tmp_path / "x"
    target.write_bytes(b"precious")
    status, out, err = cli(["train", "--save", target, "--metrics-json", target], capsys)
    assert_one_line_error(status, err, "save and metrics_json are the same file")
    assert target.read_bytes() == b"precious" and os.listdir(tmp_path) == ["x"]


def test_same_file_through_a_symlink_and_a_relative_path(tmp_path, capsys, monkeypatch, no_training):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.json").write_text("{}")
    os.symlink("real.json", tmp_path / "link.json")
    status, _, err = cli(["train", "--save", "link.json", "--metrics-json", "./real.json"], capsys)
    assert_one_line_error(status, err, "same file")
    status, _, err = cli(["train", "--save", "m.npz", "--metrics-json", "./m.npz"], capsys)
    assert_one_line_error(status, err, "same file")
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def test_save_onto_the_dataset_file(tmp_path, capsys, no_training):
    data = tmp_path / "karate.npz"
    shutil.copy(KARATE, data)
    before = data.read_bytes()
    status, _, err = cli(["train", "--dataset", data, "--save", data], capsys)
    assert_one_line_error(status, err, "save", "is the dataset", str(data))
    os.symlink(data, tmp_path / "alias.npz")
    status, _, err = cli(["train", "--dataset", data, "--metrics-json", tmp_path / "alias.npz"], capsys)
    assert_one_line_error(status, err, "metrics_json", "is the dataset")
    # a shipped dataset named by its name is an input too
    status, _, err = cli(["train", "--dataset", "cora", "--save", DATA_DIR / "cora.npz"], capsys)
    assert_one_line_error(status, err, "is the dataset")
    assert data.read_bytes() == before


def test_missing_or_unwritable_directory_fails_before_training(tmp_path, capsys, no_training):
    status, _, err = cli(["train", "--save", tmp_path / "typo" / "m.npz"], capsys)
    assert_one_line_error(status, err, "save", "does not exist")
    status, _, err = cli(["train", "--metrics-json", tmp_path / "typo" / "m.json"], capsys)
    assert_one_line_error(status, err, "metrics_json", "does not exist")
    assert os.listdir(tmp_path) == []  # nothing created
    status, _, err = cli(["train", "--save", tmp_path], capsys)
    assert_one_line_error(status, err, "is a directory")
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        try:
            status, _, err = cli(["train", "--save", locked / "m.npz"], capsys)
            assert_one_line_error(status, err, "not writable")
        finally:
            locked.chmod(0o700)


def test_diagnose_outputs_are_checked_too(tmp_path, capsys, no_training):
    status, _, err = cli(["train", "--diagnose", "--save", tmp_path / "m.npz", "--metrics-json",
                          tmp_path / "m_diagnostics.csv"], capsys)
    assert_one_line_error(status, err, "same file")
    status, _, err = cli(["train", "--diagnose", "--save", tmp_path / "nope" / "m.npz"], capsys)
    assert_one_line_error(status, err, "does not exist")


def test_train_raises_value_error_naming_the_option(tmp_path, no_training):
    with pytest.raises(ValueError, match="^metrics_json .* does not exist"):
        train("karate", metrics_json=tmp_path / "a" / "m.json")
    with pytest.raises(ValueError, match="^save and metrics_json are the same file"):
        train("karate", save=tmp_path / "m", metrics_json=tmp_path / "m")


def test_clean_outputs_still_work(tmp_path, capsys):
    status, out, err = cli(["train", "--epochs", "2", "--quiet", "--save", tmp_path / "m.npz",
                            "--metrics-json", tmp_path / "m.json"], capsys)
    assert status == 0 and err == ""
    assert sorted(os.listdir(tmp_path)) == ["m.json", "m.npz"]


# ---------------------------------------------------------------------- evaluate
def test_evaluate_metrics_json_must_not_be_an_input(tmp_path, capsys):
    model = tmp_path / "m.npz"
    save_checkpoint(model, GATv2Network(34, 2, 2, seed=0), {"dataset": "karate"},
                    preprocessing={"normalize_features": True})
    before = model.read_bytes()
    status, _, err = cli(["evaluate", model, "--metrics-json", model], capsys)
    assert_one_line_error(status, err, "--metrics-json", "is the checkpoint")
    data = tmp_path / "karate.npz"
    shutil.copy(KARATE, data)
    status, _, err = cli(["evaluate", model, "--dataset", data, "--metrics-json", data], capsys)
    assert_one_line_error(status, err, "is the dataset")
    status, _, err = cli(["evaluate", model, "--metrics-json", tmp_path / "no" / "e.json"], capsys)
    assert_one_line_error(status, err, "does not exist")
    assert model.read_bytes() == before


# ---------------------------------------------------------------------- experiment --out
def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_experiment_refuses_a_directory_tracked_by_git(tmp_path, capsys):
    git("init", "-q", ".", cwd=tmp_path)
    published = tmp_path / "results"
    published.mkdir()
    (published / "summary.md").write_text("published\n")
    git("add", "results/summary.md", cwd=tmp_path)
    argv = ["experiment", "pitfall", "--quick", "--seeds", "1", "--out", published]
    status, _, err = cli(argv, capsys)
    assert_one_line_error(status, err, "tracked by git", "--update-tracked")
    assert (published / "summary.md").read_text() == "published\n"
    # an untracked directory of the same repository is fine, and so is --update-tracked
    status, out, _ = cli([*argv[:-1], tmp_path / "mine"], capsys)
    assert status == 0 and (tmp_path / "mine" / "summary.md").exists()
    status, out, err = cli([*argv, "--update-tracked"], capsys)
    assert status == 0, err
    text = (published / "summary.md").read_text()
    assert re.match(r"# .*quick smoke run, not the published result", text)


def test_experiment_out_errors(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    status, _, err = cli(["experiment", "pitfall", "--quick", "--seeds", "1", "--out", afile], capsys)
    assert_one_line_error(status, err, "not a directory")
    status, _, err = cli(["experiment", "pitfall", "--quick", "--seeds", "1", "--out", tmp_path / "a" / "b"],
                         capsys)
    assert_one_line_error(status, err, "does not exist")
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def test_quick_outputs_say_so_in_their_titles(tmp_path):
    from gatfast.diagnostics.pitfall import run_pitfall

    res = run_pitfall(seeds=1, quick=True, out_dir=tmp_path / "q", variants=["GATv2"], archs=["1 layer"],
                      quiet=True)
    assert res.title == "Θ_R pitfall experiment: quick smoke run, not the published result"
    assert res.markdown.splitlines()[0] == "# " + res.title
    assert (tmp_path / "q" / "summary.md").read_text(encoding="utf-8").startswith("# " + res.title)
    assert len(res.runs) == 1


def test_only_quick_runs_are_titled_as_smoke_runs():
    from gatfast.diagnostics.pitfall_report import report_title

    assert "quick" not in report_title(False) and "not the published result" in report_title(True)
