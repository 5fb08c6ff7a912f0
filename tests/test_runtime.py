"""gatfast._runtime: chunked runs on threads, the BLAS thread limit, the thread-count setting."""

import os
import threading
import time

import numba
import numpy as np
import pytest
from threadpoolctl import ThreadpoolController

from gatfast import CSRGraph, GATv2Layer, _runtime, _team

needs_two_threads = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")


def test_run_rows_covers_every_row_once_in_chunks():
    seen = []
    lock = threading.Lock()

    def kernel(start, stop, out):
        with lock:
            seen.append((start, stop))
        out[start:stop] += 1

    out = np.zeros(1000)
    with _runtime.threads(min(2, numba.config.NUMBA_NUM_THREADS)):
        _runtime.run_rows(kernel, 1000, (out,), work=100 * _runtime.SERIAL_WORK)
    assert (out == 1).all()
    if numba.config.NUMBA_NUM_THREADS >= 2:
        assert sorted(seen) == _runtime.row_chunks(
            1000, 2, 2 * _runtime.CHUNKS_PER_THREAD, 100 * _runtime.SERIAL_WORK
        )
    seen.clear()
    _runtime.run_rows(kernel, 1000, (out,), work=_runtime.SERIAL_WORK - 1)  # small: one call
    assert seen == [(0, 1000)]


