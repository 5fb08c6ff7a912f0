"""Compile on the second core while a first ``gatfast train`` starts.

With an empty Numba cache a first run spends most of its time compiling,
one kernel after another on one core (Numba compiles under a process-wide
lock). :func:`start_helper` starts a helper process that compiles the
kernels of the run, recorded with their argument types in
``precompile.json``, from the last one the run needs back to the first,
and saves each to the cache; the run compiles from the first, and loads
from the cache whatever the helper has finished by the time it gets there.
The helper stops where the two meet (a kernel already in the cache), when
the run exits (it is terminated), and at once when the run dies (its
stdin, a pipe from the run, closes).

It changes no result: the kernels are the same, only who compiles them.
Numba writes each cache file atomically (a temporary file, then a rename),
and two processes may save the *same* entries at once; two processes
adding *different* entries of one kernel at the same moment can leave its
index pointing at the other's code. So the helper starts only for a run
whose entries it has exactly: a recorded dataset (:data:`RECORDED_RUNS`)
in float32 without another recipe, and never with ``GATFAST_PRECOMPILE=0``.
``python -m gatfast._precompile --record`` rewrites the list from cold
runs of :data:`RECORDED_RUNS` (after a kernel's arguments change;
``tests/test_precompile.py`` fails until then).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ._runtime import compiled_or_cached, usable_cpus

__all__ = [
    "MANIFEST",
    "RECORDED_RUNS",
    "compile_backwards",
    "decode_type",
    "encode_type",
    "load_manifest",
    "start_helper",
]

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


def encode_type(t):
    """A Numba argument type as JSON, or None for a type the list does not hold."""
    from numba.core import types

    t = types.unliteral(t)
    if isinstance(t, types.Array):
        return {"array": str(t.dtype), "ndim": t.ndim, "layout": t.layout, "readonly": not t.mutable}
    if isinstance(t, (types.Integer, types.Float)) or t in (types.boolean, types.none):
        return str(t)
    return None


def decode_type(item):
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
    from numba.core.dispatcher import Dispatcher

    try:
        kernels = _kernel_lists(path, dataset)
    except Exception:  # a list that cannot be read helps nothing, and must stop nothing
        return []
    entries = []
    for entry in kernels:
        try:
            module, name = entry["kernel"].rsplit(".", 1)
            if not module.startswith("gatfast.kernels."):  # nothing else is imported from the list
                continue
            dispatcher = getattr(importlib.import_module(module), name)
            if isinstance(dispatcher, Dispatcher):
                entries.append((dispatcher, tuple(decode_type(a) for a in entry["args"])))
        except Exception:  # e.g. a layout or dtype name this Numba does not know
            continue
    return entries


_running = []  # this process's helper: one at a time (a program may call ``gatfast.cli.main`` often)

# The helper imports gatfast from the parent's own sys.path: ``python -m`` would put the working
# directory first, where another checkout may lie. Its stdin is a pipe the parent never writes to:
# end of file means the parent is gone, however it died.
_HELPER = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from gatfast._precompile import main; sys.exit(main(sys.argv[2:]))"
)


def start_helper(dataset, dtype="float32"):
    """Start the helper for a run on ``dataset``; the process, or None where it would not help.

    Only for a recorded dataset in the recorded dtype (float32), with two or
    more usable CPUs, an empty cache for the list's last kernel and no helper
    already running. Another configuration would compile other argument
    types of the same kernels at the same time as the helper, and Numba's
    cache index is not safe for two processes adding different entries of
    one kernel at once. Any failure to start is ignored: the run compiles
    alone, as without the helper.
    """
    if (
        os.environ.get(ENV_SWITCH, "1") == "0"
        or dataset not in RECORDED_RUNS
        or str(dtype) != "float32"
        or usable_cpus() < 2
        or getattr(sys, "frozen", False)
        or not sys.executable
        or any(h.poll() is None for h in _running)
    ):
        return None
    try:
        entries = load_manifest(dataset)
        if not entries or compiled_or_cached(entries[-1][0]):
            return None
        helper = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _HELPER,
                json.dumps(sys.path),
                f"--parent={os.getpid()}",
                f"--dataset={dataset}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except Exception:
        return None
    atexit.register(_stop, helper)
    threading.Thread(target=helper.wait, daemon=True).start()  # reaped when it ends, not at exit
    _running[:] = [helper]
    return helper


def _stop(helper):
    if helper.poll() is None:
        helper.terminate()
        try:
            helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            helper.kill()


def _exit_with_parent():
    """In the helper: leave at once when the parent's end of stdin closes (it exited or was killed)."""
    try:
        sys.stdin.buffer.read()
    except (OSError, ValueError, AttributeError):
        return  # no usable stdin: the check between kernels remains
    os._exit(0)


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
from gatfast._precompile import encode_type
from gatfast.cli import main
status = main(sys.argv[2:] + ["--quiet"])
out = []
for kernel, args in calls:
    encoded = [encode_type(a) for a in args]
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
    if args.parent is not None:
        threading.Thread(target=_exit_with_parent, daemon=True).start()
    try:
        compile_backwards(load_manifest(args.dataset), parent=args.parent, stop_at_cached=not args.all)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the run stops, so does this
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
