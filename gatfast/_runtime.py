"""Threads and process-wide settings: the one module that touches them.

What gatfast changes in the process, and when (nothing happens at import):

* The thread count (Numba's setting, ``NUMBA_NUM_THREADS`` by default: all
  cores) is changed only inside :func:`threads` blocks (``gatfast train
  --threads N``, ``train(..., threads=N)``) and restored afterwards.
* Kernels run on the calling thread when the work is too small to be worth
  waking threads (:data:`PARALLEL_WORK`), else over chunks of rows on a team
  of helper threads that spin briefly between tasks (:func:`run_rows`,
  ``_team.py``; the kernels release the GIL). No OpenMP runtime is
  started, so a forked child computes like its parent and BLAS threads are
  never starved by spinning OpenMP workers.
* BLAS is held at one thread (through threadpoolctl's controllers) while a
  layer's forward or backward pass runs its dense products, as one call or
  in row chunks on that same team; the previous counts are restored.
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

from ._team import on_helper, run_here, team_for

__all__ = [
    "CHUNKS_PER_THREAD",
    "MACS_PER_UNIT",
    "PARALLEL_ELEMENTS",
    "PARALLEL_WORK",
    "SERIAL_WORK",
    "STREAM_BYTES_PER_UNIT",
    "THREAD_WORK",
    "blas_single_thread",
    "compile_notice",
    "run_chunks",
    "run_rows",
    "threads",
    "use_parallel",
]

#: The least work (edges x heads x channels, 1-2 ns each with the machine's
#: speed) worth a chunk of its own on another thread.
SERIAL_WORK = 1 << 15

#: Below this much work a kernel runs on the calling thread. Waking a pool
#: thread takes 25-170 us on a 2-vCPU virtual machine; in alternating runs
#: of the forward kernel (4 heads x 16 channels, 2 threads, 2-vCPU AMD EPYC)
#: splitting gained nothing at 2^16.2 units (73-144 us of work) and lost
#: 28 % when split in two, and gained 8-30 % from 2^16.8 units (8 chunks).
PARALLEL_WORK = 1 << 17

#: The least work worth waking one more thread for. Each woken thread costs
#: the caller more than its share of small work once there are many: on a
#: 16-core Intel Xeon (``bench/threads.py``), the 1024-graph ``small-batch``
#: layer (3.3 million units per edge pass) took 5.3 ms a step on 4 threads
#: and 8.2 ms on 16 with every thread woken.
THREAD_WORK = 1 << 19

#: How other passes count their work in those units, for the same cap (one
#: thread of that Xeon): ``small-batch``'s dense products took 0.036-0.044 ns
#: per multiply-add where its forward kernel took 1.1 ns per unit, and a
#: streaming pass moves about 16 bytes per nanosecond.
MACS_PER_UNIT = 32
STREAM_BYTES_PER_UNIT = 16

#: Streaming passes over arrays of at least this many elements (the
#: finiteness checks, the output bias, the bias gradients) run in blocks on
#: the team: one pass over 4 MiB of float32 takes 0.3-0.5 ms on one thread,
#: far above a thread's wake-up.
PARALLEL_ELEMENTS = 1 << 20

#: Equal chunks of rows per thread that a call's work is sized by: enough
#: for threads that finish early to take another (graphs with hubs have very
#: uneven rows), few enough that the per-chunk cost (a few microseconds)
#: stays small. The chunks themselves start bigger and shrink
#: (:func:`row_chunks`).
CHUNKS_PER_THREAD = 4

#: The last chunks of a call are this many times smaller than equal chunks
#: would be (but at least :data:`SERIAL_WORK`): the caller waits at the end
#: for the helpers' last chunks, on average half a chunk. With equal chunks
#: (4 per thread) the caller of a 2-thread step waited 241 us of a 3.8 ms
#: ``small-batch`` step and 18 ms of a ``large`` one; with chunks shrinking
#: to a quarter, 128 us and 11 ms (AMD EPYC Zen 4, 2 vCPUs).
TAIL_SPLIT = 4

_NOTHING = nullcontext()  # a shared no-op context for fast paths
_state = {"controller": None, "notice_given": False}
_pools = {}
_lock = threading.Lock()


def use_parallel(work):
    """Whether work of this size (edges x heads x channels) should run on several threads."""
    return work >= PARALLEL_WORK and numba.get_num_threads() > 1


def run_rows(kernel, count, args, work):
    """``kernel(start, stop, *args)`` over ``[0, count)``: at once, or in chunks on several threads.

    The kernel must release the GIL and write only what belongs to its
    rows; the chunks then give the same bits as one call over everything,
    for any thread count. Work is split into at most one chunk per
    :data:`SERIAL_WORK` (so moderate work wakes only the threads it can use),
    chunks that shrink towards the end (:func:`row_chunks`); work below
    :data:`PARALLEL_WORK` runs on the calling thread. Work just above it
    gets several chunks per thread, not one: a helper that wakes late then
    still takes its share, where one chunk each made the caller wait for it.
    Returns the kernel's return values, one per chunk, in no set order.
    """
    if work < PARALLEL_WORK:  # before asking Numba its thread count: that takes microseconds
        return [kernel(0, count, *args)]
    workers = _workers_for(work)
    pieces = min(count, workers * CHUNKS_PER_THREAD, work // max(SERIAL_WORK, 1))
    if workers <= 1 or pieces <= 1:
        return [kernel(0, count, *args)]
    chunks = row_chunks(count, workers, pieces, work)
    results = []  # list.append is atomic under the GIL
    _share(lambda start, stop: results.append(kernel(start, stop, *args)), chunks, workers)
    return results


def row_chunks(count, workers, pieces, work):
    """``[(start, stop), ...]`` covering ``[0, count)`` in order, largest first ("guided" scheduling).

    Each chunk takes ``1 / (2 workers)`` of the rows left, so the first is
    twice as big as one of :data:`CHUNKS_PER_THREAD` equal chunks per thread
    (``count / pieces``, ``pieces`` chunks), and the last ones
    :data:`TAIL_SPLIT` times smaller than those, but never below :data:`SERIAL_WORK`
    units of ``work`` (spread evenly over the rows): the thread that takes
    the last chunk then finishes soon after the others. Which thread runs a
    chunk, and where chunks end, never changes a result (:func:`run_rows`).
    """
    smallest = max(-(-count // (pieces * TAIL_SPLIT)), -(-count * SERIAL_WORK // max(work, 1)), 1)
    chunks = []
    start = 0
    while start < count:
        stop = start + max(smallest, -(-(count - start) // (2 * workers)))
        if count - stop < smallest:  # no last sliver of a chunk
            stop = count
        chunks.append((start, stop))
        start = stop
    return chunks


def _workers_for(work):
    """Threads to use for ``work``: Numba's count, at most one per :data:`THREAD_WORK` (at least 2)."""
    threads = numba.get_num_threads()
    if work is None or threads <= 2:
        return threads
    return min(threads, max(2, work // max(THREAD_WORK, 1)))


def _share(task, chunks, workers):
    """Run ``task(*chunk)`` for every chunk on the calling thread and up to ``workers - 1`` helper threads.

    Each thread takes the next chunk until none is left (hubs make chunks
    uneven); the calling thread works too, and returns only when every chunk
    is done, even if one raised: a failed chunk's exception (the first
    chunk's, if several failed) is raised after all the others ran. The
    helpers are this thread count's team (``_team.py``, which spins between
    tasks). A call from one of a team's helpers (a chunk's nested call), or
    while the team runs another call's task, runs its chunks on the calling
    thread: no call waits for a team that waits for it, and a helper, whose
    Numba thread count is the process default, never starts a second team.
    """
    if on_helper() or not team_for(numba.get_num_threads() - 1).try_run(task, chunks, workers):
        run_here(task, chunks)


def helpers():
    """Threads besides the calling one that :func:`submit` can run tasks on (Numba's count minus one)."""
    return numba.get_num_threads() - 1


def submit(task, *args):
    """Start ``task(*args)`` on a pool thread and return its Future (needs ``helpers() >= 1``).

    For work that overlaps with the caller's next step (the sampler picks a
    hop's later targets while the caller relabels the first ones); the
    task must release the GIL to run alongside.
    """
    return _pool(helpers()).submit(task, *args)


def _pool(size):
    key = (os.getpid(), size)  # a forked child gets its own threads
    pool = _pools.get(key)
    if pool is None:
        with _lock:
            pool = _pools.get(key)
            if pool is None:
                pool = _pools[key] = ThreadPoolExecutor(size, thread_name_prefix="gatfast")
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
    from ._validate import (
        check_int,  # here, not at the top: _validate runs its big checks on this module's team
    )

    n = check_int(n, "threads", 1)
    if n > numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"threads must be <= {numba.config.NUMBA_NUM_THREADS} on this machine, got {n}")
    old = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def _blas_libraries():
    """The BLAS libraries loaded in this process (threadpoolctl's controllers; found once, about 5 ms)."""
    found = _state["controller"]
    if found is None or found[0] != os.getpid():
        from threadpoolctl import ThreadpoolController

        libs = ThreadpoolController().select(user_api="blas").lib_controllers
        found = _state["controller"] = (os.getpid(), libs)
    return found[1]


#: Products smaller than this (rows x inputs x outputs) run without changing BLAS's
#: threads: OpenBLAS runs them on one thread anyway (its own cutoff is 4 x 65,536).
BLAS_SMALL = 1 << 18


_blas_hold = threading.local()  # depth of this thread's nested holds: only the outermost sets and restores
# a child forked inside a hold (which never leaves it there) starts with none
os.register_at_fork(after_in_child=lambda: _blas_hold.__dict__.clear())


class _BlasOneThread:
    """Every loaded BLAS at one thread for a block; the previous counts restored after.

    Nested holds on one thread cost nothing: a network holds BLAS once for a
    whole pass and its layers' own holds inside see the depth (asking each
    library its count through ctypes took about 7 us a hold).
    """

    __slots__ = ("_saved",)

    def __enter__(self):
        depth = getattr(_blas_hold, "depth", 0)
        _blas_hold.depth = depth + 1
        if depth:
            self._saved = ()
            return self
        try:
            self._saved = [(lib, lib.num_threads) for lib in _blas_libraries()]
            for lib, count in self._saved:
                if count != 1:
                    lib.set_num_threads(1)
        except BaseException:
            _blas_hold.depth = depth
            raise
        return self

    def __exit__(self, *exc):
        _blas_hold.depth -= 1
        for lib, count in self._saved:
            if count != 1:
                lib.set_num_threads(count)
        return False


def blas_single_thread(work=None):
    """Hold every loaded BLAS at one thread for a block, then restore the previous counts.

    Used around a layer's forward and backward pass, and once around a
    network's layers (the layers' holds inside it cost nothing): the dense products run
    either as one call or in row chunks on the thread team of
    :func:`run_chunks`, one single-threaded BLAS call per chunk, so BLAS's
    own worker threads (which busy-wait between calls) never compete with
    gatfast's threads or with each other for the cores; on a 2-core machine
    under load that competition made a 64-scene training step several times
    slower. A use costs several microseconds (about 7 on a 2-vCPU AMD EPYC:
    threadpoolctl asks each library its count); ``work`` (rows x inputs x
    outputs of the largest product) below :data:`BLAS_SMALL` gets a no-op
    context instead.
    """
    if work is not None and work < BLAS_SMALL:
        return _NOTHING
    return _BlasOneThread()


def run_chunks(task, chunks, work=None):
    """``[task(start, stop) for (start, stop) in chunks]``, spread over the Numba thread count.

    The results come back in chunk order whatever thread ran which chunk, so
    a caller that adds per-chunk partial sums in list order gets the same
    bits for any thread count. The team is per process: a forked child never
    waits on its parent's threads. ``work``, in the edge kernels' units
    (about a nanosecond each; see :data:`THREAD_WORK`), caps the threads
    woken; None uses them all.
    """
    workers = min(_workers_for(work), len(chunks))
    if workers <= 1:
        return [task(*c) for c in chunks]
    results = [None] * len(chunks)

    def one(start, stop, k):
        results[k] = task(start, stop)

    _share(one, [(start, stop, k) for k, (start, stop) in enumerate(chunks)], workers)
    return results


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


def compiled_or_cached(kernel):
    """Whether ``kernel`` (a Numba dispatcher) has run in this process or has a Numba cache index.

    A cache index stands for "loads in milliseconds, not seconds of compiling";
    it may hold other argument types only. Numba internals that moved count
    as cached: the caller then does what it did before this test existed.
    """
    try:
        return bool(kernel.signatures) or os.path.exists(kernel._cache._cache_file._index_path)
    except AttributeError:
        return True
