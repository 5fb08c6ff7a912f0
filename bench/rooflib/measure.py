"""Timing helpers shared by the probes and the kernels, and the probe records."""

from __future__ import annotations

import os
import time

import numba
import numpy as np


def samples(fn, reps, warmup=1):
    """``reps`` wall times of ``fn()`` in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def stats(values):
    """Median, 10th and 90th percentile and count of some samples."""
    s = np.asarray(values, dtype=float)
    return {"median": float(np.median(s)), "p10": float(np.percentile(s, 10)),
            "p90": float(np.percentile(s, 90)), "n": int(s.size)}


class Threads:
    """Set Numba's thread count for a block and restore it."""

    def __init__(self, n):
        self.n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))

    def __enter__(self):
        self.old = numba.get_num_threads()
        numba.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        numba.set_num_threads(self.old)


def probe_sizes(size, cache_bytes):
    """Bytes per streamed array / gather table, gathers per probe, and the flop probe's duration.

    ``"full"``: at least 8x the L3 (the roofline script); ``"quick"``: at least
    4x the L3 and fewer gathers (the few seconds ``compare.py`` spends on it);
    ``"tiny"``: a smoke test.
    """
    if size == "tiny":
        return {"array_bytes": 4 << 20, "gathers": 20_000, "flop_seconds": 0.005}
    quick = size == "quick"
    want = max((4 if quick else 8) * cache_bytes, (128 if quick else 256) << 20)
    try:  # three arrays (triad) at most a quarter of the physical memory
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        want = min(want, phys // 12)
    except (ValueError, OSError):
        pass
    return {"array_bytes": int(want), "gathers": 500_000 if quick else 2_000_000,
            "flop_seconds": 0.02 if quick else 0.1}


def record(template, times):
    """A probe record: its description, every sample, and its rate from the best and from the median sample."""
    rec = dict(template, samples_s=list(times))
    best, med = min(times), stats(times)["median"]
    if rec["probe"].startswith("stream"):
        rec["gbps"] = rec["bytes"] / best / 1e9
        rec["gbps_median"] = rec["bytes"] / med / 1e9
    elif rec["probe"] == "pass gathers":
        rec["s_per_step"] = best / rec["steps"]
        rec["s_per_step_median"] = med / rec["steps"]
    elif rec["probe"] == "gather":
        rec["rows_per_s"] = rec["rows"] / best
        rec["rows_per_s_median"] = rec["rows"] / med
        rec["gbps"] = rec["rows"] * rec["row_bytes"] / best / 1e9
    else:
        rec["gflops"] = rec["flops"] / best / 1e9
        rec["gflops_median"] = rec["flops"] / med / 1e9
        theo = rec["theoretical_gflops"]
        rec["fraction_of_peak"] = rec["gflops"] / theo if theo else None
        # the clock at which the FMA rate is 2 full-width FMAs per cycle
        rec["implied_ghz"] = rec["gflops"] / (4 * rec["lanes"]) if rec["probe"] == "fma" else None
    return rec
