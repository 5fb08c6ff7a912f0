"""One (workload, library) measurement, run in a fresh subprocess of ``compare.py``.

The worker builds the workload, warms up on a tiny copy (JIT compilation
or cache load, torch's lazy initialisation), then, inside the peak-memory
window: a PyG or DGL worker first checks that its outputs and gradients on
the workload equal gatfast's (``agreement.check`` against the reference the
gatfast worker saved; a mismatch fails the run before anything is timed),
then the forward pass and forward + backward (the full step for a training
workload) are timed: the median of ``reps`` samples. A sample is one call,
or for the per-call overhead workloads (``workloads.MICRO_WORKLOADS``) the
mean of a tight loop of many calls (at least ``MICRO_SAMPLE_S`` per sample).

Peak memory is the highest resident set size during the check and the timed
calls minus the resident set size just before them (on Linux the kernel's
VmHWM is reset through ``/proc/self/clear_refs``; elsewhere ``ru_maxrss``).
The check accumulates its norms over small chunks, so it allocates next to
nothing beyond what one forward + backward holds.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

LIB_NAMES = {"gatfast": "gatfast", "pyg": "PyG", "dgl": "DGL"}
MICRO_SAMPLE_S = 0.01  # a per-call-overhead sample loops for at least this long
MAX_CALLS_PER_SAMPLE = 100_000
#: the variables that set Numba's, OpenMP's and the BLAS libraries' thread counts in a worker
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def thread_env(threads):
    """This process's environment with every library of a worker at ``threads`` threads."""
    return dict(os.environ, **{var: str(threads) for var in THREAD_VARS})


def _maxrss_mb():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def _status_mb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # kB
    raise OSError(f"{field} not in /proc/self/status")


def start_peak():
    """Start a peak-memory measurement; returns (baseline MB, function giving the peak MB)."""
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        base = _status_mb("VmRSS")
        # the peak includes the start: the kernel's RSS counters are batched per thread, so a
        # high-water mark read later can come out a few pages under this reading
        return base, lambda: max(base, _status_mb("VmHWM"))
    except OSError:
        return _maxrss_mb(), _maxrss_mb


def loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def calls_per_sample(fn, target_s=MICRO_SAMPLE_S):
    """How many calls of ``fn`` make a sample of at least ``target_s`` (from a short trial loop)."""
    calls = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or calls >= MAX_CALLS_PER_SAMPLE:
            return max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(calls * target_s / max(dt, 1e-9))))
        calls *= 4


def time_calls(fn, reps, calls=1, warmup=2):
    """``reps`` samples of seconds per call: each sample times ``calls`` back-to-back calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return times


def _runner_class(lib, threads):
    """The runner class of ``lib`` with its threads set; and what the result records about its environment."""
    import numba
    import numpy as np

    if lib == "pyg":
        import torch
        from reference import PygRunner

        torch.set_num_threads(threads)
        return PygRunner, {}
    if lib == "dgl":
        import dgl
        import torch
        from reference_dgl import DglRunner

        torch.set_num_threads(threads)
        dgl.utils.set_num_threads(threads)  # DGL's own OpenMP kernels (message passing, edge softmax)
        return DglRunner, {"versions": {"dgl": dgl.__version__, "torch": torch.__version__, "numpy": np.__version__,
                                        "numba": numba.__version__, "python": platform.python_version()},
                           "dgl_omp_threads": int(dgl.utils.get_num_threads())}
    import workloads

    return workloads.GatfastRunner, {}


def save_reference(name, size, path, w=None):
    """gatfast's outputs on the workload (``w``, else built), written for the peers' checks (no timing)."""
    import agreement
    import workloads

    w = workloads.make_workload(name, size) if w is None else w
    agreement.save(path, workloads.GatfastRunner(w).outputs())


def run_worker(lib, name, size, reps, threads, reference=None, save_to=None):
    """Time one workload with one library in this process; return a dict of raw numbers.

    ``reference``: gatfast's saved outputs, checked before timing (peers).
    ``save_to``: where the gatfast worker saves its outputs, after timing.
    """
    import agreement
    import numba
    import numpy as np
    import workloads

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    Runner, extra = _runner_class(lib, threads)
    t0 = time.perf_counter()
    w = workloads.make_workload(name, size)
    build_s = time.perf_counter() - t0
    # warm the code paths on a tiny copy, so that the baseline holds the code and only the
    # benchmarked arrays count as peak
    tiny = Runner(workloads.make_workload(name, "tiny"))
    tiny.forward()
    tiny.forward_backward()
    del tiny
    want = agreement.load(reference) if reference else None  # held through the window: in the baseline
    runner = Runner(w)
    load_before = loadavg()
    baseline, peak_now = start_peak()
    if want is not None:  # the same function, or no timing at all
        errs = agreement.check(runner.outputs(), want, LIB_NAMES[lib], name)
        extra["agreement"] = errs
        extra["max_rel_err_vs_gatfast"] = max(errs.values())
    fwd_calls = both_calls = 1
    if w.micro:
        fwd_calls = calls_per_sample(runner.forward)
        both_calls = calls_per_sample(runner.forward_backward)
    fwd = time_calls(runner.forward, reps, fwd_calls) if w.kind == "layer" else []
    both = time_calls(runner.forward_backward, reps, both_calls)
    peak = peak_now() - baseline
    del want
    result = {
        "lib": lib,
        "workload": name,
        "size": size,
        "nodes": int(w.num_nodes),
        "edges": int(w.graph.nnz),
        "edge_dim": w.edge_dim,
        "bipartite": w.bipartite,
        "threads": threads,
        "numba_threads": int(numba.get_num_threads()),
        "build_s": build_s,
        "forward_s": fwd,
        "forward_backward_s": both,
        "calls_per_sample": {"forward": fwd_calls if fwd else None, "forward_backward": both_calls},
        "forward_median_ms": float(np.median(fwd) * 1e3) if fwd else None,
        "forward_backward_median_ms": float(np.median(both) * 1e3),
        "baseline_rss_mb": baseline,
        "peak_mb": peak,
        "allocator": "jemalloc" if "jemalloc" in os.environ.get("LD_PRELOAD", "") else "system",
        # compare.py sets PASSIVE in every worker's environment (gatfast's import no longer does)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        # 1-minute load average before and after (other processes compete for the cores)
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        **extra,
    }
    if lib == "gatfast" and w.kind == "layer":
        from rooflib.model import Dims

        result["dims"] = asdict(Dims.from_workload(w))  # what the parent's roofline columns need
    if save_to:  # after the timing, with a fresh runner of the same seed: the same weights
        del runner
        save_reference(name, size, save_to, w)
    return result
