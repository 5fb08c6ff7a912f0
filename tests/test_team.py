"""gatfast._team: helpers that spin between tasks; kernels/spin.py: the atomic cells they wait on."""

import gc
import os
import signal
import threading
import time
import weakref

import numpy as np
import pytest

from gatfast import _runtime, _team
from gatfast.kernels.spin import add, finish_and_spin, publish, spin_at_least

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc")


@pytest.fixture
def spinning(monkeypatch):
    """Teams made in the test spin, whatever this machine's CPU count."""
    monkeypatch.setattr(_team, "usable_cpus", lambda: 64)


def _run(team, task, n, workers):
    assert team.try_run(task, [(k,) for k in range(n)], workers)


def test_the_spin_cells_count_publish_and_time_out():
    cells = np.zeros(16, np.int64)
    for amount in (1, 2, 3):
        add(cells, 3, amount)
    assert cells[3] == 6
    publish(cells, 0, 7, 8, 2)
    assert cells[0] == 7 and cells[8] == 2
    assert spin_at_least(cells, 3, 6, 1) == 6  # reached
    assert spin_at_least(cells, 3, 7, 1000) == 6  # not reached: returns after its iterations
    done = np.zeros(1, np.int64)
    # a task for 2 helpers takes ranks 0 and 1 at once, after marking the finished chunks
    assert finish_and_spin(done, 3, cells, 0, 8, 1, 6, 1000, 3) == 7
    assert done[0] == 3
    # rank 2 is left out: -1 - (the task's number) at the first look, not after the spin's time
    start = time.perf_counter()
    assert finish_and_spin(done, 0, cells, 0, 8, 2, 6, 10**7, 0) == -1 - 7
    assert time.perf_counter() - start < 0.05  # 10**7 pauses take 0.1-1 s
    assert finish_and_spin(done, 0, cells, 0, 8, 0, 7, 1000, 0) == -1 - 7  # nothing new: the time is up
    assert finish_and_spin(done, 0, cells, 0, 8, 0, 6, 0, 0) == 7  # no spin: one look all the same
    assert done[0] == 3
    with pytest.raises(Exception, match="int64"):
        add(np.zeros(4, np.int32), 0, 1)
    with pytest.raises(Exception, match="contiguous"):
        add(np.zeros(8, np.int64)[::2], 0, 1)


def test_pause_seconds_is_measured_once_and_plausible():
    first = _team.pause_seconds()
    assert 1e-10 < first < 1e-5
    assert _team.pause_seconds() == first


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("spin", [True, False])
def test_every_chunk_runs_once_over_many_quick_calls(monkeypatch, size, spin):
    # thousands of calls back to back, each chunk tiny: the helpers join and leave tasks at every moment
    monkeypatch.setattr(_team, "usable_cpus", lambda: 64 if spin else 1)
    team = _team.Team(size)
    assert (team._idle_spins > 0) == spin
    rng = np.random.default_rng(size)
    for call in range(1500):
        n = int(rng.integers(1, 12))
        counts = np.zeros(n, np.int64)
        names = set()

        def task(k):
            counts[k] += 1  # each chunk is one thread's, so no lock is needed
            names.add(threading.current_thread().name)

        workers = int(rng.integers(1, size + 3))
        _run(team, task, n, workers)
        assert (counts == 1).all(), f"call {call}: {counts}"
        assert len(names) <= max(1, min(workers, n))
        if call % 300 == 299:
            time.sleep(0.003)  # past the idle spin: the helpers sleep, and the next task wakes them


@pytest.mark.parametrize("spin", [True, False])
def test_a_sleeping_helper_is_woken_for_the_next_task(monkeypatch, spin):
    # the caller's chunk waits for the helper's: the call finishes only if the helper wakes and joins
    monkeypatch.setattr(_team, "usable_cpus", lambda: 64 if spin else 1)
    team = _team.Team(1)
    for _ in range(5):
        time.sleep(0.01)  # longer than the idle spin: the helper is asleep
        helper_ran = threading.Event()
        main = threading.current_thread()

        def task(k):
            if threading.current_thread() is main:
                assert helper_ran.wait(10), "the helper never woke"
            else:
                helper_ran.set()

        _run(team, task, 2, 2)


def test_helpers_take_part_and_the_caller_waits_for_their_chunks():
    team = _team.Team(1)
    ran = []

    def task(k):
        time.sleep(0.002)
        ran.append((k, threading.current_thread().name, time.perf_counter()))

    for _ in range(20):
        ran.clear()
        _run(team, task, 8, 2)
        returned = time.perf_counter()
        assert sorted(k for k, _, _ in ran) == list(range(8))
        assert max(t for _, _, t in ran) <= returned  # every chunk finished before run returned
        if len({name for _, name, _ in ran}) == 2:
            return
    pytest.fail("the helper never took a chunk")


