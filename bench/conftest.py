"""Fixtures of the pytest-benchmark suites.

``pytest bench/ --benchmark-only`` times the full-size workloads of the
performance issue. A plain ``pytest`` run (as in CI) collects the same
functions at a tiny size and runs each once with timing disabled, so CI
checks that every benchmark runs without spending minutes on it. Set
``GATFAST_BENCH_SIZE=tiny`` or ``full`` to choose the size explicitly, and
``GATFAST_BENCH_LIBS=gatfast`` to leave out the PyG and DGL references. DGL
2.1 is only importable in its own environment (``bench/setup_dgl_env.sh``):
elsewhere its cases are skipped, as are its cases of the edge-feature
workloads (DGL's ``GATv2Conv`` has no edge features). Without
pytest-benchmark every case is skipped.

Before a PyG or DGL runner is timed for the first time on a workload, its
outputs and gradients are checked against gatfast's (``agreement.check``,
same weights): a peer that computes another function fails the session.

Numba, BLAS, torch and DGL all use 2 threads (``GATFAST_BENCH_THREADS``);
``OMP_WAIT_POLICY`` is PASSIVE unless set (gatfast no longer sets it at import).
"""

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before any OpenMP runtime starts its threads
sys.path.insert(0, str(Path(__file__).resolve().parent))

import agreement  # noqa: E402
import workloads  # noqa: E402
from reference import pyg_available  # noqa: E402
from reference_dgl import dgl_available  # noqa: E402

THREADS = int(os.environ.get("GATFAST_BENCH_THREADS", "2"))
LIB_NAMES = {"gatfast": "gatfast", "pyg": "PyG", "dgl": "DGL"}

try:
    import pytest_benchmark  # noqa: F401

    HAVE_BENCHMARK = True
except ImportError:
    HAVE_BENCHMARK = False


def bench_size(config):
    size = os.environ.get("GATFAST_BENCH_SIZE")
    if size:
        if size not in workloads.SIZES:
            raise pytest.UsageError(f"GATFAST_BENCH_SIZE must be one of {workloads.SIZES}, got {size!r}")
        return size
    return "full" if config.getoption("benchmark_only", False) else "tiny"


def pytest_configure(config):
    if HAVE_BENCHMARK and bench_size(config) == "tiny" and not config.getoption("benchmark_only", False):
        # smoke run: call every benchmarked function once, time nothing
        config.option.benchmark_disable = True


def pytest_collection_modifyitems(config, items):
    if HAVE_BENCHMARK:
        return
    skip = pytest.mark.skip(reason="pytest-benchmark is not installed (pip install pytest-benchmark)")
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


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


# (library, workload name) -> the agreement errors of the check made before its first timing
AGREEMENT = {}


def checked_runner(lib, workload):
    """The runner of ``lib`` on ``workload``; a peer's outputs are checked against gatfast's once per session."""
    if lib == "gatfast":
        return workloads.GatfastRunner(workload)
    if lib == "dgl":
        if not workloads.dgl_can_run(workload.name):
            pytest.skip("DGL's GATv2Conv has no edge features")
        from reference_dgl import DglRunner as Runner
    else:
        from reference import PygRunner as Runner
    runner = Runner(workload)
    key = (lib, workload.name)
    if key not in AGREEMENT:
        want = workloads.GatfastRunner(workload).outputs()
        AGREEMENT[key] = agreement.check(runner.outputs(), want, LIB_NAMES[lib], workload.name)
    return runner


@pytest.fixture
def make_runner():
    return checked_runner
