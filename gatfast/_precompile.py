"""Compile on the second core while a first ``gatfast train`` starts.

With an empty Numba cache a first run spends most of its time compiling,
one kernel after another on one core (Numba compiles under a process-wide
lock). A helper process compiles the kernels of the run, recorded with
their argument types in ``precompile.json`` (``gatfast/_kernel_list.py``),
from the last one the run needs back to the first, and saves each to the
cache; the run compiles from the first, and loads from the cache whatever
the helper has finished by the time it gets there. Where the two meet, the
run waits for the kernel the helper is compiling (the helper started it
earlier, so it finishes first) instead of compiling it a second time, and
the helper stops at the next one, which the run has.

The helper starts in two steps, so that it loads Numba and the kernels
while the run loads the library: :func:`prestart_helper`, the first thing
``gatfast train`` does, starts it waiting; :func:`start_helper`, once the
run's options are checked, tells it which run's list to compile, or ends
it (a command that did not need it: another dataset, a warm cache, a
recipe, ``--help``, an error). It ends when the run exits (it is
terminated), and at once when the run dies, also during its warm-up (its
stdin, a pipe from the run, closes).

It changes no result: the kernels are the same, only who compiles them.
Numba's cache index is not safe for two processes adding *different*
entries of one kernel at the same moment (a lost entry, or an index
pointing at the other's code); both save the listed kernels under a lock
on their index (``_cache_share.py``), so the run may compile other
argument types of them (a wider layer, a bigger graph) while the helper
runs. The helper compiles only for a recorded dataset (``RECORDED_RUNS``)
in float32 without another recipe, where its list is the run's, and never
with ``GATFAST_PRECOMPILE=0``.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading

from ._cache_share import HelperProgress, can_share, share_caches
from ._cpus import usable_cpus
from ._kernel_list import ENV_SWITCH, RECORDED_RUNS, kernel_name, load_manifest

__all__ = ["compile_backwards", "let_go_waiting_helper", "prestart_helper", "start_helper"]

# The helper imports gatfast from the parent's own sys.path: ``python -m`` would put the working
# directory first, where another checkout may lie. Its stdin is a pipe from the parent: the first
# line names the run to compile for, and end of file means the parent is gone, however it died.
# It needs only the kernels, so the package's __init__ is left unrun: an empty module stands for it.
# Isolated (-I): nothing from the working directory or PYTHON* variables; it ends without the
# interpreter's teardown (0.4 s of a core the run's threads may want).
_HELPER = (
    "import importlib.util, json, os, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "sys.modules['gatfast'] = importlib.util.module_from_spec(importlib.util.find_spec('gatfast')); "
    "from gatfast._precompile import main; status = main(sys.argv[2:]); sys.stdout.flush(); os._exit(status)"
)

_waiting = []  # the helper prestart_helper started, not yet told what to compile
_running = []  # the helper compiling for this process: one at a time (a program may call main often)


def prestart_helper(argv):
    """Start a helper that waits for :func:`start_helper`, for a ``gatfast train`` command line.

    Returns the process, or None: not ``train``, switched off, one usable
    CPU, or a helper already there. Nothing heavy is imported here.
    """
    if not argv or argv[0] != "train" or not _allowed() or _busy():
        return None
    helper = _spawn()
    _waiting[:] = [helper] if helper is not None else []
    return helper


def start_helper(dataset, dtype="float32"):
    """Set the helper compiling for a run on ``dataset``; the process, or None where it would not help.

    Only for a recorded dataset in the recorded dtype (float32), with two or
    more usable CPUs, an empty cache for the list's last kernel and no helper
    already compiling: elsewhere the helper would compile kernels the run may
    not need. Both processes save the listed kernels under a lock on their
    index (``_cache_share.py``), so other argument types (another width, a
    bigger graph) are safe too. A helper started waiting is let go where it
    would not help. Any failure is ignored: the run compiles alone.
    """
    from ._runtime import compiled_or_cached

    waiting, _waiting[:] = _waiting[:], []
    helper = next((h for h in waiting if h.poll() is None), None)
    undo = None
    try:
        if helper is None and _busy():
            return None
        recorded = dataset in RECORDED_RUNS and str(dtype) == "float32" and _allowed()
        entries = load_manifest(dataset) if recorded else []
        if not entries or compiled_or_cached(entries[-1][0]):
            raise LookupError("nothing for a helper to do")
        helper = helper or _spawn()
        progress = HelperProgress()
        undo = share_caches((dispatcher for dispatcher, _ in entries), progress)
        helper.stdin.write(f"{dataset}\n".encode())
        helper.stdin.flush()
        # reaped when it ends (not at exit), and the run's kernels stop waiting for it then
        threading.Thread(target=progress.follow, args=(helper, undo), daemon=True).start()
    except Exception:  # not wanted, none started, or it died
        if undo is not None:
            undo()
        if helper is not None:
            _let_go(helper)
        return None
    _running[:] = [helper]
    return helper


def let_go_waiting_helper():
    """End a helper still waiting to be told what to compile (a command that did not need it)."""
    waiting, _waiting[:] = _waiting[:], []
    for helper in waiting:
        _let_go(helper)


def _allowed():
    return not (
        os.environ.get(ENV_SWITCH, "1") == "0"
        or usable_cpus() < 2
        or getattr(sys, "frozen", False)
        or not sys.executable
        or not can_share()
    )


def _busy():
    return any(h.poll() is None for h in _running + _waiting)


def _spawn():
    try:
        helper = subprocess.Popen(
            [sys.executable, "-I", "-c", _HELPER, json.dumps(sys.path), f"--parent={os.getpid()}", "--wait"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except Exception:
        return None
    atexit.register(_stop, helper)
    return helper


def _let_go(helper):
    """End a helper that compiled nothing yet (it is told what to compile only after this choice)."""
    for end in (helper.terminate, helper.stdin.close, helper.stdout.close):
        try:
            end()
        except (AttributeError, OSError, ValueError):
            pass
    threading.Thread(target=helper.wait, daemon=True).start()  # reaped in the background


def _stop(helper):
    if helper.poll() is None:
        helper.terminate()
        try:
            helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            helper.kill()


# ---------------------------------------------------------------------------------- the helper's side
def _read_orders(orders):
    """In the helper: the first line of stdin (the dataset) into ``orders["dataset"]``, then wait for end
    of file.

    End of file means the parent let it go, exited or was killed: the helper
    leaves at once, also in the middle of a compile or of its warm-up.
    """
    try:
        orders["dataset"] = sys.stdin.buffer.readline().decode("utf-8", "replace").strip()
        orders["ready"].set()
        sys.stdin.buffer.read()
    except (OSError, ValueError, AttributeError):
        return  # no usable stdin: the check of the parent between kernels remains
    os._exit(0)


def _warm_up():
    """What a first compile does anyway, done while the run still loads the library: import the
    listed kernels' modules and fill Numba's typing and target registries (about 0.5 s)."""
    load_manifest()
    try:
        from numba.core.registry import cpu_target

        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    except Exception:  # Numba internals that moved: the first compile does it, as before
        pass


def compile_backwards(entries, parent=None, stop_at_cached=True, report=lambda event, name: None):
    """Compile ``entries`` last first; the number compiled here (not loaded from the cache).

    Stops at the first kernel the cache already had (with ``stop_at_cached``:
    the run got there first) and when ``parent`` (a pid) is no longer this
    process's parent. ``report("start" or "done", name)`` is called around each.
    """
    compiled = 0
    for dispatcher, args in reversed(entries):
        if parent is not None and os.getppid() != parent:
            break
        hits = sum(dispatcher.stats.cache_hits.values())
        name = kernel_name(dispatcher)
        report("start", name)
        try:
            dispatcher.compile(args)
        except Exception:  # an entry this code no longer compiles: the list only helps, skip it
            continue
        finally:
            report("done", name)
        if sum(dispatcher.stats.cache_hits.values()) > hits:
            if stop_at_cached:
                break
            continue
        compiled += 1
    return compiled


def _print_progress(event, name):
    print(event, name, flush=True)  # read by the run (HelperProgress) through a pipe


def main(argv=None):
    import argparse

    from ._kernel_list import MANIFEST, record

    parser = argparse.ArgumentParser(prog="python -m gatfast._precompile", description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help=f"rewrite {MANIFEST.name} from cold runs")
    parser.add_argument("--dataset", help="compile the recorded list of this dataset's run")
    parser.add_argument("--wait", action="store_true", help="read the dataset from the first line of stdin")
    parser.add_argument("--parent", type=int, help="stop when this process is no longer the parent")
    parser.add_argument("--all", action="store_true", help="go on past kernels already in the cache")
    args = parser.parse_args(argv)
    if args.record:
        print(f"{record()} kernels written to {MANIFEST}")
        return 0
    try:
        dataset = args.dataset
        if args.parent is not None or args.wait:
            orders = {"dataset": None, "ready": threading.Event()}
            threading.Thread(target=_read_orders, args=(orders,), daemon=True).start()
            if args.wait:
                _warm_up()
                orders["ready"].wait()
                dataset = orders["dataset"]
                if not dataset:  # let go, or the run is gone
                    return 0
        entries = load_manifest(dataset)
        share_caches(dispatcher for dispatcher, _ in entries)  # saves under the index locks
        compile_backwards(entries, parent=args.parent, stop_at_cached=not args.all, report=_print_progress)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the run stops, so does this
        return 130
    except BrokenPipeError:  # the run is gone
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
