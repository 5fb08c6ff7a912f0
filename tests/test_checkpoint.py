"""Checkpoints: pickle-free .npz format, round trips, atomic writes, incompatible files."""

import json
import os

import numpy as np
import pytest

from gatfast._io import atomic_write_text
from gatfast.cli import main
from gatfast.data import DATA_DIR, load_karate
from gatfast.models import GATv2Network
from gatfast.training import train
from gatfast.training.checkpoint import FORMAT, VERSION, load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_numba_thread")
RAW = {"normalize_features": False}


@pytest.fixture(scope="module")
def trained():
    return train("karate", epochs=5, quiet=True).model


def entries(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def rewrite(src, dst, change):
    """Copy checkpoint ``src`` to ``dst`` with ``change(entries)`` applied (entries is a dict)."""
    arrays = entries(src)
    change(arrays)
    np.savez(dst, **arrays)
    return dst


def edit_config(arrays, edit):
    config = json.loads(str(arrays["config"]))
    edit(config)
    arrays["config"] = np.array(json.dumps(config))


# ---------------------------------------------------------------------- format and round trip
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_predicts_bit_for_bit(tmp_path, dtype):
    ds = load_karate(dtype=dtype)
    model = GATv2Network(34, 4, 2, heads=3, residual=True, attention_activation="softplus", dtype=dtype,
                         seed=5)
    for arr in model.parameters().values():  # non-trivial values everywhere (biases start at 0)
        arr += np.random.default_rng(0).normal(scale=0.1, size=arr.shape).astype(dtype)
    path = tmp_path / "m.npz"
    save_checkpoint(path, model, {"dataset": "karate", "note": [1, 2]})
    loaded, meta = load_checkpoint(path)
    assert meta == {"dataset": "karate", "note": [1, 2]}
    assert loaded.get_config() == model.get_config()
    for k, v in model.parameters().items():
        assert loaded.parameters()[k].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(loaded.parameters()[k], v)
    np.testing.assert_array_equal(loaded.output(ds.graph, ds.x), model.output(ds.graph, ds.x))


def test_documented_layout_loads_without_pickle(tmp_path, trained):
    path = tmp_path / "m.npz"
    save_checkpoint(path, trained, {"dataset": "karate"})
    z = entries(path)  # allow_pickle=False
    assert str(z["format"]) == FORMAT == "gatfast-checkpoint" and int(z["version"]) == VERSION == 1
    config = json.loads(str(z["config"]))
    assert config["model"] == trained.get_config() and config["meta"] == {"dataset": "karate"}
    assert {k for k in z if k.startswith("param/")} == {f"param/{k}" for k in trained.parameters()}
    assert all(z[k].dtype != object for k in z)


def test_train_save_records_dataset_metrics_and_splits(tmp_path):
    path = tmp_path / "m.npz"
    result = train("karate", epochs=3, quiet=True, save=path)
    _, meta = load_checkpoint(path)
    assert meta["dataset"] == "karate" and meta["task"] == "node_classification"
    assert meta["metrics"]["train_accuracy"] == result.metrics["train_accuracy"]
    assert "splits" not in meta
    mutag = str(DATA_DIR / "mutag.npz")
    result = train(mutag, epochs=1, layers=1, hidden=2, heads=1, quiet=True, save=path)
    _, meta = load_checkpoint(path)
    assert meta["dataset"] == os.path.abspath(mutag)  # a path evaluate can load again
    assert set(meta["splits"]) == {"train", "val", "test"}
    for k, v in result.splits.items():
        assert meta["splits"][k] == v.tolist()


# ---------------------------------------------------------------------- atomic writes
def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, trained, monkeypatch):
    path = tmp_path / "m.npz"
    save_checkpoint(path, trained)
    before = path.read_bytes()

    def broken_savez(fh, **arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, GATv2Network(34, 2, 2, seed=1))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.npz"]

    def interrupted(fh, **arrays):
        fh.write(b"PK")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, GATv2Network(34, 2, 2, seed=1))
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.npz"]


def test_nan_parameters_are_never_saved(tmp_path, trained):
    path = tmp_path / "m.npz"
    save_checkpoint(path, trained)
    before = path.read_bytes()
    bad = GATv2Network(34, 2, 2, seed=1)
    bad.parameters()["layers.1.att"][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"refusing.*layers\.1\.att.*NaN"):
        save_checkpoint(path, bad)
    bad.parameters()["layers.1.att"][0, 0] = np.inf
    with pytest.raises(ValueError, match="refusing"):
        save_checkpoint(tmp_path / "new.npz", bad)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.npz"]


