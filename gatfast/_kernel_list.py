"""The list of kernels a first run compiles, with their argument types (``precompile.json``).

The compile helper (``gatfast/_precompile.py``) compiles from this list.
``python -m gatfast._precompile --record`` rewrites it from cold runs of
:data:`RECORDED_RUNS` (after a kernel's arguments change;
``tests/test_precompile.py`` fails until then).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = [
    "ENV_SWITCH",
    "MANIFEST",
    "RECORDED_RUNS",
    "decode_type",
    "encode_type",
    "kernel_name",
    "load_manifest",
    "record",
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
#: ``GATFAST_PRECOMPILE=0`` in the environment: no helper (and none while the list is recorded).
ENV_SWITCH = "GATFAST_PRECOMPILE"


def kernel_name(dispatcher):
    """A kernel's name in the list and in the helper's progress lines: ``module.function``."""
    return f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__name__}"


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


_RECORDER = """
import json, sys
from numba.core import event
calls = []
class Recorder(event.Listener):
    def on_start(self, ev):
        d = ev.data["dispatcher"]
        calls.append((kernel_name(d), ev.data["args"]))
    def on_end(self, ev):
        pass
event.register("numba:compile", Recorder())
from gatfast._kernel_list import encode_type, kernel_name
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
