"""The first-run compile helper (gatfast/_precompile.py): when it starts, what it compiles, where it
stops, and the run waiting for the kernel it is compiling."""

import io
import json
import os
import subprocess
import sys
import threading
import time
import types as pytypes

import pytest

from gatfast import _cache_share, _kernel_list, _precompile


class FakeProcess:
    """A helper that was never started: records what the run writes to its stdin."""

    pid = 0

    def __init__(self, *args, **kwargs):
        self.args = args[0]
        self.stdin = io.BytesIO()
        self.stdin.close = lambda: setattr(self, "let_go", True)
        self.stdout = io.BytesIO()
        self.let_go = False
        self.returncode = None

    def terminate(self):
        self.returncode = -15

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return 0


@pytest.fixture
def spawn(monkeypatch):
    """Start no real helper: record what would be started and what is registered at exit."""
    seen = {"started": [], "at_exit": []}
    monkeypatch.delenv(_kernel_list.ENV_SWITCH, raising=False)  # tests/conftest.py switches it off
    monkeypatch.setattr(_precompile, "_running", [])
    monkeypatch.setattr(_precompile, "_waiting", [])
    monkeypatch.setattr(_precompile, "usable_cpus", lambda: 2)
    monkeypatch.setattr("gatfast._runtime.compiled_or_cached", lambda d: False)
    monkeypatch.setattr(_precompile, "share_caches", lambda dispatchers, progress=None: lambda: None)

    def popen(*args, **kwargs):
        seen["started"].append(FakeProcess(*args))
        return seen["started"][-1]

    monkeypatch.setattr(_precompile.subprocess, "Popen", popen)
    monkeypatch.setattr(_precompile.atexit, "register", lambda *a: seen["at_exit"].append(a))
    return seen


def test_the_helper_starts_for_a_recorded_float32_run_on_an_empty_cache(spawn):
    helper = _precompile.start_helper("cora")
    assert spawn["started"] == [helper]
    assert helper.args[-2:] == [f"--parent={os.getpid()}", "--wait"]
    assert helper.args[1] == "-I"  # isolated: nothing from the working directory or PYTHON* variables
    assert json.loads(helper.args[4]) == sys.path  # gatfast from the parent's own path
    assert spawn["at_exit"] == [(_precompile._stop, helper)]  # stopped when the run exits
    assert helper.stdin.getvalue() == b"cora\n"  # told which run's list to compile


def test_a_train_command_starts_the_helper_waiting_and_the_run_tells_it_what_to_compile(spawn):
    assert _precompile.prestart_helper(["evaluate", "model.npz"]) is None  # only train compiles kernels
    assert _precompile.prestart_helper([]) is None
    waiting = _precompile.prestart_helper(["train", "--dataset", "cora"])
    assert spawn["started"] == [waiting] and waiting.stdin.getvalue() == b""  # waits for its orders
    assert _precompile.prestart_helper(["train"]) is None  # one at a time
    assert _precompile.start_helper("cora") is waiting  # the one started waiting, no second
    assert spawn["started"] == [waiting] and waiting.stdin.getvalue() == b"cora\n"


@pytest.mark.parametrize(
    "case", ["cached", "switched off", "other dataset", "float64", "one cpu", "frozen", "fails to start"]
)
@pytest.mark.parametrize("prestarted", [False, True], ids=["alone", "prestarted"])
def test_the_helper_does_not_start_where_it_cannot_help(spawn, monkeypatch, case, prestarted):
    dataset, dtype = "karate", "float32"
    if case == "cached":
        monkeypatch.setattr("gatfast._runtime.compiled_or_cached", lambda d: True)
    elif case == "switched off":
        monkeypatch.setenv(_kernel_list.ENV_SWITCH, "0")
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
    waiting = _precompile.prestart_helper(["train"]) if prestarted else None
    assert _precompile.start_helper(dataset, dtype) is None
    if case in ("cached", "other dataset", "float64") and prestarted:  # started before the run knew
        assert spawn["started"] == [waiting] and waiting.let_go and waiting.stdin.getvalue() == b""
    else:
        assert waiting is None and spawn["started"] == [] and spawn["at_exit"] == []
    assert _precompile._running == [] and _precompile._waiting == []


