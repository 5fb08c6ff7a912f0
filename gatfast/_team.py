"""The helper threads that run chunks of a kernel beside the calling thread (``_runtime.run_rows``).

A pool of sleeping threads (``concurrent.futures``) made every parallel
pass pay two wake-ups: the helper's, 25-60 us after the task was posted on
a 2-vCPU virtual machine (a futex wake, then the vCPU's own), and the
caller's, when it slept on the helper's last chunk. On ``small-batch``
(five passes of 0.3-1 ms each per step) those came to 40-50 us at the start
of each pass and 35 us at its end. This team's helpers wait for the next
task spinning (:data:`IDLE_SPIN_SECONDS`, then they sleep; only after short
tasks, :data:`SHORT_TASK_SECONDS`) and the caller spins for their last
chunks (:data:`WAIT_SPIN_SECONDS`), both in nogil code (``kernels/spin.py``):
there a helper started 15 us after the task was posted and the caller
returned 12 us after the last chunk (medians).

Spinning costs a core, so a team spins only when it and the caller fit in
the CPUs this process may use; otherwise its helpers sleep between tasks
(as the pool did). One task runs on a team at a time: a second caller (another
thread, or a chunk that itself calls ``run_rows``) runs its chunks on its
own thread instead of waiting, so no call ever waits for a team that waits
for it. A forked child gets its own teams.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import numpy as np

from ._cpus import usable_cpus
from .kernels.spin import add_one, finish_and_spin, publish, spin_at_least

__all__ = [
    "GIL_DELAY_SECONDS",
    "IDLE_SPIN_SECONDS",
    "SHORT_TASK_SECONDS",
    "WAIT_SPIN_SECONDS",
    "Team",
    "run_here",
    "team_for",
]

#: How long a helper spins for the next task before it sleeps: longer than
#: the Python between a step's passes (50-300 us on ``small-batch``), short
#: enough that a core is not held long once the work stops.
IDLE_SPIN_SECONDS = 1e-3

#: A helper spins after a task only if its part of the task took less than
#: this: after longer ones a wake-up (25-60 us) is under 2-3 % of the next task
#: of that size, and the core is left to the caller's work between tasks (the
#: vCPUs of a virtual machine may share a physical core).
SHORT_TASK_SECONDS = 2e-3

#: How long the caller spins for the helpers' last chunks before it sleeps.
WAIT_SPIN_SECONDS = 2e-4

#: How long a helper that saw a task waits before it asks for the GIL: the
#: caller holds it for 2-5 us after posting (until its own chunk's kernel
#: starts). Asked sooner, the helper slept on the GIL and started 25 us after
#: the post instead of 9 (median, ``small-batch``, 2-vCPU AMD EPYC). All
#: helpers wait as long: waits staggered by rank (helper ``r`` waiting ``r +
#: 1`` times as long, so that they ask for the GIL one after another) gave
#: 0.92x the old pool's time on ``small-batch`` at 16 threads where equal
#: waits gave 0.86x, and 0.87x / 0.88x at 4 (16-core Intel Xeon, one
#: process, six rounds of each alternating).
GIL_DELAY_SECONDS = 5e-6

_SEQ, _SLOTS = 0, 8  # cells on separate cache lines: the task's number, the helpers it takes
_teams = {}
_lock = threading.Lock()
_pause = []


def pause_seconds():
    """Seconds per iteration of the spin loops on this machine (measured once per process, about 2 ms)."""
    if not _pause:
        cells = np.zeros(16, np.int64)
        spin_at_least(cells, 0, 1, 1)  # compiled or loaded before timing
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            spin_at_least(cells, 0, 1, 20_000)
            best = min(best, (time.perf_counter() - start) / 20_000)
        _pause.append(max(best, 1e-9))
    return _pause[0]


def team_for(size):
    """This process's team of ``size`` helpers (made on first use)."""
    key = (os.getpid(), size)  # a forked child gets its own threads
    team = _teams.get(key)
    if team is None:
        with _lock:
            team = _teams.get(key)
            if team is None:
                team = _teams[key] = Team(size)
    return team


def run_here(task, chunks):
    """Every chunk on the calling thread, with :meth:`Team.run`'s error rule."""
    errors = []
    for k, chunk in enumerate(chunks):
        try:
            task(*chunk)
        except Exception as exc:  # noqa: BLE001 - the other chunks still run; raised once all are done
            errors.append((k, exc))
    if errors:
        raise errors[0][1]


class _Job:
    """One call's chunks; the helpers that join it count their chunks in ``done``."""

    __slots__ = ("chunks", "done", "errors", "seq", "started", "stop", "task", "ticket")

    def __init__(self, task, chunks, seq):
        self.task = task
        self.chunks = chunks
        self.seq = seq
        self.ticket = itertools.count()  # next() is atomic under the GIL
        self.started = []  # the helpers' chunks (list.append is atomic under the GIL)
        self.errors = []  # (chunk, exception)
        self.stop = False  # the caller was interrupted: helpers take no more chunks
        self.done = np.zeros(1, np.int64)  # chunks the helpers finished (atomic adds, kernels/spin.py)


