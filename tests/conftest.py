"""Shared pytest setup for the engine tests."""

import os
import sys

import numpy as np
import pytest

# ``import naive`` works whatever pytest's import mode is.
sys.path.insert(0, os.path.dirname(__file__))

# No first-run compile helper behind the tests' many ``gatfast train`` calls (and their subprocesses):
# it would compete for the cores; tests/test_precompile.py tests it on its own.
os.environ["GATFAST_PRECOMPILE"] = "0"

try:
    from hypothesis import HealthCheck, settings

    # Modest and reproducible: the property tests must stay fast on 2 cores in CI.
    settings.register_profile(
        "gatfast",
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile("gatfast")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass


@pytest.fixture(autouse=True)
def _small_layers_take_their_kernels_at_once(monkeypatch):
    # a fresh checkout's empty cache would keep the one-call kernels of small layers off for the
    # first 1000 small calls of the session (gatfast/layers/small.py), and with them the fast path
    # that tests of small layers mean to cover; tests of that rule set it back themselves
    from gatfast.layers import small

    monkeypatch.setattr(small, "COMPILE_AFTER_CALLS", 0)


@pytest.fixture
def rng():
    """A fresh, seeded generator per test."""
    return np.random.default_rng(20240611)


@pytest.fixture
def one_numba_thread():
    """Run a test on one Numba thread and restore the count afterwards.

    For tests of many tiny graphs: kernel launch overhead would dominate on a
    busy 2-core machine. Results do not depend on the thread count
    (tests/test_determinism.py proves it), so nothing is weakened.
    """
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(old)


@pytest.fixture
def cyclic_garbage():
    """A function that runs the cyclic collector and returns the gatfast objects it found.

    Such objects lived on after their last reference, until a collection.
    Only gatfast's own types count: other threads of the test process may
    leave garbage of their own at any time.
    """
    import gc

    def collect():
        flags = gc.get_debug()
        gc.set_debug(flags | gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            return [o for o in gc.garbage if type(o).__module__.startswith("gatfast")]
        finally:
            gc.set_debug(flags)
            gc.garbage.clear()

    return collect
