"""How a run and its compile helper (``_precompile.py``) share Numba's cache of the listed kernels.

Two rules, both applied by wrapping each listed dispatcher's cache object:

* **One writer of an index at a time.** Numba saves an entry by reading the
  kernel's index, adding the entry and writing the index back (each file
  atomically); two processes adding *different* entries of one kernel at
  the same moment can lose one, or leave the index pointing at the other's
  code, for every later run. Both processes save under an exclusive lock on
  a file beside the index (``fcntl.flock``), so the read-add-write is whole
  whatever argument types either compiles.
* **The run does not compile what the helper is compiling.** It follows the
  helper's progress lines (:class:`HelperProgress`) and, reaching that
  kernel, waits for the helper to save it, then loads it.

Numba internals used: a dispatcher's ``_cache`` with ``load_overload`` and
``save_overload``, and its ``_cache_file._index_path``. Where they moved, the
kernel is left alone and the helper is not started (see :func:`can_share`).
"""

from __future__ import annotations

import contextlib
import os
import threading

from ._kernel_list import kernel_name

__all__ = ["HelperProgress", "can_share", "file_lock", "index_lock", "share_caches"]

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, so no helper
    fcntl = None


def can_share():
    """Whether this platform has the lock the two processes need (POSIX ``flock``)."""
    return fcntl is not None


@contextlib.contextmanager
def file_lock(path):
    """Hold an exclusive lock on the file ``path`` (made if missing) while the block runs; without
    ``flock`` (not POSIX), no lock."""
    with open(path, "a") as fh:
        if fcntl is None:
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def index_lock(cache):
    """Hold an exclusive lock on the file beside ``cache``'s index while the block runs."""
    return file_lock(cache._cache_file._index_path + ".lock")


class HelperProgress:
    """The kernel the helper is compiling, from its progress lines (``start NAME``, ``done NAME``)."""

    #: Longest wait for one kernel (s): a helper this slow is stuck, and the run compiles it itself.
    PATIENCE = 60.0

    def __init__(self):
        self._changed = threading.Condition()
        self._compiling = None
        self._pid = os.getpid()  # a forked child has no reader of the helper's lines: it never waits

    def follow(self, helper, on_end=lambda: None):
        """Read ``helper``'s progress lines until it ends, then call ``on_end``, close its pipes, reap it."""
        try:
            for line in helper.stdout:
                event, _, name = line.decode("utf-8", "replace").strip().partition(" ")
                self._set(name if event == "start" else None)
        except (OSError, ValueError):
            pass
        finally:
            self._set(None)
            on_end()
            for pipe in (getattr(helper, "stdin", None), helper.stdout):
                with contextlib.suppress(AttributeError, OSError, ValueError):
                    pipe.close()
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


def share_caches(dispatchers, progress=None):
    """Wrap the cache of each of ``dispatchers`` (see the module docstring); returns the undo.

    With ``progress`` (the run's side), loading first waits for the helper to
    finish the same kernel. A dispatcher without Numba's usual cache object
    is left alone.
    """
    wrapped = []
    for dispatcher in set(dispatchers):
        cache = getattr(dispatcher, "_cache", None)
        if isinstance(cache, SharedCache) or not hasattr(cache, "save_overload"):
            continue
        try:
            cache._cache_file._index_path  # noqa: B018 - the lock file's place, checked before relying on it
        except AttributeError:
            continue
        dispatcher._cache = SharedCache(cache, kernel_name(dispatcher), progress)
        wrapped.append((dispatcher, cache))

    def undo():
        for dispatcher, cache in wrapped:
            dispatcher._cache = cache

    return undo


class SharedCache:
    """A Numba dispatcher's cache that saves under the index lock and, for the run, loads after the helper."""

    def __init__(self, cache, name, progress=None):
        self._cache, self._name, self._progress = cache, name, progress

    def load_overload(self, sig, target_context):
        if self._progress is not None:
            self._progress.wait_for(self._name)
        return self._cache.load_overload(sig, target_context)

    def save_overload(self, sig, data):
        with index_lock(self._cache):
            return self._cache.save_overload(sig, data)

    def __getattr__(self, attr):
        return getattr(self._cache, attr)
