"""Bad dataset and checkpoint files: one clear line naming the file, never a traceback or a huge allocation."""

import io
import json
import struct
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gatfast.models.network as network_module
from gatfast import _npz
from gatfast._validate import MAX_WEIGHTS, check_network_size
from gatfast.cli import main
from gatfast.data import DATA_DIR, load_dataset
from gatfast.models import GATv2Network
from gatfast.models.shapes import network_parameter_shapes
from gatfast.training import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_numba_thread")
KARATE = DATA_DIR / "karate.npz"


def npy_bytes(arr):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=True)
    return buf.getvalue()


def write_zip(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)


def huge_claim(path):
    """A deflated member whose directory entry claims 10 GB from a few bytes (a zip-bomb header)."""
    data = npy_bytes(np.zeros(4))
    write_zip(path, {"y.npy": data}, zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    for sig, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = raw.find(sig)
        struct.pack_into("<I", raw, at + size_at, 0xFFFFFFF0)
    path.write_bytes(bytes(raw))


def header_claims_more(path):
    """A member whose .npy header claims a 10^12-element array but holds 32 bytes."""
    data = bytearray(npy_bytes(np.zeros(4)))
    text = data[10:].decode("latin1")
    data[10:] = text.replace("(4,)", "(10**12,)".replace("10**12", str(10**12))).encode("latin1")
    write_zip(path, {"y.npy": bytes(data)})


def crc_damaged(path):
    write_zip(path, {"y.npy": npy_bytes(np.arange(1000))}, zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    raw[200] ^= 0xFF  # inside the compressed data
    path.write_bytes(bytes(raw))


BAD_FILES = {
    "truncated zip": (lambda p: p.write_bytes(KARATE.read_bytes()[: KARATE.stat().st_size // 2]),
                      "not a valid .npz archive"),
    "random bytes": (lambda p: p.write_bytes(np.random.default_rng(0).bytes(300)), "not an .npz archive"),
    "text file": (lambda p: p.write_text("x,y\n1,2\n"), "not an .npz archive (no zip signature: it is a text file)"),
    "empty file": (lambda p: p.write_bytes(b""), "is empty"),
    "directory": (lambda p: p.mkdir(), "is a directory"),
    "npy file": (lambda p: p.write_bytes(npy_bytes(np.zeros(3))), "holds a single .npy array"),
    "non-npy member": (lambda p: write_zip(p, {"notes.txt": b"hello"}), "member 'notes.txt' is not a .npy array"),
    "pickled object array": (lambda p: write_zip(p, {"y.npy": npy_bytes(np.array([{"a": 1}], dtype=object))}),
                             "pickled Python objects"),
    "zip-bomb claim": (huge_claim, "more than compression can produce"),
    "header claims more than the member": (header_claims_more, "header claims shape"),
    "damaged compressed data": (crc_damaged, "member 'y'"),
}
# a checkpoint reads only its own entries: damaged data elsewhere makes it "not a checkpoint"
CHECKPOINT_FRAGMENTS = {"damaged compressed data": "missing or wrong 'format' entry"}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_dataset_file_is_one_line_naming_the_file(tmp_path, capsys, kind):
    make, fragment = BAD_FILES[kind]
    path = tmp_path / "bad.npz"
    make(path)
    status = main(["train", "--dataset", str(path), "--epochs", "1"])
    out, err = capsys.readouterr()
    assert status == 2, out
    assert err.count("\n") == 1 and "Traceback" not in err and "pickled data" not in err.replace("pickled Python", "")
    assert err.startswith("gatfast train: error: ") and str(path) in err and fragment in err, err
    with pytest.raises(ValueError, match="dataset file"):
        load_dataset(path)


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_bad_checkpoint_file_is_one_line_naming_the_file(tmp_path, capsys, kind):
    make, fragment = BAD_FILES[kind]
    fragment = CHECKPOINT_FRAGMENTS.get(kind, fragment)
    path = tmp_path / "bad.npz"
    make(path)
    status = main(["evaluate", str(path)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("gatfast evaluate: error: ") and str(path) in err and fragment in err, err


def test_damaged_parameter_data_in_a_checkpoint(tmp_path):
    path = tmp_path / "m.npz"
    save_checkpoint(path, GATv2Network(34, 4, 2, heads=2, seed=0))
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("param/layers.0.W_l.npy")
    raw[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF  # inside the stored array data
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"member 'param/layers.0.W_l' is corrupt \(Bad CRC-32"):
        load_checkpoint(path)


def test_dataset_members_are_decompressed_once(tmp_path, monkeypatch):
    reads = []
    real = _npz.NpzReader.read

    def counting(self, key):
        reads.append(key)
        return real(self, key)

    monkeypatch.setattr(_npz.NpzReader, "read", counting)
    load_dataset("cora")
    assert sorted(reads) == sorted(set(reads)) and "x_data" in reads


# ---------------------------------------------------------------------- checkpoints: shapes before memory
def edited_checkpoint(tmp_path, edit):
    path = tmp_path / "m.npz"
    save_checkpoint(path, GATv2Network(34, 4, 2, heads=2, seed=0))
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    config = json.loads(str(arrays["config"]))
    edit(config["model"])
    arrays["config"] = np.array(json.dumps(config))
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    return bad


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda c: c.update(hidden_features=10**9), "hidden_features must be <= 65536"),
        (lambda c: c.update(hidden_features=60000, heads=1000), "weights, above gatfast's limit"),
        (lambda c: c.update(num_layers=10**6), "num_layers must be <= 64"),
        (lambda c: c.update(hidden_features=5), "layers.0.W_l has shape (8, 34), the configuration needs (10, 34)"),
    ],
)
def test_checkpoint_config_is_checked_before_building_the_model(tmp_path, monkeypatch, edit, fragment):
    bad = edited_checkpoint(tmp_path, edit)

    def no_build(*args, **kwargs):
        raise AssertionError("the model was built before its shapes were checked")

    monkeypatch.setattr(network_module, "GATv2Network", no_build)
    with pytest.raises(ValueError) as info:
        load_checkpoint(bad)
    assert fragment in str(info.value) and str(bad) in str(info.value)


@given(
    in_features=st.integers(1, 6),
    hidden=st.integers(1, 5),
    out=st.integers(1, 4),
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    out_heads=st.integers(1, 3),
    readout=st.sampled_from([None, "mean", "sum", "max"]),
    residual=st.booleans(),
    share_weights=st.booleans(),
    root_weight=st.sampled_from([None, "theta_r", "theta_n"]),
)
def test_computed_shapes_are_the_model_shapes(in_features, hidden, out, layers, heads, out_heads, readout, residual,
                                              share_weights, root_weight):
    model = GATv2Network(in_features, hidden, out, num_layers=layers, heads=heads, out_heads=out_heads,
                         readout=readout, residual=residual, share_weights=share_weights, root_weight=root_weight)
    got = network_parameter_shapes(model.get_config())
    assert got == {k: v.shape for k, v in model.parameters().items()}
    assert list(got) == list(model.parameters())


def test_network_size_limits():
    assert check_network_size(1433, 8, 7, 2, 8, 1) == 2 * (64 * 1433 + 7 * 64)
    with pytest.raises(ValueError, match="num_layers must be <= 64"):
        check_network_size(4, 4, 2, 10**6, 1, 1)
    with pytest.raises(ValueError, match=f"limit of {MAX_WEIGHTS:,}"):
        check_network_size(10**6, 4096, 2, 2, 8, 1)
    with pytest.raises(TypeError, match="heads"):
        check_network_size(4, 4, 2, 2, 1.5, 1)


def test_config_checks_in_load_are_errors_not_crashes(tmp_path):
    for edit in (lambda c: c.update(readout="median"), lambda c: c.update(root_weight=3),
                 lambda c: c.update(in_features="34"), lambda c: c.pop("in_features")):
        with pytest.raises(ValueError, match="configuration is incompatible"):
            load_checkpoint(edited_checkpoint(tmp_path, edit))


def test_zlib_is_available():
    assert zlib.crc32(b"") == 0  # the reader relies on zipfile's CRC checks


def test_absurd_sizes_fail_fast_in_train_and_the_estimator():
    import gatfast
    from gatfast.data import load_karate

    with pytest.raises(ValueError, match="weights, above gatfast's limit"):
        gatfast.train("karate", hidden=60000, heads=1000, epochs=1, quiet=True)
    ds = load_karate()
    with pytest.raises(ValueError, match="layers must be <= 64"):
        clf = gatfast.GATv2Classifier(graph=ds.graph, node_features=ds.x, layers=10**6)
        clf.fit(np.arange(ds.num_nodes)[:, None], ds.y)
    with pytest.raises(ValueError, match="num_layers must be <= 64"):
        gatfast.GATv2Network(3, 4, 2, num_layers=10**6)


def test_a_directory_named_like_a_shipped_dataset_does_not_hide_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "karate").mkdir()
    (tmp_path / "mutag").mkdir()
    assert load_dataset("mutag").name == "mutag"
    status = main(["train", "--dataset", "mutag", "--epochs", "1", "--quiet", "--layers", "1", "--hidden", "2",
                   "--heads", "1", "--save", "m.npz"])
    assert status == 0, capsys.readouterr().err
    assert load_checkpoint(tmp_path / "m.npz")[1]["dataset"] == "mutag"
    status = main(["train", "--dataset", str(tmp_path / "karate")])
    assert status == 2 and "is a directory" in capsys.readouterr().err
