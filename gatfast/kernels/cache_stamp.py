"""Numba's cache of the kernels follows the sources of every kernel module, not only each kernel's own.

Numba keys a cached function on its own file's modification time and size.
A kernel that calls a helper from another module (``simd``, ``gemm``,
``edge``, ``combine``, ...) has the helper compiled into its own cache
entry, so after an upgrade or an edit that changes only the helper's module
the kernel would still load the old helper's code: results that differ from
a fresh compile's (the one-call paths of small layers would no longer give
the general path's bits), or worse.

:func:`refresh`, which ``gatfast.kernels`` calls on import before any kernel
is compiled or loaded, hashes the sources of every module of the package
with the Numba version and

* adds that digest to the source stamp of every kernel's cache index
  (Numba's ``_cache_file._source_stamp``, as ``_cache_share.py`` uses its
  neighbours), so an entry saved from other sources never loads, even one
  saved after this by a process still running the old code;
* where the digest kept beside the cache (:data:`STAMP`) differs, deletes
  the package's cache files, under a lock so that processes starting
  together (a run and its compile helper) delete once, and writes the new
  digest. Without this, the stale indexes would still exist, and a process
  would count a kernel as cached (``_runtime.compiled_or_cached``) that it
  must compile.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import numba

from .._cache_share import file_lock
from .._io import atomic_write_text

__all__ = ["STAMP", "cache_folder", "refresh", "sources_digest", "stamp_dispatchers"]

#: the file beside the cache that holds the digest its entries were compiled from
STAMP = "gatfast-kernels.stamp"


def sources_digest(folder):
    """SHA-256 of the Numba version and of every ``*.py`` file in ``folder`` (names and contents)."""
    digest = hashlib.sha256(numba.__version__.encode())
    for path in sorted(Path(folder).glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_folder(dispatcher):
    """The folder Numba caches ``dispatcher`` in, as its locator chose it; None without a cache."""
    return getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)


def _read(path):
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def stamp_dispatchers(modules, digest):
    """Add ``digest`` to the cache's source stamp of every cached dispatcher in ``modules``; returns how many."""
    stamped = 0
    for module in modules:
        for value in vars(module).values():
            cache_file = getattr(getattr(value, "_cache", None), "_cache_file", None)
            stamp = getattr(cache_file, "_source_stamp", None)
            if stamp is None:
                continue
            if not (isinstance(stamp, tuple) and len(stamp) == 3 and stamp[0] == STAMP):
                cache_file._source_stamp = (STAMP, stamp, digest)
            elif stamp[2] != digest:
                cache_file._source_stamp = (STAMP, stamp[1], digest)
            stamped += 1
    return stamped


def refresh(folder, modules, dispatcher):
    """Stamp the dispatchers of ``modules`` (see the module docstring); delete stale cache files.

    ``dispatcher`` is one of them, whose cache folder is the package's.
    Returns whether it deleted the cache files (or found none under an old
    or missing stamp); False where the stamp matches or the folder cannot be
    written, where the stamps on the dispatchers still keep stale entries
    from loading.
    """
    digest = sources_digest(folder)
    stamp_dispatchers(modules, digest)
    path = cache_folder(dispatcher)
    if path is None:
        return False
    stamp = os.path.join(path, STAMP)
    if _read(stamp) == digest:
        return False
    try:
        os.makedirs(path, exist_ok=True)
        with file_lock(stamp + ".lock"):
            if _read(stamp) == digest:  # another process refreshed it while this one waited
                return False
            for name in os.listdir(path):
                if name.endswith((".nbi", ".nbc")):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(path, name))
            atomic_write_text(stamp, digest)
    except OSError:
        return False
    return True