def test_one_helper_at_a_time(spawn, monkeypatch):
    busy = FakeProcess([])
    monkeypatch.setattr(_precompile, "_running", [busy])
    assert _precompile.start_helper("karate") is None and spawn["started"] == []
    assert _precompile.prestart_helper(["train"]) is None
    busy.returncode = 0  # done: the next run may start one
    assert _precompile.start_helper("karate") is not None


def test_a_helper_the_command_did_not_need_is_let_go(spawn):
    from gatfast.cli import main

    assert (
        main(["train", "--dataset", "mutag", "--preset", "tu", "--epochs", "1", "--quiet"]) == 0
    )  # a recipe
    for refused in (["train", "--epochs", "0"], ["train", "--help"]):
        with pytest.raises(SystemExit):
            main(refused)
    assert len(spawn["started"]) == 3 and all(h.let_go and h.returncode == -15 for h in spawn["started"])
    assert _precompile._waiting == []


def test_a_dead_waiting_helper_is_replaced(spawn):
    dead = _precompile.prestart_helper(["train"])
    dead.returncode = -9
    helper = _precompile.start_helper("karate")
    assert (
        helper is not dead and spawn["started"] == [dead, helper] and helper.stdin.getvalue() == b"karate\n"
    )


def test_gatfast_train_starts_the_helper_after_checking_its_arguments(monkeypatch):
    from gatfast.cli import main

    asked, prestarted = [], []
    monkeypatch.setattr(_precompile, "start_helper", lambda *a: asked.append(a))
    monkeypatch.setattr(_precompile, "prestart_helper", lambda argv: prestarted.append(list(argv)))
    assert main(["train", "--epochs", "1", "--quiet"]) == 0
    assert main(["train", "--dataset", "mutag", "--epochs", "1", "--dtype", "float64", "--quiet"]) == 0
    assert main(["train", "--dataset", "cora", "--nodes", "5", "--quiet"]) == 2  # refused: no helper
    assert (
        main(["train", "--dataset", "mutag", "--preset", "tu", "--epochs", "1", "--quiet"]) == 0
    )  # a recipe: none
    assert asked == [("karate", "float32"), ("mutag", "float64")]
    assert [argv[0] for argv in prestarted] == ["train"] * 4


