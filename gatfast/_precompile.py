"""Compile on the second core while a first ``gatfast train`` starts.

With an empty Numba cache a first run spends most of its time compiling,
one kernel after another on one core (Numba compiles under a process-wide
lock). :func:`start_helper` starts a helper process that compiles the
kernels of a typical run, listed with their argument types in
``precompile.json``, from the last one a run needs to the first, and
saves each to the cache; the run compiles from the first, and loads from
the cache whatever the helper has finished by the time it gets there. The
helper stops where the two meet (a kernel already in the cache), when the
run exits (it is terminated), or when its parent is gone.

It changes no result: the kernels are the same, only who compiles them.
Numba writes its cache files atomically, so the two processes can share
it. The helper starts only when the cache lacks the list's last kernel,
never when ``GATFAST_PRECOMPILE=0``. ``python -m gatfast._precompile
--record`` rewrites the list from cold runs of the commands in
:data:`RECORDED_RUNS` (after a kernel's arguments change).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ._runtime import compiled_or_cached

__all__ = ["MANIFEST", "RECORDED_RUNS", "compile_backwards", "load_manifest", "start_helper"]

MANIFEST = Path(__file__).with_name("precompile.json")
#: The runs whose kernels the list holds, by dataset: the README's first command, and the shipped and
#: generated datasets whose recipes differ (sparse features; graph classification; regression on scenes).
RECORDED_RUNS = {
    "karate": ["train", "--epochs", "1"],
    "cora": ["train", "--dataset", "cora", "--epochs", "1"],
    "mutag": ["train", "--dataset", "mutag", "--epochs", "1"],
    "traffic_scenes": ["train", "--dataset", "traffic_scenes", "--epochs", "1"],
}
ENV_SWITCH = "GATFAST_PRECOMPILE"


def _encode(t):
    """A Numba argument type as JSON, or None for a type the list does not hold."""
    from numba.core import types

    t = types.unliteral(t)
    if isinstance(t, types.Array):
        return {"array": str(t.dtype), "ndim": t.ndim, "layout": t.layout, "readonly": not t.mutable}
    if isinstance(t, (types.Integer, types.Float)) or t in (types.boolean, types.none):
        return str(t)
    return None


def _decode(item):
    from numba.core import types

    if isinstance(item, dict):
        dtype = getattr(types, item["array"])
        return types.Array(dtype, int(item["ndim"]), item["layout"], readonly=bool(item["readonly"]))
    if item == "bool":
        return types.boolean
    if item == "none":
        return types.none
    t = getattr(types, item)
    if not isinstance(t, (types.Integer, types.Float)):
        raise ValueError(f"not a scalar type: {item!r}")
    return t


def _kernel_lists(path, dataset):
    """The recorded list of ``dataset``'s run, else every run's kernels merged (see :func:`record`)."""
    runs = json.loads(Path(path).read_text())["runs"]
    if dataset in runs:
        return runs[dataset]
    place = {}
    for calls in runs.values():
        for i, entry in enumerate(calls):
            key = json.dumps(entry, sort_keys=True)
            place[key] = min(place.get(key, 1.0), i / len(calls))
    return [json.loads(key) for key in sorted(place, key=place.get)]


def load_manifest(dataset=None, path=MANIFEST):
    """``[(dispatcher, argument types), ...]`` in the order a run first calls them; [] if unreadable.

    The kernels of the recorded run of ``dataset``; for another dataset,
    those of all recorded runs, each placed at the earliest point (as a
    fraction of its run) where a run first called it, so that every run's
    last kernels come last, where the helper starts. An entry whose kernel
    no longer exists is skipped: the list only speeds a first run up, it
    never decides what runs.
    """
    try:
        kernels = _kernel_lists(path, dataset)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    entries = []
    for entry in kernels:
        try:
            module, name = entry["kernel"].rsplit(".", 1)
            dispatcher = getattr(importlib.import_module(module), name)
            entries.append((dispatcher, tuple(_decode(a) for a in entry["args"])))
        except (ImportError, AttributeError, KeyError, TypeError, ValueError):
            continue
    return entries


_running = []  # this process's helper: one at a time (a program may call ``gatfast.cli.main`` often)


def start_helper(dataset=None):
    """Start the helper for a run on ``dataset`` when the cache lacks its list's last kernel; the process, or None."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or any(h.poll() is None for h in _running):
        return None
    entries = load_manifest(dataset)
    if not entries or compiled_or_cached(entries[-1][0]):
        return None
    helper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gatfast._precompile",
            "--parent",
            str(os.getpid()),
            "--dataset",
            str(dataset),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    atexit.register(_stop, helper)
    _running[:] = [helper]
    return helper


def _stop(helper):
    if helper.poll() is None:
        helper.terminate()
        try:
            helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            helper.kill()


def compile_backwards(entries, parent=None, stop_at_cached=True):
    """Compile ``entries`` last first; the number compiled here (not loaded from the cache).

    Stops at the first kernel the cache already had (with ``stop_at_cached``:
    the run got there first) and when ``parent`` (a pid) is no longer this
    process's parent.
    """
    compiled = 0
    for dispatcher, args in reversed(entries):
        if parent is not None and os.getppid() != parent:
            break
        hits = sum(dispatcher.stats.cache_hits.values())
        dispatcher.compile(args)
        if sum(dispatcher.stats.cache_hits.values()) > hits:
            if stop_at_cached:
                break
            continue
        compiled += 1
    return compiled


_RECORDER = """
import json, sys
from numba.core import event
calls = []
class Recorder(event.Listener):
    def on_start(self, ev):
        d = ev.data["dispatcher"]
        calls.append((d.py_func.__module__ + "." + d.py_func.__name__, ev.data["args"]))
    def on_end(self, ev):
        pass
event.register("numba:compile", Recorder())
from gatfast._precompile import _encode
from gatfast.cli import main
status = main(sys.argv[2:] + ["--quiet"])
out = []
for kernel, args in calls:
    encoded = [_encode(a) for a in args]
    if kernel.startswith("gatfast.") and None not in encoded:
        out.append({"kernel": kernel, "args": encoded})
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh)
sys.exit(status)
"""


def record(path=MANIFEST, runs=RECORDED_RUNS):
    """Rewrite the lists from cold runs (an empty cache each) of ``runs``, each in first-call order."""
    from ._io import atomic_write_text

    lists = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dataset, argv in runs.items():
            out = os.path.join(tmp, f"{dataset}.json")
            env = {**os.environ, "NUMBA_CACHE_DIR": os.path.join(tmp, dataset), ENV_SWITCH: "0"}
            subprocess.run(
                [sys.executable, "-c", _RECORDER, out, *argv], env=env, check=True, stdout=subprocess.DEVNULL
            )
            lists[dataset] = json.loads(Path(out).read_text())
    doc = {"recorded_with": {d: " ".join(["gatfast", *argv]) for d, argv in runs.items()}, "runs": lists}
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    return sum(map(len, lists.values()))


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gatfast._precompile", description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help=f"rewrite {MANIFEST.name} from cold runs")
    parser.add_argument("--dataset", help="compile the recorded list of this dataset's run")
    parser.add_argument("--parent", type=int, help="stop when this process is no longer the parent")
    parser.add_argument("--all", action="store_true", help="go on past kernels already in the cache")
    args = parser.parse_args(argv)
    if args.record:
        print(f"{record()} kernels written to {MANIFEST}")
        return 0
    try:
        compile_backwards(load_manifest(args.dataset), parent=args.parent, stop_at_cached=not args.all)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the run stops, so does this
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