def test_the_first_failed_chunk_is_raised_after_all_ran():
    team = _team.Team(2)
    ran = []

    def task(k):
        ran.append(k)
        if k in (2, 5):
            time.sleep(0.001 * (5 - k))  # chunk 5 fails first in time, chunk 2 first in order
            raise ValueError(f"chunk {k}")

    with pytest.raises(ValueError, match="chunk 2"):
        _run(team, task, 9, 3)
    assert sorted(ran) == list(range(9))
    ran.clear()
    with pytest.raises(ValueError, match="chunk 2"):  # the same rule on the calling thread alone
        _team.run_here(task, [(k,) for k in range(9)])
    assert ran == list(range(9))


def test_a_helper_chunk_that_raises_anything_is_raised_by_the_caller_and_the_helper_lives_on():
    team = _team.Team(1)
    main = threading.current_thread()
    helper_ran = threading.Event()

    def task(k):
        if threading.current_thread() is main:
            assert helper_ran.wait(10)
        else:
            helper_ran.set()
            raise SystemExit("a helper's chunk exited")  # not an Exception: the old helper thread died

    with pytest.raises(SystemExit, match="helper's chunk"):
        _run(team, task, 2, 2)
    assert all(thread.is_alive() for thread in team.threads)
    out = []
    _run(team, lambda k: out.append(k), 6, 2)
    assert sorted(out) == list(range(6))


def test_an_interrupted_caller_stops_the_helpers_and_waits_for_their_running_chunks():
    team = _team.Team(1)
    caller = threading.current_thread()
    running, finished = [], []
    helper_started = threading.Event()

    def task(k):
        if threading.current_thread() is caller:
            assert helper_started.wait(10)
            raise KeyboardInterrupt  # Ctrl-C arrives while the caller works
        helper_started.set()
        running.append(k)
        time.sleep(0.02)
        finished.append(k)

    with pytest.raises(KeyboardInterrupt):
        _run(team, task, 40, 2)
    returned = len(finished)
    assert returned >= 1 and sorted(finished) == sorted(running)  # no chunk of a helper left running
    assert returned < 39  # the helper took no more chunks once the caller stopped
    time.sleep(0.05)
    assert len(finished) == returned
    out = []
    _run(team, lambda k: out.append(k), 6, 2)  # the team still works
    assert sorted(out) == list(range(6))


def test_an_interrupted_caller_waits_for_a_slow_helper_while_a_fast_one_takes_every_ticket_left():
    # helper A runs a long chunk; helper B finishes quickly and then takes (and skips) every chunk left,
    # so the helpers' finished count passes what the caller first counted while A still runs
    team = _team.Team(2)
    caller = threading.current_thread()
    running, finished, names = [], [], set()
    both_started = threading.Barrier(3, timeout=10)

    def task(k):
        me = threading.current_thread()
        if me is caller:
            both_started.wait()
            raise KeyboardInterrupt
        if me.name not in names:
            slow = not names  # the first helper here runs the long chunk
            names.add(me.name)
            running.append(k)
            both_started.wait()
            time.sleep(0.3 if slow else 0.001)
            finished.append(k)

    for _ in range(5):
        running.clear(), finished.clear(), names.clear()
        both_started.reset()
        with pytest.raises(KeyboardInterrupt):
            _run(team, task, 60, 3)
        assert len(running) == 2
        assert sorted(finished) == sorted(running)  # neither helper's chunk was still running


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_ctrl_c_while_the_caller_waits_for_a_helper_is_raised_after_the_helper_is_done():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT is handled on the main thread")
    team = _team.Team(1)
    main = threading.main_thread()
    finished = []
    helper_started = threading.Event()

    def task(k):
        if threading.current_thread() is main:
            helper_started.wait(5)  # the other chunk is the helper's
        else:
            helper_started.set()
            time.sleep(0.2)  # the caller is waiting for this chunk by now
            signal.pthread_kill(main.ident, signal.SIGINT)
            time.sleep(0.2)
        finished.append(k)

    with pytest.raises(KeyboardInterrupt):
        _run(team, task, 2, 2)
    assert helper_started.is_set()
    assert len(finished) == 2  # the helper's chunk finished before the caller raised


