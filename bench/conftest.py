"""Fixtures of the pytest-benchmark suites.

``pytest bench/ --benchmark-only`` times the full-size workloads of the
performance issue. A plain ``pytest`` run (as in CI) collects the same
functions at a tiny size and runs each once with timing disabled, so CI
checks that every benchmark runs without spending minutes on it. Set
``GATFAST_BENCH_SIZE=tiny`` or ``full`` to choose the size explicitly, and
``GATFAST_BENCH_LIBS=gatfast`` to leave out the PyG and DGL references. DGL
2.1 is only importable in its own environment (``bench/setup_dgl_env.sh``):
elsewhere its cases are skipped.

Numba, BLAS, torch and DGL all use 2 threads (``GATFAST_BENCH_THREADS``).
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads  # noqa: E402
from reference import pyg_available  # noqa: E402
from reference_dgl import dgl_available  # noqa: E402

THREADS = int(os.environ.get("GATFAST_BENCH_THREADS", "2"))


def bench_size(config):
    size = os.environ.get("GATFAST_BENCH_SIZE")
    if size:
        if size not in workloads.SIZES:
            raise pytest.UsageError(f"GATFAST_BENCH_SIZE must be one of {workloads.SIZES}, got {size!r}")
        return size
    return "full" if config.getoption("benchmark_only", False) else "tiny"


def pytest_configure(config):
    if bench_size(config) == "tiny" and not config.getoption("benchmark_only", False):
        # smoke run: call every benchmarked function once, time nothing
        config.option.benchmark_disable = True


def pytest_report_header(config):
    return f"gatfast bench: size={bench_size(config)}, threads={THREADS}"


@pytest.fixture(scope="session", autouse=True)
def _threads():
    import numba

    numba.set_num_threads(min(THREADS, numba.config.NUMBA_NUM_THREADS))
    try:
        import torch

        torch.set_num_threads(THREADS)
    except ImportError:
        pass
    if dgl_available():
        import dgl

        dgl.utils.set_num_threads(THREADS)


@pytest.fixture(scope="session")
def size(request):
    return bench_size(request.config)


_WORKLOADS = {}


@pytest.fixture(scope="session")
def get_workload(size):
    """Build each workload once per session (the large graph takes seconds)."""

    def get(name):
        if name not in _WORKLOADS:
            _WORKLOADS[name] = workloads.make_workload(name, size)
        return _WORKLOADS[name]

    return get


def libraries():
    wanted = os.environ.get("GATFAST_BENCH_LIBS", "gatfast,pyg,dgl").split(",")
    skip = {
        "pyg": pytest.mark.skipif(not pyg_available(), reason="torch_geometric not installed"),
        "dgl": pytest.mark.skipif(not dgl_available(), reason="dgl not importable (its own env: bench/setup_dgl_env.sh)"),
    }
    return [pytest.param(lib, marks=skip[lib]) if lib in skip else lib
            for lib in wanted if lib in ("gatfast", "pyg", "dgl")]


@pytest.fixture
def make_runner():
    def make(lib, workload):
        if lib == "gatfast":
            return workloads.GatfastRunner(workload)
        if lib == "dgl":
            from reference_dgl import DglRunner

            return DglRunner(workload)
        from reference import PygRunner

        return PygRunner(workload)

    return make