class Team:
    """``size`` daemon threads that take chunks of the posted task (see the module docstring)."""

    def __init__(self, size):
        self.size = size
        self.lock = threading.Lock()  # held by the one caller whose task the team runs
        self._cells = np.zeros(16, np.int64)
        self._seq = 0
        self._job = None
        wake = threading.Lock()
        self._wakes = [threading.Condition(wake) for _ in range(size)]  # one per helper, one lock
        self._asleep = [False] * size
        self._spin_left_out = False  # a helper left out of a task sleeps (see _serve)
        self._finished = threading.Condition()  # the caller asleep on the helpers' last chunks
        self._caller_sleeps = False
        pause = pause_seconds()
        spin = size + 1 <= usable_cpus()
        self._idle_spins = int(IDLE_SPIN_SECONDS / pause) if spin else 0
        self._wait_spins = int(WAIT_SPIN_SECONDS / pause) if spin else 0
        self._delay_spins = int(GIL_DELAY_SECONDS / pause)
        self._none = np.zeros(1, np.int64)
        for rank in range(size):
            threading.Thread(target=self._serve, args=(rank,), daemon=True, name=f"gatfast-{rank}").start()

    def run(self, task, chunks, workers):
        """``task(*chunk)`` for every chunk, on the calling thread and up to ``workers - 1`` helpers.

        The caller must hold :attr:`lock`. It works too, taking the next
        chunk until none is left, and returns once every chunk a helper took
        is done. A failed chunk does not stop the others: the first failed
        chunk's exception is raised after all of them ran. If the caller is
        interrupted (Ctrl-C), the helpers take no more chunks and the caller
        re-raises once the chunks they are running are done.
        """
        self._seq += 1
        job = self._job = _Job(task, chunks, self._seq)
        slots = min(workers, self.size + 1, len(chunks)) - 1
        publish(self._cells, _SEQ, job.seq, _SLOTS, slots)
        if True in self._asleep[:slots]:
            with self._wakes[0]:
                for rank in range(slots):
                    if self._asleep[rank]:
                        self._wakes[rank].notify()
        n = len(chunks)
        own = 0
        try:
            for k in iter(job.ticket.__next__, None):
                if k >= n:
                    break
                own += 1
                try:
                    task(*chunks[k])
                except Exception as exc:  # noqa: BLE001 - raised once all chunks ran
                    job.errors.append((k, exc))
        except BaseException:
            job.stop = True  # before counting the helpers' chunks: a later one sees it and runs nothing
            self._wait(job, lambda: len(job.started))
            raise
        finally:
            self._job = None  # the task's arrays are not kept alive by the team
        self._wait(job, lambda: n - own)
        if job.errors:
            raise min(job.errors, key=lambda item: item[0])[1]

    def _wait(self, job, target):
        """Wait until the helpers' finished chunks reach ``target()``; not cut short by Ctrl-C."""
        interrupted = None
        while True:
            try:
                want = target()
                if spin_at_least(job.done, 0, want, self._wait_spins) >= want:
                    break
                with self._finished:
                    self._caller_sleeps = True
                    try:
                        while job.done[0] < want:
                            self._finished.wait(0.002)  # also bounds a wake-up lost to a helper's spin
                    finally:
                        self._caller_sleeps = False
                break
            except BaseException as exc:  # noqa: BLE001 - the helpers write the caller's arrays: wait for them
                job.stop = True
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def _serve(self, rank):
        """A helper: spin (then sleep) until a task takes it, run chunks of it, repeat.

        A helper that a task leaves out (small work takes fewer threads) sleeps
        until one takes it, rather than spin beside the threads that work: on
        16 cores, ``small-batch``'s passes take 6 threads, and 9 helpers
        spinning beside them (on a machine whose vCPUs may share cores) made the
        step slower than the sleeping pool.
        """
        cells, none, wake = self._cells, self._none, self._wakes[rank]
        seen, done, finished, spins = 0, none, 0, self._idle_spins
        while True:
            got = finish_and_spin(
                done,
                finished,
                cells,
                _SEQ,
                _SLOTS,
                rank,
                seen,
                spins,
                self._delay_spins,
                self._spin_left_out,
            )
            done, finished = none, 0
            if got < 0:  # no task for this helper in its spin: sleep until one takes it
                seen = -1 - got
                with wake:
                    self._asleep[rank] = True
                    while cells[_SEQ] == seen or rank >= cells[_SLOTS]:
                        wake.wait()
                    self._asleep[rank] = False
                continue  # the spin sees the new task at once
            seen = got
            job = self._job
            if job is None or job.seq != got:
                continue
            start = time.perf_counter()
            finished, done = self._take(job), job.done
            job = None  # nor by a helper asleep
            spins = self._idle_spins if time.perf_counter() - start < SHORT_TASK_SECONDS else 0
            if finished and self._caller_sleeps:  # mark the last chunk here and wake the caller
                add_one(done, 0)
                finished = 0
                with self._finished:
                    self._finished.notify_all()

    def _take(self, job):
        """Run chunks of ``job`` until none is left; 1 if the last one is still to be marked done.

        Every chunk but the last is marked here; the last is marked by
        ``finish_and_spin`` after the GIL is released, so that this helper
        does not hold it just as the caller, woken by that mark, wants it.
        """
        n = len(job.chunks)
        k = next(job.ticket)
        if k >= n:
            return 0
        while True:
            job.started.append(k)
            try:
                if not job.stop:
                    job.task(*job.chunks[k])
            except Exception as exc:  # noqa: BLE001 - raised by the caller once all chunks ran
                job.errors.append((k, exc))
            except BaseException:
                add_one(job.done, 0)
                raise
            k = next(job.ticket)
            if k >= n:
                return 1
            add_one(job.done, 0)