@pytest.mark.skipif(_runtime.numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")
def test_a_busy_team_sends_other_callers_to_their_own_thread():
    names = []
    release = threading.Event()
    with _runtime.threads(2):
        team = _team.team_for(1)
        holder = threading.Thread(target=team.try_run, args=(lambda k: release.wait(10), [(0,)], 1))
        holder.start()  # another call's task holds the team
        try:
            for _ in range(500):
                if team.busy():
                    break
                time.sleep(0.01)
            assert team.busy()
            _runtime.run_rows(
                lambda a, b: names.append(threading.current_thread().name),
                800,
                (),
                100 * _runtime.SERIAL_WORK,
            )
        finally:
            release.set()
            holder.join(10)
    assert len(names) == len(
        _runtime.row_chunks(800, 2, 2 * _runtime.CHUNKS_PER_THREAD, 100 * _runtime.SERIAL_WORK)
    )
    assert set(names) == {threading.current_thread().name}


def test_a_nested_call_on_a_helper_runs_there_and_starts_no_team(monkeypatch):
    # a helper's Numba thread count is the process default: a nested call must not use it for a team
    team = _team.Team(1)
    monkeypatch.setattr(_runtime.numba, "get_num_threads", lambda: 9)
    teams_before = set(_team._teams)
    inner = []
    main = threading.current_thread()
    helper_ran = threading.Event()

    def task(k):
        if threading.current_thread() is main:
            assert helper_ran.wait(10)
            return
        helper_ran.set()
        _runtime.run_rows(
            lambda a, b: inner.append(threading.current_thread().name), 800, (), 100 * _runtime.SERIAL_WORK
        )

    _run(team, task, 2, 2)
    assert inner and set(inner) == {team.threads[0].name}
    assert set(_team._teams) == teams_before


def test_teams_are_per_size_and_their_threads_are_named_so():
    a = _team.team_for(2)
    assert _team.team_for(2) is a and _team.team_for(3) is not a
    assert [t.name for t in a.threads] == ["gatfast-team2-0", "gatfast-team2-1"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_team_is_being_made_gets_teams_of_its_own():
    _team.team_for(1)
    with _team._lock:  # another thread is making a team when the process forks
        pid = os.fork()
        if pid == 0:  # the child: a new lock, no teams, and a team of its own that works
            code = 1
            try:
                if not _team._lock.locked() and not _team._teams:
                    out = []
                    if _team.team_for(1).try_run(lambda k: out.append(k), [(k,) for k in range(4)], 2):
                        code = 0 if sorted(out) == list(range(4)) else 3
            finally:
                os._exit(code)
    deadline = time.time() + 30
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the forked child hung")


def _holding(arr):
    return lambda k: arr.__setitem__(k, 2.0)  # the closure holds the array, as a kernel's arguments would


@pytest.mark.parametrize("workers", [2, 1])  # 1: the helper is left out, and sleeps
def test_the_team_keeps_no_task_alive_after_the_call(spinning, workers):
    team = _team.Team(1)
    big = np.ones(1000)
    ref = weakref.ref(big)
    task = _holding(big)
    _run(team, task, 8, workers)
    del task, big
    time.sleep(0.01)  # the helper has returned to its spin or its sleep
    gc.collect()
    assert ref() is None


def test_helpers_left_out_of_a_task_sleep_and_a_bigger_task_wakes_them(spinning):
    team = _team.Team(3)
    for _ in range(5):  # tasks for one helper: helpers 1 and 2 are left out
        _run(team, lambda k: None, 4, 2)
    for _ in range(200):
        if team._asleep[1] and team._asleep[2]:
            break
        time.sleep(0.005)
    assert team._asleep[1:] == [True, True]
    for _ in range(20):
        names = set()

        def task(k):
            time.sleep(0.005)
            names.add(threading.current_thread().name)

        _run(team, task, 16, 4)
        if len(names) == 4:
            return
    pytest.fail(f"the sleeping helpers never took part: {names}")


def _thread_cpu_ticks(thread):
    fields = open(f"/proc/self/task/{thread.native_id}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@needs_proc
@pytest.mark.parametrize(
    "short_task", [1.0, 0.0]
)  # 0: every task counts as long, and no helper spins after it
def test_helpers_take_later_tasks_and_use_no_cpu_when_idle(spinning, monkeypatch, short_task):
    monkeypatch.setattr(_team, "SHORT_TASK_SECONDS", short_task)
    team = _team.Team(1)
    names = []
    for _ in range(30):
        _run(team, lambda k: (time.sleep(0.002), names.append(threading.current_thread().name)), 6, 2)
    assert names.count(team.threads[0].name) >= 30  # the helper took part in the calls, not only the first
    time.sleep(0.05)  # past its idle spin
    before = _thread_cpu_ticks(team.threads[0])
    time.sleep(0.5)
    assert (
        _thread_cpu_ticks(team.threads[0]) - before <= 5
    )  # asleep, not spinning (100 ticks a second at most)
