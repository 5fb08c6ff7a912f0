"""Numba's cache of the kernels is dropped whenever the source of any kernel module changes.

Numba keys a cached function on its own file's modification time and size.
A kernel that calls a helper from another module (``simd``, ``gemm``,
``edge``, ``combine``, ...) has the helper compiled into its own cache
entry, so after an upgrade or an edit that changes only the helper's module
the kernel would still load the old helper's code: results that differ from
a fresh compile's (the one-call paths of small layers would no longer give
the general path's bits), or worse. :func:`refresh` hashes the sources of
every module of the package with the Numba version; where the stamp kept
beside the cache differs, it deletes the package's cache files and writes
the new stamp, under a lock, so that processes starting together (a run and
its compile helper) delete once. ``gatfast.kernels`` calls it on import,
before any kernel is compiled or loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import numba

__all__ = ["STAMP", "cache_folder", "refresh", "sources_digest"]

#: the file beside the cache that holds the digest its entries were compiled from
STAMP = "gatfast-kernels.stamp"

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock (a second process may delete again)
    fcntl = None


def sources_digest(folder):
    """SHA-256 of the Numba version and of every ``*.py`` file in ``folder`` (names and contents)."""
    digest = hashlib.sha256(numba.__version__.encode())
    for path in sorted(Path(folder).glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_folder(dispatcher):
    """The folder Numba caches ``dispatcher`` in, as its locator chose it; None without a cache."""
    return getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)


@contextlib.contextmanager
def _locked(path):
    with open(path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _read(path):
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def refresh(folder, dispatcher):
    """Delete the cache files beside ``dispatcher``'s if they were compiled from other sources.

    Returns whether it deleted (or found nothing to delete under an old or
    missing stamp); False where the stamp matches or the cache folder cannot
    be written (Numba then does not cache there either).
    """
    path = cache_folder(dispatcher)
    if path is None:
        return False
    digest = sources_digest(folder)
    stamp = os.path.join(path, STAMP)
    if _read(stamp) == digest:
        return False
    try:
        os.makedirs(path, exist_ok=True)
        with _locked(stamp + ".lock"):
            if _read(stamp) == digest:  # another process refreshed it while this one waited
                return False
            for name in os.listdir(path):
                if name.endswith((".nbi", ".nbc")):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(path, name))
            partial = f"{stamp}.{os.getpid()}.tmp"
            with open(partial, "w", encoding="ascii") as handle:
                handle.write(digest)
            os.replace(partial, stamp)
    except OSError:
        return False
    return True