def test_written_files_get_normal_permissions(tmp_path, trained):
    umask = os.umask(0o022)
    try:
        new = tmp_path / "new.npz"
        save_checkpoint(new, trained)
        assert new.stat().st_mode & 0o777 == 0o644
        old = tmp_path / "old.json"
        old.write_text("{}")
        os.chmod(old, 0o640)
        atomic_write_text(old, '{"a": 1}\n')
        assert old.stat().st_mode & 0o777 == 0o640 and old.read_text() == '{"a": 1}\n'
    finally:
        os.umask(umask)


def test_save_into_a_missing_directory_is_an_error(tmp_path, trained):
    # a typo in the directory must not silently create a new tree
    path = tmp_path / "runs" / "a" / "m.npz"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_checkpoint(path, trained)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------- bad and incompatible files
def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint file not found"):
        load_checkpoint(tmp_path / "nope.npz")
    with pytest.raises(ValueError, match="is a directory"):
        load_checkpoint(tmp_path)


def test_random_bytes_and_plain_npy(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(np.random.default_rng(0).bytes(500))
    with pytest.raises(ValueError, match="is not an .npz archive"):
        load_checkpoint(junk)
    npy = tmp_path / "array.npz"
    with open(npy, "wb") as fh:
        np.save(fh, np.zeros(3))
    with pytest.raises(ValueError, match="holds a single .npy array, not an .npz archive"):
        load_checkpoint(npy)
    other = tmp_path / "other.npz"
    np.savez(other, y=np.arange(3))
    with pytest.raises(ValueError, match="'format'"):
        load_checkpoint(other)


def test_pickled_entry_is_refused(tmp_path, trained):
    path = tmp_path / "m.npz"
    save_checkpoint(path, trained)
    bad = rewrite(path, tmp_path / "bad.npz", lambda a: a.update(config=np.array([{"x": 1}], dtype=object)))
    with pytest.raises(ValueError, match="member 'config' holds pickled Python objects"):
        load_checkpoint(bad)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a: a.update(format=np.array("something-else")), "wrong 'format'"),
        (lambda a: a.update(version=np.array(2)), "version 2 is not supported"),
        (lambda a: a.pop("version"), "version None is not supported"),
        (lambda a: a.update(version=np.array("one")), "cannot be read"),
        (lambda a: a.update(config=np.array("{not json")), "cannot be read"),
        (lambda a: a.update(config=np.array("[1, 2]")), "'config' entry is malformed"),
        (lambda a: edit_config(a, lambda c: c.pop("model")), "'config' entry is malformed"),
        (lambda a: edit_config(a, lambda c: c["model"].update(in_features=7)),
         r"parameters do not match its configuration.*layers\.0"),
        (lambda a: edit_config(a, lambda c: c["model"].update(num_layers=3)),
         r"do not match its configuration \(missing \['layers\.2\."),
        (lambda a: edit_config(a, lambda c: c["model"].update(heads=0)), "configuration is incompatible.*heads"),
        (lambda a: edit_config(a, lambda c: c["model"].update(colour="red")), "incompatible.*colour"),
        (lambda a: a.pop("param/layers.0.att"), r"missing \['layers\.0\.att'\]"),
        (lambda a: a.update({"param/layers.9.W_l": np.zeros(2)}), r"unexpected \['layers\.9\.W_l'\]"),
        (lambda a: a.update({"param/layers.0.W_l": np.full_like(a["param/layers.0.W_l"], np.nan)}),
         r"'layers\.0\.W_l' is not a finite"),
        (lambda a: a.update({"param/layers.0.W_l": a["param/layers.0.W_l"][:, :3]}),
         r"do not match its configuration.*layers\.0\.W_l"),
    ],
)
def test_incompatible_checkpoints_raise_clear_errors(tmp_path, trained, change, match):
    path = tmp_path / "m.npz"
    save_checkpoint(path, trained)
    bad = rewrite(path, tmp_path / "bad.npz", change)
    with pytest.raises(ValueError, match=match) as info:
        load_checkpoint(bad)
    assert str(bad) in str(info.value)


