"""Threads and process-wide settings: the one module that touches them.

What gatfast changes in the process, and when (nothing happens at import):

* The thread count (Numba's setting, ``NUMBA_NUM_THREADS`` by default: all
  cores) is changed only inside :func:`threads` blocks (``gatfast train
  --threads N``, ``train(..., threads=N)``) and restored afterwards.
* Kernels run on the calling thread when the work is too small to be worth
  waking threads (:data:`SERIAL_WORK`), else over chunks of rows on a small
  thread pool of this module (:func:`run_rows`; the kernels release the
  GIL). No OpenMP runtime is started, so a forked child computes like its
  parent and BLAS threads are never starved by spinning OpenMP workers.
* OpenBLAS is held at one thread (through threadpoolctl) only while the
  layer runs its dense products in row chunks on that same pool, one
  single-threaded BLAS call per chunk; the previous limit is restored.
* A one-line notice goes to stderr when the first call of a kernel takes
  long enough to be a compilation (the first run after installing).
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext

import numba

from . import _validate as V

__all__ = [
    "CHUNKS_PER_THREAD",
    "SERIAL_WORK",
    "blas_single_thread",
    "compile_notice",
    "run_chunks",
    "run_rows",
    "threads",
    "use_parallel",
]

#: Below this much work (edges x heads x channels) a kernel runs on the
#: calling thread: waking the other threads costs more than they save.
SERIAL_WORK = 1 << 15

#: Chunks of rows per thread: enough for threads that finish early to take
#: another (graphs with hubs have very uneven rows), few enough that the
#: per-chunk cost (a few microseconds) stays small.
CHUNKS_PER_THREAD = 4

_NOTHING = nullcontext()  # a shared no-op context for fast paths
_state = {"controller": None, "notice_given": False}
_pools = {}
_lock = threading.Lock()


def use_parallel(work):
    """Whether work of this size (edges x heads x channels) should run on several threads."""
    return work >= SERIAL_WORK and numba.get_num_threads() > 1


def run_rows(kernel, count, args, work):
    """``kernel(start, stop, *args)`` over ``[0, count)``: at once, or in chunks on the thread pool.

    The kernel must release the GIL and write only what belongs to its
    rows; the chunks then give the same bits as one call over everything,
    for any thread count. Small work (:data:`SERIAL_WORK`) and one thread
    run on the calling thread.
    """
    workers = numba.get_num_threads() if work >= SERIAL_WORK else 1
    if workers <= 1 or count < 2:
        kernel(0, count, *args)
        return
    pieces = min(count, workers * CHUNKS_PER_THREAD)
    size = -(-count // pieces)
    chunks = [(start, min(count, start + size)) for start in range(0, count, size)]
    list(_pool(workers).map(lambda c: kernel(c[0], c[1], *args), chunks))


def _pool(workers):
    key = (os.getpid(), workers)  # a forked child gets its own threads
    pool = _pools.get(key)
    if pool is None:
        with _lock:
            pool = _pools.get(key)
            if pool is None:
                pool = _pools[key] = ThreadPoolExecutor(workers, thread_name_prefix="gatfast")
    return pool


@contextmanager
def threads(n):
    """Run a block with ``n`` Numba threads (None: leave the setting alone), then restore it.

    Parameters
    ----------
    n : int or None
        Between 1 and the number of threads Numba started with
        (``NUMBA_NUM_THREADS``, all cores by default).

    Yields
    ------
    None
    """
    if n is None:
        yield
        return
    n = V.check_int(n, "threads", 1)
    if n > numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"threads must be <= {numba.config.NUMBA_NUM_THREADS} on this machine, got {n}")
    old = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def _blas_controller():
    controller = _state["controller"]
    if controller is None or controller[0] != os.getpid():
        from threadpoolctl import ThreadpoolController

        controller = _state["controller"] = (os.getpid(), ThreadpoolController())
    return controller[1]


#: Products smaller than this (rows x columns of the input) run without changing BLAS's
#: threads: OpenBLAS uses one thread for them anyway, and the limit costs 20-60 us a use.
BLAS_SMALL = 1 << 16


def blas_single_thread(work=None):
    """Hold every loaded BLAS at one thread for a block, then restore the previous limits.

    Used around the layer's row-chunked dense products: each chunk is one
    single-threaded BLAS call on a thread of :func:`run_chunks`, so BLAS's own
    (busy-waiting) worker threads never compete with Numba's for the cores.
    The controller is built once per process (about 5 ms) and each use costs
    20-60 microseconds, so ``work`` below :data:`BLAS_SMALL` gets a no-op
    context instead.
    """
    if work is not None and work < BLAS_SMALL:
        return _NOTHING
    return _blas_controller().limit(limits=1, user_api="blas")


def run_chunks(task, chunks):
    """``[task(start, stop) for (start, stop) in chunks]``, spread over the Numba thread count.

    The results come back in chunk order whatever thread ran which chunk, so
    a caller that adds per-chunk partial sums in list order gets the same
    bits for any thread count. The pool is per process: a forked child never
    waits on its parent's threads.
    """
    workers = min(numba.get_num_threads(), len(chunks))
    if workers <= 1:
        return [task(*c) for c in chunks]
    return list(_pool(numba.get_num_threads()).map(lambda c: task(*c), chunks))


class _Notice:
    """Print the compile notice if the block runs longer than ``delay`` seconds."""

    MESSAGE = "gatfast: compiling kernels (first run only; cached for later runs) ..."

    def __init__(self, delay, stream):
        self.delay = delay
        self.stream = stream
        self._timer = None

    def __enter__(self):
        self._timer = threading.Timer(self.delay, self._notify)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _notify(self):
        if _state["notice_given"]:
            return
        _state["notice_given"] = True
        try:
            print(self.MESSAGE, file=self.stream or sys.stderr, flush=True)
        except (OSError, ValueError):  # a closed stream must not break the computation
            pass

    def __exit__(self, *exc):
        self._timer.cancel()
        return False


_seen_keys = set()


def compile_notice(key, delay=1.0, stream=None):
    """A context manager for the first call of a kernel specialisation ``key``.

    With a cold Numba cache the first calls compile for many seconds and a
    silent terminal looks like a hang: if the block runs longer than
    ``delay`` seconds, one line goes to stderr, once per process. Calls with
    a key already seen get a shared no-op context (no thread, no timer).
    """
    if key in _seen_keys or _state["notice_given"]:
        return _NOTHING
    _seen_keys.add(key)
    return _Notice(delay, stream)