def test_the_helper_is_started_before_the_library_is_imported():
    # the point of starting it first: it loads Numba and the kernels while the run loads the rest
    code = (
        "import sys\n"
        "from gatfast import _precompile\n"
        "seen = []\n"
        "_precompile._spawn = lambda: seen.append(sorted(m for m in ('numba', 'scipy', 'gatfast.training') "
        "if m in sys.modules))\n"
        "_precompile._allowed = lambda: True\n"
        "from gatfast.cli import main\n"
        "try:\n"
        "    main(['train', '--epochs', '0'])\n"  # refused after the helper started
        "except SystemExit:\n"
        "    pass\n"
        "print(seen)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[[]]", out.stderr


def test_the_helper_is_stopped_when_the_run_exits():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _precompile._stop(helper)
    assert helper.poll() is not None


class FakeKernel:
    """Records compile calls; ``cached`` says whether the cache already holds it."""

    def __init__(self, name, cached, log):
        self.name, self.cached, self.log = name, cached, log
        self.stats = pytypes.SimpleNamespace(cache_hits={})
        self.py_func = pytypes.SimpleNamespace(__module__="gatfast.kernels.fake", __name__=name)

    def compile(self, args):
        self.log.append(self.name)
        if self.cached:
            self.stats.cache_hits[args] = self.stats.cache_hits.get(args, 0) + 1


def test_the_helper_compiles_from_the_last_kernel_and_stops_where_the_run_is():
    log, reports = [], []
    entries = [(FakeKernel(n, n in "ab", log), ()) for n in "abcd"]  # the run has a and b already
    assert _precompile.compile_backwards(entries, report=lambda *r: reports.append(r)) == 2
    assert log == ["d", "c", "b"]  # b was cached: the run got there, so the helper stops
    assert reports == [(e, f"gatfast.kernels.fake.{n}") for n in "dcb" for e in ("start", "done")]
    log.clear()
    assert _precompile.compile_backwards(entries, stop_at_cached=False) == 2 and log == list("dcba")
    log.clear()
    assert _precompile.compile_backwards(entries, parent=os.getppid()) == 2 and log == list("dcb")
    log.clear()
    assert _precompile.compile_backwards(entries, parent=-1) == 0 and log == []  # not its parent: done


class LineFeed:
    """A helper's stdout that the test writes lines into, one at a time."""

    def __init__(self):
        self.lines, self.ready = [], threading.Condition()

    def send(self, line):
        with self.ready:
            self.lines.append(line)
            self.ready.notify_all()

    def __iter__(self):
        while True:
            with self.ready:
                self.ready.wait_for(lambda: self.lines)
                line = self.lines.pop(0)
            if line is None:
                return
            yield line.encode() + b"\n"


def _follow(progress):
    feed, ended = LineFeed(), threading.Event()
    helper = pytypes.SimpleNamespace(stdout=feed, wait=lambda: 0)
    thread = threading.Thread(target=progress.follow, args=(helper, ended.set), daemon=True)
    thread.start()
    return feed, ended, thread


def _settle(progress, name):
    deadline = time.monotonic() + 10
    while progress._compiling != name and time.monotonic() < deadline:
        time.sleep(0.005)


def test_the_run_waits_for_the_kernel_the_helper_is_compiling():
    progress = _cache_share.HelperProgress()
    feed, ended, thread = _follow(progress)
    feed.send("start gatfast.kernels.x.big")
    _settle(progress, "gatfast.kernels.x.big")
    assert progress.wait_for("gatfast.kernels.x.small", timeout=5)  # another kernel: no wait
    assert not progress.wait_for("gatfast.kernels.x.big", timeout=0.05)  # still compiling
    waited = []
    waiter = threading.Thread(
        target=lambda: waited.append(progress.wait_for("gatfast.kernels.x.big", timeout=30))
    )
    waiter.start()
    time.sleep(0.1)
    assert waited == []  # blocked while the helper compiles it
    feed.send("done gatfast.kernels.x.big")
    waiter.join(10)
    assert waited == [True]
    feed.send("start gatfast.kernels.x.next")
    _settle(progress, "gatfast.kernels.x.next")
    feed.send(None)  # the helper ended in the middle of a kernel: nothing to wait for any more
    thread.join(10)
    assert ended.is_set() and progress.wait_for("gatfast.kernels.x.next", timeout=0.05)


def test_a_forked_child_never_waits_for_its_parents_helper(monkeypatch):
    progress = _cache_share.HelperProgress()
    progress._set("gatfast.kernels.x.big")
    assert not progress.wait_for("gatfast.kernels.x.big", timeout=0.01)
    monkeypatch.setattr(_cache_share.os, "getpid", lambda: -1)
    assert progress.wait_for("gatfast.kernels.x.big", timeout=30)


def test_the_kernels_wait_through_their_cache_and_are_restored_after():
    from gatfast.kernels.reduce import column_sums

    progress, original = _cache_share.HelperProgress(), column_sums._cache
    undo = _cache_share.share_caches([column_sums, column_sums], progress)
    try:
        wrapped = column_sums._cache
        assert wrapped is not original and wrapped._cache is original  # wrapped once
        assert wrapped._cache_file is original._cache_file  # the rest of Numba's cache is untouched
        asked = []
        progress.wait_for = lambda name, timeout=None: asked.append(name)
        original_load = original.load_overload
        try:
            original.load_overload = lambda sig, ctx: ("loaded", sig)
            assert wrapped.load_overload("sig", None) == ("loaded", "sig")
        finally:
            original.load_overload = original_load
        assert asked == ["gatfast.kernels.reduce.column_sums"]
    finally:
        undo()
    assert column_sums._cache is original


SHARED_KERNEL = """
from numba import njit

@njit(cache=True)
def twice(x):
    return 2 * x
"""


def test_numba_itself_loads_and_saves_through_the_shared_cache(tmp_path, monkeypatch):
    # the real compile path (no fakes): Numba asks the wrapper to load, and saves under the index lock
    (tmp_path / "shared_kernel_mod.py").write_text(SHARED_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    import shared_kernel_mod

    progress, asked, locked = _cache_share.HelperProgress(), [], []
    progress.wait_for = lambda name, timeout=None: asked.append(name)
    real_lock = _cache_share.index_lock

    def lock(cache):
        locked.append(cache._cache_file._index_path)
        return real_lock(cache)

    monkeypatch.setattr(_cache_share, "index_lock", lock)
    undo = _cache_share.share_caches([shared_kernel_mod.twice], progress)
    try:
        assert shared_kernel_mod.twice(21) == 42
    finally:
        undo()
    assert asked == ["shared_kernel_mod.twice"]
    assert len(locked) == 1 and os.path.exists(locked[0]) and os.path.exists(locked[0] + ".lock")


def test_the_index_lock_is_exclusive_across_processes(tmp_path):
    cache = pytypes.SimpleNamespace(_cache_file=pytypes.SimpleNamespace(_index_path=str(tmp_path / "k.nbi")))
    holder = (
        "import sys, time, types\n"
        "from gatfast._cache_share import index_lock\n"
        "c = types.SimpleNamespace(_cache_file=types.SimpleNamespace(_index_path=sys.argv[1]))\n"
        "with index_lock(c):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(1.0)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, str(tmp_path / "k.nbi")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    with _cache_share.index_lock(cache):
        waited = time.monotonic() - t0
    proc.wait(30)
    assert waited > 0.5  # held by the other process until it saved


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_a_helper_let_go_leaves_at_once(monkeypatch):
    monkeypatch.delenv(_kernel_list.ENV_SWITCH, raising=False)
    monkeypatch.setattr(_precompile, "_waiting", [])
    monkeypatch.setattr(_precompile, "_running", [])
    monkeypatch.setattr(_precompile, "usable_cpus", lambda: 2)
    helper = _precompile.prestart_helper(["train"])
    time.sleep(0.2)  # importing Numba and the kernels
    _precompile.let_go_waiting_helper()
    deadline = time.monotonic() + 1.0
    while not _gone(helper.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(helper.pid)


def _gone(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "zombie" in fh.read()  # exited, waiting for a reaper that may not exist here
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
@pytest.mark.parametrize("state", ["compiling", "waiting"])
def test_a_killed_run_takes_its_helper_with_it(tmp_path, state):
    # the run starts a helper on an empty cache and dies without any cleanup (os._exit, as SIGKILL):
    # the helper sees its stdin close and leaves at once, in the middle of a kernel's compile or
    # while it still waits to be told what to compile
    start = "start_helper('karate')" if state == "compiling" else "prestart_helper(['train'])"
    parent = (
        "import os, sys\n"
        "from gatfast import _precompile\n"
        f"helper = _precompile.{start}\n"
        "print(helper.pid if helper else -1, flush=True)\n"
        "import time; time.sleep(3)\n"  # the helper is compiling (or waiting) by now
        "os._exit(0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != _kernel_list.ENV_SWITCH}
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
from gatfast import _kernel_list, _precompile
compiled = []
if sys.argv[1] == "helper":
    sys.exit(_precompile.main(["--dataset", sys.argv[2], "--all"]))
if sys.argv[1] == "meet":  # everything is in the cache now: the helper stops at its first kernel
    print(_precompile.compile_backwards(_kernel_list.load_manifest(sys.argv[2])))
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
@pytest.mark.parametrize("dataset", sorted(_kernel_list.RECORDED_RUNS))
def test_the_helper_compiles_everything_the_recorded_run_compiles(tmp_path, dataset):
    # after the helper's full list, the recorded command compiles nothing: the list is complete
    # (a kernel whose arguments changed without `python -m gatfast._precompile --record` fails here)
    script = tmp_path / "compiles.py"
    script.write_text(COMPILES_OF_A_RUN)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), _kernel_list.ENV_SWITCH: "0"}

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
    argv = _kernel_list.RECORDED_RUNS[dataset]
    lines = run("run", dataset, *argv)
    assert lines[-1].split() == []  # no kernel compiled by the run itself
    assert run("meet", dataset) == ["0"]
