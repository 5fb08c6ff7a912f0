"""The first-run compile helper (gatfast/_precompile.py): its list, when it starts, where it stops."""

import json
import os
import subprocess
import sys

import pytest
from numba.core import types

from gatfast import _precompile


def test_every_recorded_run_has_a_list_of_gatfast_kernels():
    runs = json.loads(_precompile.MANIFEST.read_text())["runs"]
    assert set(runs) == set(_precompile.RECORDED_RUNS)
    for dataset in [*runs, None, "mutag"]:  # another dataset: every list merged
        entries = _precompile.load_manifest(dataset)
        assert len(entries) >= 10, dataset
        for dispatcher, args in entries:
            assert dispatcher.py_func.__module__.startswith("gatfast.kernels."), dispatcher
            assert all(isinstance(a, types.Type) for a in args)
    merged = {(d.py_func.__name__, a) for d, a in _precompile.load_manifest()}
    for dataset in runs:
        assert {(d.py_func.__name__, a) for d, a in _precompile.load_manifest(dataset)} <= merged


def test_the_merged_list_ends_with_what_every_run_needs_last():
    # the helper starts at the end: there, the optimizer step that every training run compiles last
    names = [d.py_func.__name__ for d, _ in _precompile.load_manifest()]
    assert "adam_update" in names[-3:]


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
    assert _precompile._decode(json.loads(json.dumps(_precompile._encode(t)))) == t


def test_literals_are_kept_as_their_type_and_other_types_left_out():
    assert _precompile._encode(types.IntegerLiteral(0)) == "int64"
    assert _precompile._encode(types.unicode_type) is None
    with pytest.raises((AttributeError, ValueError)):
        _precompile._decode("Array")  # a name of numba.types that is not a scalar type


def test_an_unreadable_list_or_a_missing_kernel_gives_what_remains(tmp_path):
    path = tmp_path / "list.json"
    assert _precompile.load_manifest(path=path) == []  # no file
    path.write_text("{not json")
    assert _precompile.load_manifest(path=path) == []
    good = {
        "kernel": "gatfast.kernels.reduce.column_sums",
        "args": [
            {"array": "float32", "ndim": 2, "layout": "C", "readonly": True},
            {"array": "float32", "ndim": 1, "layout": "C", "readonly": False},
        ],
    }
    gone = {"kernel": "gatfast.kernels.reduce.no_such_kernel", "args": ["int64"]}
    path.write_text(
        json.dumps(
            {
                "runs": {
                    "x": [
                        gone,
                        good,
                        {"kernel": "gatfast.kernels.reduce.column_sums", "args": ["complex128"]},
                    ]
                }
            }
        )
    )
    entries = _precompile.load_manifest("x", path=path)
    assert [(d.py_func.__name__, len(a)) for d, a in entries] == [("column_sums", 2)]


def test_the_helper_starts_only_with_a_cold_cache_and_not_when_switched_off(monkeypatch):
    started = []
    monkeypatch.setattr(_precompile, "_running", [])
    monkeypatch.setattr(_precompile.subprocess, "Popen", lambda *a, **k: started.append(a) or None)
    monkeypatch.setattr(_precompile.atexit, "register", lambda *a: None)
    monkeypatch.setattr(_precompile, "compiled_or_cached", lambda d: True)
    assert _precompile.start_helper("karate") is None and not started
    monkeypatch.setattr(_precompile, "compiled_or_cached", lambda d: False)
    monkeypatch.setenv(_precompile.ENV_SWITCH, "0")
    assert _precompile.start_helper("karate") is None and not started
    monkeypatch.delenv(_precompile.ENV_SWITCH)
    _precompile.start_helper("cora")
    assert started and started[0][0][-4:] == ["--parent", str(os.getpid()), "--dataset", "cora"]


def test_one_helper_at_a_time(monkeypatch):
    monkeypatch.delenv(_precompile.ENV_SWITCH, raising=False)
    monkeypatch.setattr(_precompile, "compiled_or_cached", lambda d: False)
    monkeypatch.setattr(_precompile.atexit, "register", lambda *a: None)
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(_precompile, "_running", [busy])
    try:
        assert _precompile.start_helper("karate") is None
    finally:
        _precompile._stop(busy)


def test_gatfast_train_starts_the_helper_for_its_dataset(monkeypatch, capsys):
    from gatfast.cli import main

    asked = []
    monkeypatch.setattr(_precompile, "start_helper", asked.append)
    assert main(["train", "--epochs", "1", "--quiet"]) == 0
    assert main(["train", "--dataset", "mutag", "--epochs", "1", "--quiet"]) == 0
    assert asked == ["karate", "mutag"]


def test_the_helper_is_stopped_when_the_run_exits():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _precompile._stop(helper)
    assert helper.poll() is not None


def test_the_helper_stops_when_its_parent_is_gone():
    entries = _precompile.load_manifest("karate")
    assert _precompile.compile_backwards(entries, parent=-1) == 0  # no process has pid -1: not the parent


COMPILES_OF_A_RUN = """
import sys
from numba.core import event
from gatfast import _precompile
compiled = []
if sys.argv[1] == "helper":
    sys.exit(_precompile.main(["--dataset", sys.argv[2], "--all"]))
if sys.argv[1] == "meet":  # everything is in the cache now: the helper stops at its first kernel
    print(_precompile.compile_backwards(_precompile.load_manifest(sys.argv[2])))
    sys.exit(0)
class Count(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
from gatfast.cli import main
status = main(sys.argv[3:] + ["--quiet"])
print(" ".join(compiled))
sys.exit(status)
"""


@pytest.mark.slow
@pytest.mark.parametrize("dataset", sorted(_precompile.RECORDED_RUNS))
def test_the_helper_compiles_everything_the_recorded_run_compiles(tmp_path, dataset):
    # after the helper's full list, the recorded command compiles nothing: the list is complete
    # (a kernel whose arguments changed without `python -m gatfast._precompile --record` fails here)
    script = tmp_path / "compiles.py"
    script.write_text(COMPILES_OF_A_RUN)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), _precompile.ENV_SWITCH: "0"}

    def run(*args):
        done = subprocess.run(
            [sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    run("helper", dataset)
    argv = _precompile.RECORDED_RUNS[dataset]
    lines = run("run", dataset, *argv)
    assert lines[-1].split() == []  # no kernel compiled by the run itself
    assert run("meet", dataset) == ["0"]