# ---------------------------------------------------------------------- through the command line
def test_cli_evaluate_rejects_a_model_that_does_not_fit_the_dataset(tmp_path, capsys):
    path = tmp_path / "m.npz"
    save_checkpoint(path, GATv2Network(12, 2, 2, seed=0), {"dataset": "karate"}, preprocessing=RAW)
    assert main(["evaluate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "expects 12 input features" in err and "34" in err and "Traceback" not in err
    save_checkpoint(path, GATv2Network(34, 2, 5, seed=0), {"dataset": "karate"}, preprocessing=RAW)
    assert main(["evaluate", str(path)]) == 2
    assert "5 classes" in capsys.readouterr().err


def test_cli_evaluate_bad_checkpoint_files(tmp_path, capsys):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    assert main(["evaluate", str(junk)]) == 2
    assert "is not an .npz archive" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "missing.npz")]) == 2
    assert "checkpoint file not found" in capsys.readouterr().err
    path = tmp_path / "m.npz"
    save_checkpoint(path, GATv2Network(34, 2, 2, seed=0), {"dataset": str(tmp_path / "moved.npz")}, preprocessing=RAW)
    assert main(["evaluate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cannot load the checkpoint's dataset" in err and "--dataset" in err


# ---------------------------------------------------------------------- preprocessing is recorded
def evaluate_json(path, tmp_path, capsys, *flags):
    out = tmp_path / f"eval{len(flags)}.json"
    status = main(["evaluate", str(path), "--metrics-json", str(out), *flags])
    err = capsys.readouterr().err
    return status, err, (json.loads(out.read_text()) if status == 0 else None)


def test_evaluate_uses_the_preprocessing_the_model_was_trained_with(tmp_path, capsys):
    from gatfast.data import load_dataset
    from gatfast.training import evaluate

    raw = load_dataset("cora")  # not normalised
    assert raw.preprocessing == {"normalize_features": False}
    result = train(raw, epochs=15, hidden=4, heads=2, quiet=True, save=tmp_path / "t.npz")
    _, meta = load_checkpoint(tmp_path / "t.npz")
    assert meta["preprocessing"] == {"normalize_features": False}
    expected = evaluate(result.model, raw)
    status, err, got = evaluate_json(tmp_path / "t.npz", tmp_path, capsys)
    assert status == 0, err
    assert got == {k: expected[k] for k in got} and got["test_accuracy"] == expected["test_accuracy"]
    # saved by hand: nothing recorded means no guess
    save_checkpoint(tmp_path / "h.npz", result.model, {"dataset": "cora"})
    status, err, _ = evaluate_json(tmp_path / "h.npz", tmp_path, capsys)
    assert status == 2 and "--normalize-features" in err and "--no-normalize-features" in err
    assert err.count("\n") == 1
    status, err, got = evaluate_json(tmp_path / "h.npz", tmp_path, capsys, "--no-normalize-features")
    assert status == 0 and got["test_accuracy"] == expected["test_accuracy"]
    # or recorded by the caller
    save_checkpoint(tmp_path / "p.npz", result.model, {"dataset": "cora"},
                    preprocessing={"normalize_features": False})
    status, err, got = evaluate_json(tmp_path / "p.npz", tmp_path, capsys)
    assert status == 0 and got["test_accuracy"] == expected["test_accuracy"]


def test_a_hand_built_dataset_records_no_preprocessing(tmp_path):
    ds = load_karate()
    ds.preprocessing = None  # as built by hand
    train(ds, epochs=2, quiet=True, save=tmp_path / "m.npz")
    _, meta = load_checkpoint(tmp_path / "m.npz")
    assert "preprocessing" not in meta and "normalize_features" not in meta


@pytest.mark.parametrize(
    "preprocessing, exc, match",
    [
        ({"normalise": True}, ValueError, "normalise"),
        ({"normalize_features": "yes"}, TypeError, "normalize_features"),
        ([True], TypeError, "preprocessing"),
    ],
)
def test_bad_preprocessing_argument(tmp_path, trained, preprocessing, exc, match):
    with pytest.raises(exc, match=match):
        save_checkpoint(tmp_path / "m.npz", trained, preprocessing=preprocessing)
    assert not (tmp_path / "m.npz").exists()