def _split_cases():
    """(workers, count, units per row) that run_rows splits (more than one piece)."""
    for workers in (2, 3, 16):
        for count in (2, 5, 64, 800, 20_399, 200_000):
            for units_per_row in (1, 50, 1000, 10**5):
                work = count * units_per_row
                if min(count, workers * _runtime.CHUNKS_PER_THREAD, work // _runtime.SERIAL_WORK) > 1:
                    yield workers, count, units_per_row


@pytest.mark.parametrize(("workers", "count", "units_per_row"), list(_split_cases()))
def test_row_chunks_cover_the_rows_in_order_shrinking_to_a_tail_of_at_least_serial_work(
    workers, count, units_per_row
):
    work = count * units_per_row
    pieces = min(count, workers * _runtime.CHUNKS_PER_THREAD, work // _runtime.SERIAL_WORK)
    chunks = _runtime.row_chunks(count, workers, pieces, work)
    assert chunks[0][0] == 0 and chunks[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    sizes = [stop - start for start, stop in chunks]
    assert min(sizes) >= 1
    assert sizes[:-1] == sorted(sizes[:-1], reverse=True)  # largest first (the last takes the remainder)
    # the first about an equal chunk's size, no chunk below SERIAL_WORK units, the last ones a TAIL_SPLIT-th
    smallest = max(-(-count // (pieces * _runtime.TAIL_SPLIT)), -(-_runtime.SERIAL_WORK // units_per_row))
    assert sizes[0] <= max(-(-count // (2 * workers)), smallest)
    assert all(size * units_per_row >= _runtime.SERIAL_WORK for size in sizes)
    assert min(sizes) < 2 * smallest
    # at most one chunk per SERIAL_WORK units, and not many more than equal chunks would be
    assert len(chunks) <= work // _runtime.SERIAL_WORK
    assert len(chunks) <= 2 * workers * (_runtime.TAIL_SPLIT + 1) + 2 * workers * np.log(
        pieces * _runtime.TAIL_SPLIT
    )


@needs_two_threads
def test_work_below_the_parallel_threshold_stays_on_the_calling_thread_and_above_it_is_split_finely():
    seen = []

    def kernel(start, stop):
        seen.append((threading.current_thread().name, start, stop))

    with _runtime.threads(2):
        _runtime.run_rows(kernel, 1000, (), work=_runtime.PARALLEL_WORK - 1)
        assert seen == [(threading.current_thread().name, 0, 1000)]
        seen.clear()
        _runtime.run_rows(kernel, 1000, (), work=_runtime.PARALLEL_WORK)
    # several chunks per thread, so a helper that wakes late still takes a share
    assert len(seen) >= 2 * 2 and sum(stop - start for _, start, stop in seen) == 1000


@needs_two_threads
def test_an_error_in_one_chunk_is_raised_after_every_chunk_ran():
    done = []

    def kernel(start, stop):
        if start == 0:
            raise RuntimeError("chunk 0 failed")
        done.append(start)

    with _runtime.threads(2), pytest.raises(RuntimeError, match="chunk 0"):
        _runtime.run_rows(kernel, 800, (), work=100 * _runtime.SERIAL_WORK)
    assert (
        len(done)
        == len(_runtime.row_chunks(800, 2, 2 * _runtime.CHUNKS_PER_THREAD, 100 * _runtime.SERIAL_WORK)) - 1
    )


@needs_two_threads
def test_the_caller_does_not_wait_for_a_team_busy_with_another_call():
    # another thread's call holds the team (its chunks wait for `release`): this call runs every
    # chunk itself and returns, instead of waiting for the team's helper
    release = threading.Event()
    done = []

    def busy():
        with _runtime.threads(2):
            _runtime.run_rows(lambda start, stop: release.wait(30), 800, (), 100 * _runtime.SERIAL_WORK)

    with _runtime.threads(2):
        other = threading.Thread(target=busy)
        other.start()
        try:
            for _ in range(500):  # until the other call holds the team
                if _team.team_for(1).busy():
                    break
                time.sleep(0.01)
            assert _team.team_for(1).busy()

            def call():
                with _runtime.threads(2):  # Numba's thread count is per thread: set it in this one too
                    _runtime.run_rows(
                        lambda start, stop: done.append((start, stop)), 800, (), 100 * _runtime.SERIAL_WORK
                    )

            caller = threading.Thread(target=call)
            caller.start()
            caller.join(10)
            assert not caller.is_alive(), "run_rows waited for a team busy with another call"
        finally:
            release.set()
            other.join(30)
    assert sorted(done) == sorted(set(done)) and sum(b - a for a, b in done) == 800


@needs_two_threads
def test_a_helper_that_fails_is_reported_after_every_chunk_was_tried_once():
    tried, failed = [], []
    caller = threading.current_thread()

    def kernel(start, stop):
        tried.append(start)
        if threading.current_thread() is not caller:
            failed.append(start)
            raise RuntimeError(f"a helper's chunk at {start} failed")
        time.sleep(0.002)  # time for the helper to wake and take a chunk

    with _runtime.threads(2):
        for _ in range(20):  # a helper that wakes after the caller took every chunk never runs one
            tried.clear()
            try:
                _runtime.run_rows(kernel, 800, (), work=100 * _runtime.SERIAL_WORK)
            except RuntimeError as exc:
                chunks = _runtime.row_chunks(
                    800, 2, 2 * _runtime.CHUNKS_PER_THREAD, 100 * _runtime.SERIAL_WORK
                )
                starts = [start for start, _ in chunks]
                assert sorted(tried) == starts  # every chunk tried once, the failed ones too
                # the first failed chunk's error is the one raised, whichever failed first in time
                assert str(exc) == f"a helper's chunk at {min(failed)} failed"
                return
    pytest.skip("the team's helper never woke while the caller worked")


@pytest.mark.parametrize("threads", [3, 4, 16])
def test_small_work_wakes_one_thread_per_thread_work_and_never_fewer_than_two(monkeypatch, threads):
    # a machine with more cores than this one: Numba's count is faked, the team is real
    monkeypatch.setattr(numba, "get_num_threads", lambda: threads)
    unit = _runtime.THREAD_WORK
    cases = [
        (None, threads),
        (0, 2),
        (_runtime.PARALLEL_WORK, 2),
        (unit, 2),
        (3 * unit, 3),
        (100 * unit, threads),
    ]
    for work, want in cases:
        assert _runtime._workers_for(work) == min(threads, want)
    names = set()
    lock = threading.Lock()
    teams_before = set(_team._teams)

    def kernel(start, stop):
        time.sleep(0.002)  # long enough that every woken helper takes a chunk
        with lock:
            names.add(threading.current_thread().name)

    for work in (3 * unit, 100 * unit):
        names.clear()
        _runtime.run_rows(kernel, 10_000, (), work=work)
        assert len(names) <= _runtime._workers_for(work)
        names.clear()
        chunks = [(k, k + 1) for k in range(64)]
        assert _runtime.run_chunks(lambda a, b: kernel(a, b) or a, chunks, work) == list(range(64))
        assert len(names) <= _runtime._workers_for(work)
    # every work size shares the one team of this thread count
    assert set(_team._teams) - teams_before <= {threads - 1}
    assert threads - 1 in _team._teams


@needs_two_threads
def test_a_failing_chunk_of_a_call_nested_on_the_team_does_not_hang():
    # both threads run an outer chunk whose nested call fails: neither may wait for the other's queued helper
    def inner(start, stop):
        if start == 1:
            raise ValueError("inner chunk failed")

    def outer(start, stop):
        _runtime.run_chunks(inner, [(k, k + 1) for k in range(4)])

    result = []

    def call():
        with _runtime.threads(2):
            try:
                _runtime.run_chunks(outer, [(k, k + 1) for k in range(8)])
            except ValueError as exc:
                result.append(str(exc))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(30)
    assert not caller.is_alive(), "a nested call on the team hung after a chunk failed"
    assert result == ["inner chunk failed"]


@needs_two_threads
def test_run_chunks_returns_results_in_chunk_order():
    chunks = [(k, k + 1) for k in range(37)]
    with _runtime.threads(2):
        assert _runtime.run_chunks(lambda a, b: a * 10 + b, chunks) == [k * 10 + k + 1 for k in range(37)]


def test_blas_threads_are_restored_after_a_layer_call():
    controller = ThreadpoolController()
    blas = controller.select(user_api="blas")
    if not blas.lib_controllers:
        pytest.skip("no BLAS library found by threadpoolctl")
    rng = np.random.default_rng(0)
    n = 3000
    graph = CSRGraph.from_edge_index(rng.integers(0, n, (2, 4 * n)), n)
    layer = GATv2Layer(64, 16, heads=4, seed=0)
    assert n * 64 * 64 >= _runtime.BLAS_SMALL  # the limit is used
    x = rng.standard_normal((n, 64)).astype(np.float32)
    inside = []
    original = _runtime._BlasOneThread.__enter__

    def spy(self):
        result = original(self)
        inside.append([lib.num_threads for lib in _runtime._blas_libraries()])
        return result

    for count in (2, 1):
        with blas.limit(limits=count):
            _runtime._BlasOneThread.__enter__ = spy
            try:
                out, cache = layer.forward(graph, x)
                layer.backward(cache, np.ones_like(out))
            finally:
                _runtime._BlasOneThread.__enter__ = original
            assert [lib.num_threads for lib in blas.lib_controllers] == [count] * len(blas.lib_controllers)
    assert inside and all(counts == [1] * len(counts) for counts in inside)


def test_a_network_holds_blas_once_and_restores_it_even_after_an_error():
    """The network's pass holds BLAS at one thread; its layers' holds inside set nothing, and the
    outermost exit restores the caller's count, also when the pass raises."""
    from gatfast.models import GATv2Network

    blas = ThreadpoolController().select(user_api="blas")
    if not blas.lib_controllers:
        pytest.skip("no BLAS library found by threadpoolctl")
    rng = np.random.default_rng(0)
    n = 3000
    graph = CSRGraph.from_edge_index(rng.integers(0, n, (2, 4 * n)), n)
    net = GATv2Network(64, 16, 3, num_layers=2, heads=4, seed=0, dropout=0.0, attention_dropout=0.0)
    x = rng.standard_normal((n, 64)).astype(np.float32)
    sets = []
    for lib in _runtime._blas_libraries():
        original = lib.set_num_threads
        lib.set_num_threads = lambda count, original=original: (sets.append(count), original(count))[1]
    try:
        with blas.limit(limits=2):
            out, cache = net.forward(graph, x, training=True)
            net.backward(cache, np.ones_like(out))
            libs = len(blas.lib_controllers)
            assert sets == ([1] * libs + [2] * libs) * 2  # once a pass, not once a layer

            def fail(*args, **kwargs):
                raise RuntimeError("inside the pass")

            net.layers[0]._backward_checked = fail
            with pytest.raises(RuntimeError, match="inside the pass"):
                net.backward(cache, np.ones_like(out))
            assert sets[-libs:] == [2] * libs
            assert [lib.num_threads for lib in blas.lib_controllers] == [2] * len(blas.lib_controllers)
            assert getattr(_runtime._blas_hold, "depth", 0) == 0
    finally:
        for lib in _runtime._blas_libraries():
            lib.__dict__.pop("set_num_threads", None)


def test_compiled_or_cached_tells_a_kernel_that_would_compile(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "fresh_kernel.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("fresh_kernel")
    assert not _runtime.compiled_or_cached(module.twice)  # never compiled, no cache index next to it
    assert module.twice(3) == 6
    assert _runtime.compiled_or_cached(module.twice)
    assert _runtime.compiled_or_cached(
        lambda x: x
    )  # not a dispatcher: assumed ready, as before the test existed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_a_blas_hold_starts_outside_it():
    with _runtime.blas_single_thread():  # no work given: always a hold
        assert _runtime._blas_hold.depth == 1
        pid = os.fork()
        if pid == 0:  # the child: its own holds must set BLAS again
            os._exit(0 if getattr(_runtime._blas_hold, "depth", 0) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_network_backward_names_a_foreign_layer_cache():
    from gatfast.models import GATv2Network

    rng = np.random.default_rng(0)
    graph = CSRGraph.from_edge_index(rng.integers(0, 300, (2, 1200)), 300)
    net = GATv2Network(64, 16, 3, num_layers=2, heads=4, seed=0)
    out, cache = net.forward(graph, rng.standard_normal((300, 64)).astype(np.float32))
    cache.layer_caches[0] = None  # as an inference pass leaves it
    with pytest.raises(TypeError, match="cache must be the LayerCache"):
        net.backward(cache, np.ones_like(out))
