"""The helper threads that run chunks of a kernel beside the calling thread (``_runtime.run_rows``).

A pool of sleeping threads (``concurrent.futures``) made every parallel
pass pay two wake-ups: the helper's, 25-60 us after the task was posted on
a 2-vCPU virtual machine (a futex wake, then the vCPU's own), and the
caller's, when it slept on the helper's last chunk. On ``small-batch``
(five passes of 0.3-1 ms each per step, 2 threads, 2-vCPU AMD EPYC) the
helper started 40-48 us after the pass was posted and the caller returned
36-38 us after the helper's last chunk (medians). This team's helpers wait for the next
task spinning (:data:`IDLE_SPIN_SECONDS`, then they sleep; only after short
tasks, :data:`SHORT_TASK_SECONDS`) and the caller spins for their last
chunks (:data:`WAIT_SPIN_SECONDS`), both in nogil code (``kernels/spin.py``):
15 us and 12-13 us there (19-22 us and 6-11 us in a slower phase of that
machine, in which the pool's helper started 76 us after the post).

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
from .kernels.spin import add, finish_and_spin, publish, spin_at_least

__all__ = [
    "GIL_DELAY_SECONDS",
    "IDLE_SPIN_SECONDS",
    "SHORT_TASK_SECONDS",
    "WAIT_SPIN_SECONDS",
    "Team",
    "on_helper",
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
#: starts). Asked at once, the helper slept on the GIL and held it 23 us after
#: seeing the task, 27 us after the post; with this wait, 6 and 9 us (medians,
#: ``small-batch``, 2-vCPU AMD EPYC). All helpers wait as long: equal waits
#: gave 0.86x the old pool's time on ``small-batch`` at 16 threads, waits
#: staggered by rank (helper ``r`` waiting ``r + 1`` times as long, so that
#: they ask for the GIL one after another) 0.92x, and 0.88x / 0.87x at 4
#: (16-core Intel Xeon, one process, six rounds of each alternating).
GIL_DELAY_SECONDS = 5e-6

_SEQ, _SLOTS = 0, 8  # cells on separate cache lines: the task's number, the helpers it takes
_teams = {}
_lock = threading.Lock()
_pause = []
_helper = threading.local()  # .team: set on a team's own threads


def _forget_teams():
    # a child forked while another thread held _lock (or ran a task) starts afresh: its parent's
    # threads do not exist in it
    global _lock
    _lock = threading.Lock()
    _teams.clear()
    _helper.team = None  # a child forked from a helper is not one


os.register_at_fork(after_in_child=_forget_teams)


def pause_seconds():
    """Seconds per iteration of the spin loops on this machine (measured once per process, in about 2 ms)."""
    if not _pause:
        cells = np.zeros(16, np.int64)
        # every spin kernel compiled or loaded here, before timing, not in a helper at a rare moment
        spin_at_least(cells, 0, 1, 1)
        add(cells, 1, 0)
        publish(cells, 2, 0, 3, 0)
        finish_and_spin(cells, 0, cells, 0, 8, 0, 0, 1, 0)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            spin_at_least(cells, 0, 1, 20_000)
            best = min(best, (time.perf_counter() - start) / 20_000)
        _pause.append(max(best, 1e-9))
    return _pause[0]


def team_for(size):
    """This process's team of ``size`` helpers (made on first use)."""
    team = _teams.get(size)
    if team is None:
        pause_seconds()  # outside the lock: the first call may load the spin kernels
        with _lock:
            team = _teams.get(size)
            if team is None:
                team = _teams[size] = Team(size)
    return team


def on_helper():
    """Whether the calling thread is one of a team's helpers (a chunk's nested call then runs where it is)."""
    return getattr(_helper, "team", None) is not None


def run_here(task, chunks):
    """Every chunk on the calling thread, with :meth:`Team.try_run`'s error rule."""
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

    __slots__ = ("chunks", "done", "errors", "seq", "started", "stop", "task", "ticket", "wait_over")

    def __init__(self, task, chunks, seq):
        self.task = task
        self.chunks = chunks
        self.seq = seq
        self.ticket = itertools.count()  # next() is atomic under the GIL
        self.started = []  # the helpers' chunks (list.append is atomic under the GIL)
        self.errors = []  # (chunk, exception)
        self.stop = False  # the caller was interrupted: helpers take no more chunks
        self.done = np.zeros(1, np.int64)  # chunks the helpers finished (atomic adds, kernels/spin.py)
        self.wait_over = False  # the caller saw every chunk the helpers took done


