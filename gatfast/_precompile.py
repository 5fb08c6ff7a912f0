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
run's options are checked, tells it which run's list to compile, or lets it
go. It ends when the run exits (it is terminated), and at once when the run
dies (its stdin, a pipe from the run, closes).

It changes no result: the kernels are the same, only who compiles them.
Numba writes each cache file atomically (a temporary file, then a rename),
and two processes may save the *same* entries at once; two processes
adding *different* entries of one kernel at the same moment can leave its
index pointing at the other's code. So the helper compiles only for a run
whose entries it has exactly: a recorded dataset (``RECORDED_RUNS``) in
float32 without another recipe, and never with ``GATFAST_PRECOMPILE=0``.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading

from ._cpus import usable_cpus
from ._kernel_list import ENV_SWITCH, RECORDED_RUNS, kernel_name, load_manifest

__all__ = ["HelperProgress", "compile_backwards", "prestart_helper", "start_helper"]

# The helper imports gatfast from the parent's own sys.path: ``python -m`` would put the working
# directory first, where another checkout may lie. Its stdin is a pipe from the parent: the first
# line names the run to compile for, and end of file means the parent is gone, however it died.
# It needs only the kernels, so the package's __init__ is left unrun: an empty module stands for it.
_HELPER = (
    "import importlib.util, json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "sys.modules['gatfast'] = importlib.util.module_from_spec(importlib.util.find_spec('gatfast')); "
    "from gatfast._precompile import main; sys.exit(main(sys.argv[2:]))"
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
    already compiling. Another configuration would compile other argument
    types of the same kernels at the same time as the helper, and Numba's
    cache index is not safe for two processes adding different entries of
    one kernel at once. A helper started waiting is let go where it would
    not help. Any failure is ignored: the run compiles alone.
    """
    from ._runtime import compiled_or_cached

    waiting, _waiting[:] = _waiting[:], []
    helper = next((h for h in waiting if h.poll() is None), None)
    if helper is None and _busy():
        return None
    try:
        recorded = dataset in RECORDED_RUNS and str(dtype) == "float32" and _allowed()
        entries = load_manifest(dataset) if recorded else []
        wanted = bool(entries) and not compiled_or_cached(entries[-1][0])
    except Exception:
        wanted = False
    if not wanted:
        if helper is not None:
            _let_go(helper)
        return None
    helper = helper or _spawn()
    try:
        helper.stdin.write(f"{dataset}\n".encode())
        helper.stdin.flush()
    except (AttributeError, OSError, ValueError):  # none started, or it died
        if helper is not None:
            _let_go(helper)
        return None
    progress = HelperProgress()
    undo = progress.wait_in(dispatcher for dispatcher, _ in entries)
    # reaped when it ends (not at exit), and the run's kernels stop waiting for it then
    threading.Thread(target=progress.follow, args=(helper, undo), daemon=True).start()
    _running[:] = [helper]
    return helper


def _allowed():
    return not (
        os.environ.get(ENV_SWITCH, "1") == "0"
        or usable_cpus() < 2
        or getattr(sys, "frozen", False)
        or not sys.executable
    )


def _busy():
    return any(h.poll() is None for h in _running + _waiting)


def _spawn():
    try:
        helper = subprocess.Popen(
            [sys.executable, "-c", _HELPER, json.dumps(sys.path), f"--parent={os.getpid()}", "--wait"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except Exception:
        return None
    atexit.register(_stop, helper)
    return helper


def _let_go(helper):
    """End a waiting helper: its stdin closes, so it leaves; reaped in the background."""
    for pipe in (helper.stdin, helper.stdout):
        try:
            pipe.close()
        except (AttributeError, OSError):
            pass
    threading.Thread(target=helper.wait, daemon=True).start()


def _stop(helper):
    if helper.poll() is None:
        helper.terminate()
        try:
            helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            helper.kill()


class HelperProgress:
    """The kernel the helper is compiling, from its progress lines (``start NAME``, ``done NAME``).

    The run, reaching that kernel, waits for the helper to save it and loads
    it from the cache instead of compiling it a second time.
    """

    #: Longest wait for one kernel (s): a helper this slow is stuck, and the run compiles it itself.
    PATIENCE = 60.0

    def __init__(self):
        self._changed = threading.Condition()
        self._compiling = None
        self._pid = os.getpid()  # a forked child has no reader of the helper's lines: it never waits

    def follow(self, helper, on_end=lambda: None):
        """Read ``helper``'s progress lines until it ends, then call ``on_end`` and reap it."""
        try:
            for line in helper.stdout:
                event, _, name = line.decode("utf-8", "replace").strip().partition(" ")
                self._set(name if event == "start" else None)
        except (OSError, ValueError):
            pass
        finally:
            self._set(None)
            on_end()
            helper.wait()

    def _set(self, name):
        with self._changed:
            self._compiling = name
            self._changed.notify_all()

    def wait_for(self, name, timeout=None):
        """Wait while the helper compiles the kernel ``name``; False if it still is after ``timeout``."""
        if os.getpid() != self._pid:
            return True
        timeout = self.PATIENCE if timeout is None else timeout
        with self._changed:
            return self._changed.wait_for(lambda: self._compiling != name, timeout)

    def wait_in(self, dispatchers):
        """Make each of ``dispatchers`` wait for the helper before it reads the cache; returns the undo.

        A dispatcher without Numba's usual cache object is left alone: it
        compiles as before, perhaps a second time.
        """
        wrapped = []
        for dispatcher in set(dispatchers):
            cache = getattr(dispatcher, "_cache", None)
            if hasattr(cache, "load_overload") and not isinstance(cache, _CacheAfterHelper):
                dispatcher._cache = _CacheAfterHelper(cache, kernel_name(dispatcher), self)
                wrapped.append((dispatcher, cache))

        def undo():
            for dispatcher, cache in wrapped:
                dispatcher._cache = cache

        return undo


class _CacheAfterHelper:
    """A Numba dispatcher's cache that first waits for the helper to finish this kernel."""

    def __init__(self, cache, name, progress):
        self._cache, self._name, self._progress = cache, name, progress

    def load_overload(self, sig, target_context):
        self._progress.wait_for(self._name)
        return self._cache.load_overload(sig, target_context)

    def __getattr__(self, attr):
        return getattr(self._cache, attr)


# ---------------------------------------------------------------------------------- the helper's side
def _exit_with_parent():
    """In the helper: leave at once when the parent's end of stdin closes (it exited or was killed)."""
    try:
        sys.stdin.buffer.read()
    except (OSError, ValueError, AttributeError):
        return  # no usable stdin: the check between kernels remains
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
        report("start", kernel_name(dispatcher))
        dispatcher.compile(args)
        report("done", kernel_name(dispatcher))
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
        if args.wait:
            _warm_up()
            dataset = sys.stdin.buffer.readline().decode("utf-8", "replace").strip()
            if not dataset:  # let go, or the run is gone
                return 0
        if args.parent is not None:
            threading.Thread(target=_exit_with_parent, daemon=True).start()
        compile_backwards(
            load_manifest(dataset), parent=args.parent, stop_at_cached=not args.all, report=_print_progress
        )
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the run stops, so does this
        return 130
    except BrokenPipeError:  # the run is gone
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
