"""The list of kernels a first run compiles (gatfast/_kernel_list.py, precompile.json)."""

import json
import sys

import pytest
from numba.core import types

from gatfast import _kernel_list


def test_every_recorded_run_has_a_list_of_gatfast_kernels():
    runs = json.loads(_kernel_list.MANIFEST.read_text())["runs"]
    assert set(runs) == set(_kernel_list.RECORDED_RUNS)
    for dataset in [*runs, None, "mutag"]:  # another dataset: every list merged
        entries = _kernel_list.load_manifest(dataset)
        assert len(entries) >= 10, dataset
        for dispatcher, args in entries:
            assert dispatcher.py_func.__module__.startswith("gatfast.kernels."), dispatcher
            assert all(isinstance(a, types.Type) for a in args)
    merged = {(d.py_func.__name__, a) for d, a in _kernel_list.load_manifest()}
    for dataset in runs:
        assert {(d.py_func.__name__, a) for d, a in _kernel_list.load_manifest(dataset)} <= merged


def test_the_merged_list_ends_with_what_every_run_needs_last():
    # the helper starts at the end: there, the optimizer step that every training run compiles among
    # its last kernels (traffic_scenes compiles a few after it: its first parallel pass, and with it the
    # thread team's spin kernels, comes after its first optimizer step)
    names = [d.py_func.__name__ for d, _ in _kernel_list.load_manifest()]
    assert "adam_update" in names[-6:]


@pytest.mark.parametrize(
    "t",
    [
        types.Array(types.float32, 2, "C", readonly=True),
        types.Array(types.int64, 1, "C"),
        types.Array(types.float64, 3, "A"),
        types.int64,
        types.uint64,
        types.float32,
        types.boolean,
        types.none,
    ],
    ids=str,
)
def test_argument_types_survive_the_json(t):
    assert _kernel_list.decode_type(json.loads(json.dumps(_kernel_list.encode_type(t)))) == t


def test_literals_are_kept_as_their_type_and_other_types_left_out():
    assert _kernel_list.encode_type(types.IntegerLiteral(0)) == "int64"
    assert _kernel_list.encode_type(types.unicode_type) is None
    with pytest.raises((AttributeError, ValueError)):
        _kernel_list.decode_type("Array")  # a name of numba.types that is not a scalar type


def test_an_unreadable_list_or_a_missing_kernel_gives_what_remains(tmp_path):
    path = tmp_path / "list.json"
    assert _kernel_list.load_manifest(path=path) == []  # no file
    path.write_text("{not json")
    assert _kernel_list.load_manifest(path=path) == []
    good = {
        "kernel": "gatfast.kernels.reduce.column_sums",
        "args": [
            {"array": "float32", "ndim": 2, "layout": "C", "readonly": True},
            {"array": "float32", "ndim": 1, "layout": "C", "readonly": False},
        ],
    }
    gone = {"kernel": "gatfast.kernels.reduce.no_such_kernel", "args": ["int64"]}
    unknown_type = {"kernel": "gatfast.kernels.reduce.column_sums", "args": ["complex128"]}
    bad_layout = {"kernel": "gatfast.kernels.reduce.column_sums", "args": [dict(good["args"][0], layout="Z")]}
    not_a_kernel = {"kernel": "gatfast.kernels.readonly", "args": []}  # a plain function
    elsewhere = {"kernel": "wave.open", "args": []}  # never imported: only gatfast.kernels.* are
    entries = [gone, good, unknown_type, bad_layout, not_a_kernel, elsewhere]
    path.write_text(json.dumps({"runs": {"x": entries}}))
    imported_before = "wave" in sys.modules
    entries = _kernel_list.load_manifest("x", path=path)
    assert [(d.py_func.__name__, len(a)) for d, a in entries] == [("column_sums", 2)]
    assert imported_before or "wave" not in sys.modules
