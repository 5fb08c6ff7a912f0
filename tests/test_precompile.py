"""The first-run compile helper (gatfast/_precompile.py): its list, when it starts, where it stops."""

import json
import os
import subprocess
import sys
import time
import types as pytypes

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
    assert _precompile.decode_type(json.loads(json.dumps(_precompile.encode_type(t)))) == t


def test_literals_are_kept_as_their_type_and_other_types_left_out():
    assert _precompile.encode_type(types.IntegerLiteral(0)) == "int64"
    assert _precompile.encode_type(types.unicode_type) is None
    with pytest.raises((AttributeError, ValueError)):
        _precompile.decode_type("Array")  # a name of numba.types that is not a scalar type


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
    unknown_type = {"kernel": "gatfast.kernels.reduce.column_sums", "args": ["complex128"]}
    bad_layout = {"kernel": "gatfast.kernels.reduce.column_sums", "args": [dict(good["args"][0], layout="Z")]}
    not_a_kernel = {"kernel": "gatfast.kernels.readonly", "args": []}  # a plain function
    elsewhere = {"kernel": "wave.open", "args": []}  # never imported: only gatfast.kernels.* are
    entries = [gone, good, unknown_type, bad_layout, not_a_kernel, elsewhere]
    path.write_text(json.dumps({"runs": {"x": entries}}))
    imported_before = "wave" in sys.modules
    entries = _precompile.load_manifest("x", path=path)
    assert [(d.py_func.__name__, len(a)) for d, a in entries] == [("column_sums", 2)]
    assert imported_before or "wave" not in sys.modules


class FakeProcess:
    pid = 0

    def __init__(self, *args, **kwargs):
        self.args = args[0]

    def poll(self):
        return 0

    def wait(self, timeout=None):
        return 0


@pytest.fixture
def spawn(monkeypatch):
    """Start no real helper: record what start_helper would start and what it registers at exit."""
    seen = {"started": [], "at_exit": []}
    monkeypatch.delenv(_precompile.ENV_SWITCH, raising=False)  # tests/conftest.py switches it off
    monkeypatch.setattr(_precompile, "_running", [])
    monkeypatch.setattr(_precompile, "usable_cpus", lambda: 2)
    monkeypatch.setattr(_precompile, "compiled_or_cached", lambda d: False)

    def popen(*args, **kwargs):
        seen["started"].append(FakeProcess(*args))
        return seen["started"][-1]

    monkeypatch.setattr(_precompile.subprocess, "Popen", popen)
    monkeypatch.setattr(_precompile.atexit, "register", lambda *a: seen["at_exit"].append(a))
    return seen


def test_the_helper_starts_for_a_recorded_float32_run_on_an_empty_cache(spawn, monkeypatch):
    helper = _precompile.start_helper("cora")
    assert spawn["started"] == [helper]
    assert helper.args[-2:] == [f"--parent={os.getpid()}", "--dataset=cora"]
    assert json.loads(helper.args[3]) == sys.path  # gatfast from the parent's path, not the cwd's
    assert spawn["at_exit"] == [(_precompile._stop, helper)]  # stopped when the run exits


@pytest.mark.parametrize(
    "case", ["cached", "switched off", "other dataset", "float64", "one cpu", "frozen", "fails to start"]
)
def test_the_helper_does_not_start_where_it_cannot_help(spawn, monkeypatch, case):
    dataset, dtype = "karate", "float32"
    if case == "cached":
        monkeypatch.setattr(_precompile, "compiled_or_cached", lambda d: True)
    elif case == "switched off":
        monkeypatch.setenv(_precompile.ENV_SWITCH, "0")
    elif case == "other dataset":  # its kernels' argument types are not known: a race in Numba's index
        dataset = "csbm"
    elif case == "float64":
        dtype = "float64"
    elif case == "one cpu":
        monkeypatch.setattr(_precompile, "usable_cpus", lambda: 1)
    elif case == "frozen":
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    else:

        def fail(*args, **kwargs):
            raise OSError("no processes left")

        monkeypatch.setattr(_precompile.subprocess, "Popen", fail)
    assert _precompile.start_helper(dataset, dtype) is None
    assert spawn["started"] == [] and spawn["at_exit"] == []


def test_one_helper_at_a_time(spawn, monkeypatch):
    busy = FakeProcess([])
    busy.poll = lambda: None  # still running
    monkeypatch.setattr(_precompile, "_running", [busy])
    assert _precompile.start_helper("karate") is None and spawn["started"] == []
    busy.poll = lambda: 0  # done: the next run may start one
    assert _precompile.start_helper("karate") is not None


def test_gatfast_train_starts_the_helper_after_checking_its_arguments(monkeypatch):
    from gatfast.cli import main

    asked = []
    monkeypatch.setattr(_precompile, "start_helper", lambda *a: asked.append(a))
    assert main(["train", "--epochs", "1", "--quiet"]) == 0
    assert main(["train", "--dataset", "mutag", "--epochs", "1", "--dtype", "float64", "--quiet"]) == 0
    assert main(["train", "--dataset", "cora", "--nodes", "5", "--quiet"]) == 2  # refused: no helper
    assert (
        main(["train", "--dataset", "mutag", "--preset", "tu", "--epochs", "1", "--quiet"]) == 0
    )  # a recipe: none
    assert asked == [("karate", "float32"), ("mutag", "float64")]


def test_the_helper_is_stopped_when_the_run_exits():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _precompile._stop(helper)
    assert helper.poll() is not None


class FakeKernel:
    """Records compile calls; ``cached`` says whether the cache already holds it."""

    def __init__(self, name, cached, log):
        self.name, self.cached, self.log = name, cached, log
        self.stats = pytypes.SimpleNamespace(cache_hits={})

    def compile(self, args):
        self.log.append(self.name)
        if self.cached:
            self.stats.cache_hits[args] = self.stats.cache_hits.get(args, 0) + 1


def test_the_helper_compiles_from_the_last_kernel_and_stops_where_the_run_is(monkeypatch):
    log = []
    entries = [(FakeKernel(n, n in "ab", log), ()) for n in "abcd"]  # the run has a and b already
    assert _precompile.compile_backwards(entries) == 2
    assert log == ["d", "c", "b"]  # b was cached: the run got there, so the helper stops
    log.clear()
    assert _precompile.compile_backwards(entries, stop_at_cached=False) == 2 and log == list("dcba")
    log.clear()
    assert _precompile.compile_backwards(entries, parent=os.getppid()) == 2 and log == list("dcb")
    log.clear()
    assert _precompile.compile_backwards(entries, parent=-1) == 0 and log == []  # not its parent: done


def _gone(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "zombie" in fh.read()  # exited, waiting for a reaper that may not exist here
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_a_killed_run_takes_its_helper_with_it(tmp_path):
    # the run starts a helper on an empty cache and dies without any cleanup (os._exit, as SIGKILL):
    # the helper sees its stdin close and leaves at once, in the middle of a kernel's compile
    parent = (
        "import os, sys\n"
        "from gatfast import _precompile\n"
        "helper = _precompile.start_helper('karate')\n"
        "print(helper.pid if helper else -1, flush=True)\n"
        "import time; time.sleep(3)\n"  # the helper is compiling by now
        "os._exit(0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != _precompile.ENV_SWITCH}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    run = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, env=env, timeout=120)
    pid = int(run.stdout.split()[0])
    if pid < 0:
        pytest.skip("no helper started here (one CPU)")
    deadline = time.monotonic() + 1.0  # between kernels alone could take seconds (the biggest: 2 s)
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)


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