class Team:
    """``size`` daemon threads that take chunks of the posted task (see the module docstring)."""

    def __init__(self, size):
        self.size = size
        self._run_lock = threading.Lock()  # held by the one caller whose task the team runs
        self._cells = np.zeros(16, np.int64)
        self._seq = 0
        self._job = None
        self._wake_lock = threading.Lock()
        self._wakes = [threading.Condition(self._wake_lock) for _ in range(size)]  # a helper each
        self._asleep = [False] * size
        self._finished = threading.Condition()  # the caller asleep on the helpers' last chunks
        self._caller_sleeps = False
        pause = pause_seconds()
        spin = size + 1 <= usable_cpus()
        self._idle_spins = int(IDLE_SPIN_SECONDS / pause) if spin else 0
        self._wait_spins = int(WAIT_SPIN_SECONDS / pause) if spin else 0
        self._delay_spins = int(GIL_DELAY_SECONDS / pause)
        self._none = np.zeros(1, np.int64)
        self.threads = [
            threading.Thread(target=self._serve, args=(rank,), daemon=True, name=f"gatfast-team{size}-{rank}")
            for rank in range(size)
        ]
        for thread in self.threads:
            thread.start()

    def busy(self):
        """Whether a call's task holds the team."""
        return self._run_lock.locked()

    def try_run(self, task, chunks, workers):
        """``task(*chunk)`` for every chunk, on the calling thread and up to ``workers - 1`` helpers.

        Returns False at once, running nothing, if another call's task holds
        the team. Else the caller works too, taking the next chunk until none
        is left, and returns True once every chunk a helper took is done. A
        failed chunk does not stop the others: the first failed chunk's
        exception is raised after all of them ran. If the caller is
        interrupted (Ctrl-C), the helpers take no more chunks and the caller
        re-raises once the chunks they are running are done (a second Ctrl-C
        too waits for those, at most a chunk's time).
        """
        if not self._run_lock.acquire(blocking=False):
            return False
        try:
            self._run(task, chunks, workers)
        finally:
            self._run_lock.release()
        return True

    def _run(self, task, chunks, workers):
        n = len(chunks)
        own = 0
        clean = False  # the caller's loop ended normally: it took exactly `own` tickets
        self._seq += 1
        job = _Job(task, chunks, self._seq)
        try:
            self._job = job
            slots = max(0, min(workers, self.size + 1, n) - 1)
            publish(self._cells, _SEQ, job.seq, _SLOTS, slots)
            if True in self._asleep[:slots]:
                with self._wake_lock:
                    for rank in range(slots):
                        if self._asleep[rank]:
                            self._wakes[rank].notify()
            for k in job.ticket:
                if k >= n:
                    break
                own += 1
                try:
                    task(*chunks[k])
                except Exception as exc:  # noqa: BLE001 - raised once all chunks ran
                    job.errors.append((k, exc))
            clean = True
        finally:
            self._job = None  # the task's arrays are not kept alive by the team
            if not clean:  # interrupted: the helpers take no more chunks, and those they took are waited for
                job.stop = True
            while True:  # an interrupt inside the wait is raised after it (see _wait)
                try:
                    self._wait(job, (lambda: n - own) if clean else (lambda: len(job.started)))
                    break
                except BaseException:
                    if job.wait_over:
                        raise
                    job.stop = True
        if job.errors:
            error = min(job.errors, key=lambda item: item[0])[1]
            job.errors.clear()  # no cycle through the traceback's frames keeps the task alive
            raise error

    def _wait(self, job, target):
        """Wait until the helpers' finished chunks reach ``target()``; an interrupt is raised after it.

        ``done`` is read before ``target()``: after an interrupt the target
        (the chunks the helpers took) can still grow, and a helper adds its
        chunks to ``done`` only once it has run them all, so the wait ends only
        when no helper holds a chunk it may still be running.
        """
        interrupted = None
        spins, pause = self._wait_spins, 2e-5
        while True:
            try:
                if spin_at_least(job.done, 0, target(), spins) >= target():
                    break
                spins = 0  # spun once; from here on, short sleeps growing to 2 ms
                with self._finished:
                    self._caller_sleeps = True
                    try:
                        # short at first: a helper that saw the flag unset before the caller set it
                        # marks its chunks without waking the caller
                        self._finished.wait(pause)
                    finally:
                        self._caller_sleeps = False
                pause = min(2 * pause, 2e-3)
            except BaseException as exc:  # noqa: BLE001 - the helpers write the caller's arrays: wait for them
                job.stop = True
                interrupted = interrupted or exc
        job.wait_over = True
        if interrupted is not None:
            raise interrupted

    def _serve(self, rank):
        """A helper: spin (then sleep) until a task takes it, run chunks of it, repeat.

        A helper that a task leaves out (small work takes fewer threads) sleeps
        until one takes it, rather than spin beside the threads that work.
        """
        _helper.team = self
        wake = self._wakes[rank]
        seen, finished, done, spins = 0, 0, self._none, self._idle_spins
        while True:
            got = finish_and_spin(
                done, finished, self._cells, _SEQ, _SLOTS, rank, seen, spins, self._delay_spins
            )
            finished, done = 0, self._none
            if got < 0:  # no task for this helper in its spin: sleep until one takes it
                seen = -1 - got
                with wake:
                    self._asleep[rank] = True
                    while self._cells[_SEQ] == seen or rank >= self._cells[_SLOTS]:
                        wake.wait()
                    self._asleep[rank] = False
                continue  # the spin sees the new task at once
            seen = got
            start = time.perf_counter()
            finished, done = self._take(got)
            spins = self._idle_spins if time.perf_counter() - start < SHORT_TASK_SECONDS else 0
            if finished and self._caller_sleeps:  # mark the chunks here and wake the caller
                add(done, 0, finished)
                finished = 0
                with self._finished:
                    self._finished.notify_all()

    def _take(self, seq):
        """Run chunks of task ``seq`` until none is left: ``(chunks run, the task's done cell)``.

        The chunks are marked done by the caller of this (``finish_and_spin``
        after the GIL is released), all at once, so that this helper does not
        hold the GIL just as the caller, woken by that mark, wants it. A
        chunk's exception of any kind is kept for the caller, which raises
        it: a helper never dies with a chunk unmarked.
        """
        job = self._job  # a local: the team keeps no task alive after its call (nor does a helper)
        if job is None or job.seq != seq:
            return 0, self._none
        n = len(job.chunks)
        ran = 0
        for k in job.ticket:
            if k >= n:
                break
            ran += 1
            try:
                job.started.append(k)
                if not job.stop:
                    job.task(*job.chunks[k])
            except BaseException as exc:  # noqa: BLE001 - raised by the caller once all chunks ran
                job.errors.append((k, exc))
        return ran, job.done
