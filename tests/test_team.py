"""gatfast._team: helpers that spin between tasks; kernels/spin.py: the atomic cells they wait on."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from gatfast import _runtime, _team
from gatfast.kernels.spin import add_one, finish_and_spin, publish, spin_at_least


def test_the_spin_cells_count_publish_and_time_out():
    cells = np.zeros(16, np.int64)
    for _ in range(5):
        add_one(cells, 3)
    assert cells[3] == 5
    publish(cells, 0, 7, 8, 2)
    assert cells[0] == 7 and cells[8] == 2
    assert spin_at_least(cells, 3, 5, 1) == 5  # reached
    assert spin_at_least(cells, 3, 6, 1000) == 5  # not reached: returns after its iterations
    done = np.zeros(1, np.int64)
    # a task for 2 helpers takes ranks 0 and 1 at once
    for left_out_spins in (0, 1):
        assert finish_and_spin(done, 1, cells, 0, 8, 1, 6, 1000, 3, left_out_spins) == 7
    assert done[0] == 2  # each finished chunk was marked first
    # rank 2 is not taken: -1 - (the newest number seen), at once or when the spin is over
    assert (
        finish_and_spin(done, 0, cells, 0, 8, 2, 6, 10**9, 0, 0) == -1 - 7
    )  # 10**9 pauses: would not return
    assert finish_and_spin(done, 0, cells, 0, 8, 2, 6, 1000, 0, 1) == -1 - 7
    assert finish_and_spin(done, 0, cells, 0, 8, 0, 7, 1000, 0, 0) == -1 - 7  # nothing new
    assert done[0] == 2
    with pytest.raises(Exception, match="int64"):
        add_one(np.zeros(4, np.int32), 0)


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
        with team.lock:
            team.run(task, [(k,) for k in range(n)], workers)
        assert (counts == 1).all(), f"call {call}: {counts}"
        assert len(names) <= max(1, min(workers, n))
        if call % 300 == 299:
            time.sleep(0.003)  # past the idle spin: the helpers sleep, and the next task wakes them


def test_helpers_take_part_and_the_caller_waits_for_their_chunks():
    team = _team.Team(1)
    ran = []

    def task(k):
        time.sleep(0.002)
        ran.append((k, threading.current_thread().name, time.perf_counter()))

    for _ in range(20):
        ran.clear()
        with team.lock:
            team.run(task, [(k,) for k in range(8)], 2)
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

    with team.lock, pytest.raises(ValueError, match="chunk 2"):
        team.run(task, [(k,) for k in range(9)], 3)
    assert sorted(ran) == list(range(9))
    ran.clear()
    with pytest.raises(ValueError, match="chunk 2"):  # the same rule on the calling thread alone
        _team.run_here(task, [(k,) for k in range(9)])
    assert ran == list(range(9))


def test_an_interrupted_caller_stops_the_helpers_and_waits_for_their_running_chunks():
    team = _team.Team(1)
    caller = threading.current_thread()
    running, finished = [], []

    def task(k):
        if threading.current_thread() is caller and k > 0:
            raise KeyboardInterrupt  # Ctrl-C arrives while the caller works
        running.append(k)
        time.sleep(0.02)
        finished.append(k)

    with team.lock, pytest.raises(KeyboardInterrupt):
        team.run(task, [(k,) for k in range(40)], 2)
    returned = len(finished)
    assert sorted(finished) == sorted(running)  # no chunk of a helper was left running
    assert len(finished) < 40  # the helper took no more chunks once the caller stopped
    time.sleep(0.05)
    assert len(finished) == returned
    out = []
    with team.lock:  # the team still works
        team.run(lambda k: out.append(k), [(k,) for k in range(6)], 2)
    assert sorted(out) == list(range(6))


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_ctrl_c_while_the_caller_waits_for_a_helper_is_raised_after_the_helper_is_done():
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

    with team.lock, pytest.raises(KeyboardInterrupt):
        team.run(task, [(0,), (1,)], 2)
    assert helper_started.is_set()
    assert len(finished) == 2  # the helper's chunk finished before the caller raised


@pytest.mark.skipif(_runtime.numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")
def test_a_busy_team_sends_other_callers_to_their_own_thread():
    names = []
    with _runtime.threads(2):
        team = _team.team_for(1)
        with team.lock:  # another call holds the team: these chunks run here, at once
            _runtime.run_rows(
                lambda a, b: names.append(threading.current_thread().name),
                800,
                (),
                100 * _runtime.SERIAL_WORK,
            )
    assert len(names) == 2 * _runtime.CHUNKS_PER_THREAD
    assert set(names) == {threading.current_thread().name}


def test_teams_are_per_process_and_per_size():
    a = _team.team_for(2)
    assert _team.team_for(2) is a and _team.team_for(3) is not a
    assert (os.getpid(), 2) in _team._teams


def test_the_team_keeps_no_task_alive_after_the_call():
    import gc
    import weakref

    team = _team.Team(1)
    big = np.ones(1000)
    ref = weakref.ref(big)

    def holding(arr):
        return lambda k: arr.__setitem__(k, 2.0)  # the closure holds the array, as a kernel's arguments would

    task = holding(big)
    with team.lock:
        team.run(task, [(k,) for k in range(8)], 2)
    del task, big
    time.sleep(0.01)  # the helper has returned to its spin or its sleep
    gc.collect()
    assert ref() is None


def test_helpers_left_out_of_a_task_sleep_and_a_bigger_task_wakes_them(monkeypatch):
    monkeypatch.setattr(_team, "usable_cpus", lambda: 64)  # a team that spins, whatever this machine has
    team = _team.Team(3)
    for _ in range(5):  # tasks for one helper: helpers 1 and 2 are left out
        with team.lock:
            team.run(lambda k: None, [(k,) for k in range(4)], 2)
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

        with team.lock:
            team.run(task, [(k,) for k in range(16)], 4)
        if len(names) == 4:
            return
    pytest.fail(f"the sleeping helpers never took part: {names}")


def _thread_cpu_ticks(thread):
    fields = open(f"/proc/self/task/{thread.native_id}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc")
@pytest.mark.parametrize(
    "short_task", [1.0, 0.0]
)  # 0: every task counts as long, and no helper spins after it
def test_helpers_take_later_tasks_and_use_no_cpu_when_idle(monkeypatch, short_task):
    monkeypatch.setattr(_team, "usable_cpus", lambda: 64)
    monkeypatch.setattr(_team, "SHORT_TASK_SECONDS", short_task)
    team = _team.Team(1)
    helper = next(
        t
        for t in threading.enumerate()
        if t.name == "gatfast-0" and t.native_id is not None and t._target.__self__ is team
    )
    names = []
    for _ in range(30):
        with team.lock:
            team.run(
                lambda k: (time.sleep(0.002), names.append(threading.current_thread().name)),
                [(k,) for k in range(6)],
                2,
            )
    assert names.count("gatfast-0") >= 30  # the helper took part in the calls, not only in the first
    time.sleep(0.05)  # past its idle spin
    before = _thread_cpu_ticks(helper)
    time.sleep(0.5)
    assert _thread_cpu_ticks(helper) - before <= 5  # asleep, not spinning (100 ticks a second at most)
