"""Threads and process-wide settings: the one module that touches them.

What gatfast changes in the process, and when (nothing happens at import):

* ``OMP_WAIT_POLICY=PASSIVE`` is set (unless the user set it) just before
  the first kernel runs, because libgomp reads it once when Numba starts its
  OpenMP threads. Spinning OpenMP workers otherwise starve OpenBLAS between
  kernels on small machines (MUTAG training ran up to 10x slower).
* The Numba thread count is changed only inside :func:`threads` blocks
  (``gatfast train --threads N``, ``train(..., threads=N)``) and restored
  afterwards.
* OpenBLAS is held at one thread (through threadpoolctl) only while the
  layer runs its dense products in row chunks on its own small thread pool,
  one single-threaded BLAS call per chunk; the previous limit is restored.
* A one-line notice goes to stderr when the first call of a kernel takes
  long enough to be a compilation (the first run after installing).
* Kernels run serially (their ``*_serial`` twins, the same bits) when the
  work is too small to be worth waking threads, when Numba has one thread,
  and in a child forked after Numba's GNU OpenMP threads were started
  (libgomp cannot be used again after ``fork``: Numba aborts the child).
  To know the latter, the one thing done at import is registering an
  ``os.register_at_fork`` hook that marks forked children.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext

import numba
from numba.np.ufunc import parallel as _numba_parallel

from . import _validate as V

__all__ = [
    "SERIAL_WORK",
    "blas_single_thread",
    "compile_notice",
    "ensure_initialised",
    "run_chunks",
    "threads",
    "use_parallel",
]

#: Below this much work (edges x heads x channels) a kernel runs on the
#: calling thread: waking the other threads costs more than they save.
SERIAL_WORK = 1 << 15

_NOTHING = nullcontext()  # a shared no-op context for fast paths
_state = {"pid": None, "controller": None, "notice_given": False, "forked_after_openmp": False}
_pools = {}
_lock = threading.Lock()


def _after_fork_in_child():
    if getattr(_numba_parallel, "_is_initialized", False) and _threading_layer() == "omp":
        _state["forked_after_openmp"] = True


def _threading_layer():
    try:
        return numba.threading_layer()
    except ValueError:  # not started yet
        return None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def use_parallel(work):
    """Whether a kernel with ``work`` (edges x heads x channels) should run its parallel driver."""
    if work < SERIAL_WORK or _state["forked_after_openmp"]:
        return False
    return numba.get_num_threads() > 1


def ensure_initialised():
    """Process settings that must precede the first parallel kernel (cheap after the first call)."""
    pid = os.getpid()
    if _state["pid"] == pid:
        return
    with _lock:
        if _state["pid"] != pid:
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            _state["pid"] = pid


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
    key = (os.getpid(), workers)
    pool = _pools.get(key)
    if pool is None:
        with _lock:
            pool = _pools.get(key)
            if pool is None:
                pool = _pools[key] = ThreadPoolExecutor(workers, thread_name_prefix="gatfast-blas")
    return list(pool.map(lambda c: task(*c), chunks))


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
