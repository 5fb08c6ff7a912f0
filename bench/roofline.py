"""Roofline model of one GATv2 layer step: how far each kernel is from what this machine allows.

Three parts, all in one process:

1. **Machine figures**, measured with small Numba kernels (``cache=True``,
   warmed up, no ``fastmath`` anywhere), once at the start (the machine
   table: best and median of the repetitions) and again, at ``--threads``
   threads, inside each workload's timing rounds (the ceilings its bounds
   use, see 3). Every probe loop runs in a serial helper on a contiguous
   slice: the same loop written inside a ``prange`` body did not vectorise.

   * streaming bandwidth: a read-only sum (the float32 array read as
     uint64, so that LLVM may vectorise the integer sum without any
     reassociation licence), STREAM's *scale* ``b = s * a`` (a copy that
     LLVM cannot turn into ``memcpy``, whose non-temporal stores the
     kernels never use) and *triad* ``a = b + s * c``, on arrays of at least
     8x the last-level cache, on 1 thread and on ``--threads`` threads
     (``prange`` over fixed chunks). Bytes are counted as STREAM does (no
     read-for-ownership).
   * random-row gathers: rows of 64 B and 256 B (float32 rows of 16 and 64
     channels, as the kernels' ``xl[j]``) at uniform random row indices
     from a table of at least 8x the last-level cache, with and without
     the project's software prefetch (``gatfast.kernels.prefetch``, same
     distance), 1 and ``--threads`` threads: effective GB/s and rows/s.
   * single-thread float32 throughput of fused multiply-add and of separate
     multiply + add, at the SIMD width the CPU flags announce (AVX-512: 16
     lanes, AVX/AVX2: 8, else 4): explicit LLVM vector code (an llvmlite
     intrinsic, as ``gatfast/kernels/simd.py`` does) over 12 (16 with
     AVX-512) independent accumulator chains, enough to cover the FMA
     latency on two pipes, so the probe is bound by issue throughput and
     no fast-math flag is needed. It is compared with the theoretical peak
     ``GHz x 2 pipes x lanes x 2`` (``cpu MHz`` of /proc/cpuinfo, nominal
     on virtual machines; two full-width FMA pipes per core assumed).

2. **A byte/flop model of each kernel** of one forward + backward of a
   workload (``bench/workloads.py``), one small function per kernel that
   returns both the model and the call (``k_*`` in ``bench/rooflib/kernels.py``,
   listed by ``kernels_for``). Edge features (``D`` per edge) add ``2 D``
   flops per edge and channel wherever a pass forms ``z_ij``, the stream of
   ``u`` in the forward and target passes, its gather in the source pass,
   and the edge-attribute and ``W_E`` gradients of the target pass; bipartite
   input projects and differentiates ``x_src`` and ``x_dst`` separately. Assumptions:

   * Streams: every array a kernel reads or writes in order is moved once
     from or to memory (its bytes at the measured read bandwidth; written
     bytes at the write cost derived from *scale* and the read sum, which
     includes the read-for-ownership of ordinary stores). Data a kernel
     re-reads while it is still in cache (``alpha`` of a row in the
     forward kernel, ``upstream`` in the target pass, a chunk of ``x``
     between the two BLAS products) is free.
   * Gathers: each gathered row is read once per pass per edge that needs
     it (one ``xl[j]`` per edge in the forward kernel even though steps 1
     and 3 both use it; in the source pass ``xr[i]``, ``grad[i]``,
     ``alpha[e]`` and ``delta[e]``). Their time is what the same gathers
     alone take on this machine: in the workload's timing rounds a probe
     steps through uniform random rows of tables shaped like each gathered
     array of the pass (same row and table sizes), one row of every table
     per step with the kernels' prefetch, at ``--threads`` threads; the
     pass costs its steps times the probe's time per step, less the probe's
     own 8-byte index streams (the kernel's index arrays are counted as
     streams). So whatever the cache does for a 51 MB table on this machine
     (on the shared 2-core virtual machine: hardly anything, measured) and
     however the gathers of several arrays overlap is in the bound, and a
     loop that did nothing but those gathers would reach it. (Without that
     probe, as in the unit tests: per row, the 64-byte and 256-byte rates
     interpolated linearly in cache lines, ``ceil(b / 64)`` for a row of
     ``b`` bytes, at the nearest measured table size.)
   * Cache: ``--cache-mb`` (default: the L3 size from sysfs). If
     everything the step touches (the union of all arrays of all kernels)
     fits, the step runs in cache and only compute counts
     ("cache-resident data is free").
   * Ideal-cache bound (a second, stricter column): an ideal cache also
     holds, during a pass, the share ``min(1, cache / tables)`` of every
     gathered array (uniform random rows); that share of the gathers is
     free after one compulsory read (counted as a stream), the rest costs
     what it costs in the main bound. A lower bound whatever the cache
     does, but one a cache shared with other tenants may never let a
     kernel approach.
   * Memory time = stream time + gather time (both cross the same memory
     interface); bound = max(memory time, compute time). The step bound is
     the sum of the kernel bounds.
   * Flops: additions and multiplications as the kernel's arithmetic is
     written (a LeakyReLU costs its multiply because the vector code
     computes both sides of the select); compares, selects and max are
     free in the edge kernels, ``exp`` and division count 1; the
     finiteness checks count one compare per element (that is all their
     work). Numba kernels run at the measured
     multiply + add rate (without fast-math LLVM does not contract into
     FMA); the dense products (the tile's explicit fused multiply-adds, or
     BLAS) at the FMA rate. Peak x threads (no SMT assumed).
   * Not modelled: Python and launch overhead, allocations and page
     faults, dropout (the workloads run without it), ``concat=False``.

3. **Timing of the real kernels** on the same workload: the layer builds
   its cache once, then each kernel function of ``gatfast.kernels`` (and
   the layer's dense-product helpers) is called with the arrays prepared
   as ``gatfast/layers`` prepares them (whole or in row chunks on the
   thread pool, as the layer runs them), and the whole
   ``layer.forward`` + ``layer.backward`` step is timed too. Warm-up, then
   ``--reps`` rounds in which every kernel, the step and every probe the
   workload's bounds need (read and scale streams, each pass's gathers,
   flops) run once each in turn: other work
   on a shared machine then slows kernels and ceilings alike, and each
   kernel starts with the cache another kernel left, as in the step.
   Kernels: median and the 10th-90th percentile range. Bounds: from the
   probes' medians, so measured/bound is a ratio of medians (the goals are
   judged on it); best/bound divides the best kernel sample by the bound
   from the probes' best samples.

The issue's goals: every edge kernel within 1.3x of its bound and the whole
``large`` step within 1.5x.

Outputs (``--out``, default ``runs/bench/roofline``, untracked; into the
tracked ``bench/results/`` only with ``--update-results``; written
atomically): ``roofline.md`` (tables) and ``roofline.json`` (every sample and
count). The parts live in ``bench/rooflib/`` (see its ``__init__``).

Usage::

    python bench/roofline.py                              # default workloads, full size
    python bench/roofline.py --size tiny --reps 1 --out /tmp/rf   # seconds, a smoke test
    python bench/roofline.py --update-results             # refresh bench/results/roofline.*
    python bench/roofline.py --workloads large --reps 30
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

# before Numba starts its OpenMP threads (gatfast sets it only before its own first kernel)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numba  # noqa: E402
import numpy as np  # noqa: E402
import outdirs  # noqa: E402
import workloads  # noqa: E402
from rooflib.cpu import CPU, loadavg, threading_layer  # noqa: E402
from rooflib.machine import Machine  # noqa: E402
from rooflib.measure import Threads  # noqa: E402
from rooflib.report import jsonable, markdown  # noqa: E402
from rooflib.timing import GOALS, time_workload  # noqa: E402

DEFAULT_WORKLOADS = ("large", "large-edge", "large-bipartite", "small-batch", "small-batch-edge", "cora",
                     "degree-256-linear")


def modelled(name):
    """Whether the roofline models workload ``name`` (a single layer with concatenated heads)."""
    return workloads.WORKLOADS[name][0] == "layer"  # every layer workload concatenates its heads


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="Numba threads (and BLAS chunks) for the kernels")
    parser.add_argument("--size", choices=workloads.SIZES, default="full")
    parser.add_argument("--reps", type=int, default=20,
                        help="timed rounds per workload (median); the machine table at the start uses at most 7")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help="comma-separated names")
    outdirs.add_options(parser, "roofline")
    parser.add_argument("--cache-mb", type=float, default=None,
                        help="cache size the model assumes (default: the L3 size; 0: never count the step as cache-resident)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    args.names = [n for n in args.workloads.split(",") if n]
    bad = [n for n in args.names if n not in workloads.WORKLOADS or not modelled(n)]
    if bad or not args.names:
        layer_names = [n for n in workloads.WORKLOADS if modelled(n)]
        parser.error(f"unknown or non-layer workloads {bad}; choose from {layer_names}")
    args.out = outdirs.resolve_out(parser, args, "roofline", args.size)
    return args


def main(argv=None):
    args = parse_args(argv)
    threads = max(1, min(args.threads, numba.config.NUMBA_NUM_THREADS))
    if threads != args.threads:
        print(f"--threads {args.threads}: Numba allows {threads} (NUMBA_NUM_THREADS)", file=sys.stderr)
    cache_bytes = CPU["l3_bytes"] if args.cache_mb is None else args.cache_mb * 2**20
    if args.cache_mb is None and not cache_bytes:
        cache_bytes = 32 << 20
        print("L3 size unknown: assuming 32 MiB (use --cache-mb)", file=sys.stderr)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    load0 = loadavg()
    machine = Machine(threads, args.size, max(1, min(args.reps, 7)), cache_bytes).measure(log)
    rates = machine.rates()
    results = []
    with Threads(threads):
        for name in args.names:
            log(f"{name}: building and timing ...")
            results.append(time_workload(name, args.size, args.reps, machine, log))
    machine.release()
    load1 = loadavg()

    triad = machine.find("stream triad", threads)
    n_elem = triad["bytes"] / 12
    predicted = triad["bytes"] / (8 * n_elem / rates.read_bps + 4 * n_elem / rates.write_bps) / 1e9
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", "bench/roofline.py", *(sys.argv[1:] if argv is None else argv)]),
        "cpu": CPU,
        "threads": threads,
        "reps": args.reps,
        "size": args.size,
        "numba": numba.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "threading_layer": threading_layer(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load": " / ".join("?" if v is None else f"{v:.2f}" for v in (load0, load1)),
        "triad_predicted_gbps": predicted,
        "triad_measured_gbps": triad["gbps"],
        "probe_sizes": machine.sizes,
    }
    text = markdown(meta, machine.records, rates, results)
    raw = {"meta": meta, "machine": machine.records, "rates": asdict(rates), "results": results, "goals": GOALS}
    outdirs.write_report(args.out, "roofline", jsonable(raw), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
