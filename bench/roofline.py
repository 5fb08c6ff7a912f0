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
   returns both the model and the call (``k_*``, listed by ``kernels_for``). Assumptions:

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
     FMA); BLAS products at the FMA rate. Peak x threads (no SMT assumed).
   * Not modelled: Python and launch overhead, allocations and page
     faults, dropout (the workloads run without it), ``concat=False``.

3. **Timing of the real kernels** on the same workload: the layer builds
   its cache once, then each kernel function of ``gatfast.kernels`` (and
   the layer's dense-product helpers) is called with the arrays prepared
   as ``gatfast/layer.py`` prepares them, and the whole
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

Outputs (``--out``, default ``runs/roofline``, written atomically):
``roofline.md`` (tables) and ``roofline.json`` (every sample and count).

Usage::

    python bench/roofline.py                              # default workloads, full size
    python bench/roofline.py --size tiny --reps 1 --out /tmp/rf   # seconds, a smoke test
    python bench/roofline.py --workloads large --reps 30
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from gatfast import _validate as V
from gatfast._io import atomic_write_text
from gatfast._runtime import blas_single_thread
from gatfast.kernels import (
    csr_dense_matmul2,
    gatv2_backward_source,
    gatv2_backward_target,
    gatv2_forward,
    num_att_blocks,
)
from gatfast.kernels.prefetch import PREFETCH_DISTANCE, prefetch_row
from gatfast.layers.dense import dense_backward, dense_projections

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workloads  # noqa: E402

DEFAULT_WORKLOADS = ("large", "small-batch", "cora", "degree-256-linear")
GOALS = {"edge_kernel": 1.3, "large_step": 1.5}
LINE = 64  # bytes per cache line
GATHER_ROW_BYTES = (64, 256)
CHUNKS = 64  # fixed work split of the parallel probes


# ---------------------------------------------------------------------- the CPU
def _read(path):
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _parse_size(text):
    """'32768K' / '32 MiB' / '1M' -> bytes (0 if unreadable)."""
    text = text.strip().replace("iB", "").replace("B", "").replace(" ", "")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text and text[-1].upper() in units:
            return int(float(text[:-1]) * units[text[-1].upper()])
        return int(text)
    except ValueError:
        return 0


def l3_bytes():
    """Size of the last-level (L3) cache from sysfs, else ``lscpu``'s line; 0 if unknown."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        if _read(index / "level").strip() == "3":
            size = _parse_size(_read(index / "size"))
            if size:
                return size
    try:
        import subprocess

        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("L3 cache:"):
                return _parse_size(line.split(":", 1)[1].split("(")[0])
    except (OSError, subprocess.SubprocessError):
        pass
    return 0


def cpu_info():
    """Model name, core count, SIMD width (from the flags), nominal MHz and L3 size."""
    text = _read("/proc/cpuinfo")
    fields = {}
    for line in text.splitlines():
        if ":" in line:
            key, value = (s.strip() for s in line.split(":", 1))
            fields.setdefault(key, value)
    flags = set(fields.get("flags", "").split())
    if "avx512f" in flags:
        simd, lanes = "AVX-512", 16
    elif "avx2" in flags:
        simd, lanes = "AVX2", 8
    elif "avx" in flags:
        simd, lanes = "AVX", 8
    else:
        simd, lanes = "SSE (or unknown)", 4
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    mhz = float(fields["cpu MHz"]) if "cpu MHz" in fields else None
    l3 = l3_bytes()
    return {
        "model": fields.get("model name") or platform.processor() or "unknown CPU",
        "cpus": os.cpu_count() or 1,
        "usable_cpus": usable,
        "simd": simd,
        "simd_bits": lanes * 32,
        "lanes_f32": lanes,
        "fma": "fma" in flags,
        "mhz": mhz,
        "l3_bytes": l3,
    }


CPU = cpu_info()
PROBE_LANES = CPU["lanes_f32"]
PROBE_CHAINS = 16 if PROBE_LANES == 16 else 12  # 12 + 2 operands fit the 16 ymm registers of AVX2


# ---------------------------------------------------------------------- probes (Numba)
# Each parallel probe hands contiguous slices to a serial helper: LLVM vectorises the
# helper's loop, while the same loop written inside the prange body stayed scalar
# (vmulss instead of vmulps; about half the bandwidth on one thread).
@njit(cache=True)
def _sum_chunk(a):
    s = np.uint64(0)
    for k in range(a.size):
        s += a[k]
    return s


@njit(cache=True)
def _scale_chunk(a, b, s):
    for k in range(a.size):
        b[k] = s * a[k]


@njit(cache=True)
def _triad_chunk(a, b, c, s):
    for k in range(a.size):
        a[k] = b[k] + s * c[k]


@njit(cache=True)
def _gather_chunk(table, idx, prefetch, acc):
    width = table.shape[1]
    row_bytes = width * table.itemsize
    rows = idx.size
    for c in range(width):
        acc[c] = 0
    for p in range(rows):
        if prefetch and p + PREFETCH_DISTANCE < rows:
            prefetch_row(table, idx[p + PREFETCH_DISTANCE], row_bytes)
        j = idx[p]
        for c in range(width):
            acc[c] += table[j, c]


@njit(parallel=True, cache=True)
def _read_sum(a, out):
    """Sum of ``a`` (uint64) in ``out.size`` fixed chunks: an integer sum LLVM vectorises freely."""
    n = a.size
    chunks = out.size
    for ch in prange(chunks):
        out[ch] = _sum_chunk(a[ch * n // chunks:(ch + 1) * n // chunks])


@njit(parallel=True, cache=True)
def _scale(a, b, s, chunks):
    """STREAM scale ``b = s * a``."""
    n = a.size
    for ch in prange(chunks):
        lo = ch * n // chunks
        hi = (ch + 1) * n // chunks
        _scale_chunk(a[lo:hi], b[lo:hi], s)


@njit(parallel=True, cache=True)
def _triad(a, b, c, s, chunks):
    """STREAM triad ``a = b + s * c`` (no contraction into FMA without fast-math)."""
    n = a.size
    for ch in prange(chunks):
        lo = ch * n // chunks
        hi = (ch + 1) * n // chunks
        _triad_chunk(a[lo:hi], b[lo:hi], c[lo:hi], s)


@njit(parallel=True, cache=True)
def _gather(table, idx, prefetch, acc):
    """Add the rows ``table[idx[p]]`` into ``acc[chunk]``: a random-row gather like ``xl[j]``.

    The prefetch runs ``PREFETCH_DISTANCE`` rows ahead within a chunk, as in the kernels' rows.
    """
    rows = idx.size
    chunks = acc.shape[0]
    for ch in prange(chunks):
        _gather_chunk(table, idx[ch * rows // chunks:(ch + 1) * rows // chunks], prefetch, acc[ch])


@njit(cache=True)
def _pass_chunk(tables, idxs, lo, hi, acc):
    for c in range(acc.size):
        acc[c] = 0
    for p in range(lo, hi):
        if p + PREFETCH_DISTANCE < hi:
            for k in range(len(tables)):
                t = tables[k]
                prefetch_row(t, idxs[k][p + PREFETCH_DISTANCE], t.shape[1] * t.itemsize)
        for k in range(len(tables)):
            t = tables[k]
            j = idxs[k][p]
            for c in range(t.shape[1]):
                acc[c] += t[j, c]


@njit(parallel=True, cache=True)
def _pass_gather(tables, idxs, acc):
    """One step per edge: a random row of every table (``idxs[k][p]``), prefetched as the kernels do.

    The gathers of one pass and nothing else: ``tables`` and ``idxs`` are
    tuples (one per gathered array of the pass, shaped like it).
    """
    steps = idxs[0].size
    chunks = acc.shape[0]
    for ch in prange(chunks):
        _pass_chunk(tables, idxs, ch * steps // chunks, (ch + 1) * steps // chunks, acc[ch])


@intrinsic
def _vector_chains(typingctx, seed, iters, fused):
    """``PROBE_CHAINS`` independent chains of ``PROBE_LANES``-lane float32 vector arithmetic.

    ``fused``: every chain does ``acc = fma(acc, a, b)`` (``llvm.fma``, 2
    flops per lane); else even chains do ``acc = acc * a`` and odd chains
    ``acc = acc + b`` (1 flop per lane each), so multiplies and adds issue
    side by side as in the kernels' uncontracted code. The chains are
    independent, so the loop is bound by how many vector operations issue
    per cycle, not by their latency. ``seed`` holds
    ``a``, ``b`` and the initial accumulators (``(PROBE_CHAINS + 2) *
    PROBE_LANES`` floats). Returns the sum of all lanes (so nothing is dead).
    """
    if not (isinstance(seed, types.Array) and seed.dtype == types.float32):
        return None
    sig = types.float32(seed, types.int64, types.boolean)

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        f32 = ir.FloatType()
        vty = ir.VectorType(f32, PROBE_LANES)
        i64 = ir.IntType(64)
        vptr = builder.bitcast(arr.data, vty.as_pointer())

        def vec(k):
            return builder.load(builder.gep(vptr, [ir.Constant(i64, k)]), align=4)

        a, b = vec(0), vec(1)
        accs = [cgutils.alloca_once_value(builder, vec(2 + k)) for k in range(PROBE_CHAINS)]
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{PROBE_LANES}f32"
        )
        with builder.if_else(args[2]) as (then, otherwise):
            with then:
                with cgutils.for_range(builder, args[1]):
                    for acc in accs:
                        builder.store(builder.call(fma, [builder.load(acc), a, b]), acc)
            with otherwise:  # half the chains multiply, half add: both kinds of pipe busy
                with cgutils.for_range(builder, args[1]):
                    for k, acc in enumerate(accs):
                        op = builder.fmul(builder.load(acc), a) if k % 2 == 0 else builder.fadd(builder.load(acc), b)
                        builder.store(op, acc)
        total = builder.load(accs[0])
        for acc in accs[1:]:
            total = builder.fadd(total, builder.load(acc))
        result = builder.extract_element(total, ir.Constant(ir.IntType(32), 0))
        for k in range(1, PROBE_LANES):
            result = builder.fadd(result, builder.extract_element(total, ir.Constant(ir.IntType(32), k)))
        return result

    return sig, codegen


@njit(cache=True)
def _flops_probe(seed, iters, fused):
    return _vector_chains(seed, iters, fused)


def _vector_registers(seed):
    """Which register class the flop probe compiles to (zmm / ymm / xmm), from its assembly.

    Numba keeps no assembly for cached code, so an uncached twin is compiled for the inspection.
    """
    try:
        twin = njit(cache=False)(_flops_probe.py_func)
        twin(seed, 1, True)
        asm = "".join(twin.inspect_asm().values())
    except Exception:  # inspection is a nicety: never fail the run for it
        return "unknown"
    for reg in ("zmm", "ymm", "xmm"):
        if reg in asm:
            return reg
    return "unknown"


# ---------------------------------------------------------------------- timing helpers
def _samples(fn, reps, warmup=1):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _stats(samples):
    s = np.asarray(samples, dtype=float)
    return {"median": float(np.median(s)), "p10": float(np.percentile(s, 10)),
            "p90": float(np.percentile(s, 90)), "n": int(s.size)}


class _Threads:
    """Set Numba's thread count for a block and restore it."""

    def __init__(self, n):
        self.n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))

    def __enter__(self):
        self.old = numba.get_num_threads()
        numba.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        numba.set_num_threads(self.old)


def _loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# ---------------------------------------------------------------------- machine figures
def probe_sizes(size, cache_bytes):
    """Bytes per streamed array / gather table, gathers per probe, and the flop probe's duration."""
    if size == "tiny":
        return {"array_bytes": 4 << 20, "gathers": 20_000, "flop_seconds": 0.005}
    want = max(8 * cache_bytes, 256 << 20)  # at least 8x L3 (and 256 MiB where L3 is unknown)
    try:  # three arrays (triad) at most a quarter of the physical memory
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        want = min(want, phys // 12)
    except (ValueError, OSError):
        pass
    return {"array_bytes": int(want), "gathers": 2_000_000, "flop_seconds": 0.1}


def _record(template, samples):
    """A probe record: its description, every sample, and its rate from the best and from the median sample."""
    rec = dict(template, samples_s=list(samples))
    best, med = min(samples), _stats(samples)["median"]
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


class Machine:
    """Measures the machine figures: probe records at the start, and probes to run beside each workload's kernels."""

    def __init__(self, threads, size, reps, cache_bytes):
        self.threads = threads
        self.size = size
        self.reps = reps
        self.cache_bytes = cache_bytes
        self.sizes = probe_sizes(size, cache_bytes)
        self.records = []
        self._arrays = {}
        self._flop_iters = {}

    # -- probes: each is (record template, no-argument call)
    def _stream_probes(self, threads, kinds=("read", "scale", "triad")):
        if "a" not in self._arrays:
            n = self.sizes["array_bytes"] // 4
            self._arrays.update(a=np.ones(n, np.float32), b=np.ones(n, np.float32), c=np.ones(n, np.float32),
                                sums=np.zeros(CHUNKS, np.uint64))
        a, b, c, sums = (self._arrays[k] for k in ("a", "b", "c", "sums"))
        s = np.float32(1.0001)
        calls = {
            "read": (lambda: _read_sum(a.view(np.uint64), sums), a.nbytes),
            "scale": (lambda: _scale(a, b, s, CHUNKS), 2 * a.nbytes),
            "triad": (lambda: _triad(c, a, b, s, CHUNKS), 3 * a.nbytes),
        }
        return [({"probe": f"stream {k}", "threads": threads, "bytes": calls[k][1]}, calls[k][0]) for k in kinds]

    def _gather_probes(self, threads, table_bytes=None, prefetch=(False, True)):
        """Gathers of 64 and 256-byte rows from one table of ``table_bytes`` (default: far beyond the cache)."""
        table_bytes = int(self.sizes["array_bytes"] if table_bytes is None else table_bytes)
        key = ("table", table_bytes)
        if key not in self._arrays:
            self._arrays[key] = np.ones(max(64, table_bytes // 4), np.float32)
        flat = self._arrays[key]
        out = []
        for row_bytes in GATHER_ROW_BYTES:
            width = row_bytes // 4
            table = flat[: flat.size // width * width].reshape(-1, width)
            idx = np.random.default_rng(row_bytes).integers(0, table.shape[0], self.sizes["gathers"])
            acc = np.zeros((CHUNKS, width), np.float32)
            for pf in prefetch:
                tpl = {"probe": "gather", "threads": threads, "row_bytes": row_bytes, "prefetch": pf,
                       "table_request": table_bytes, "table_bytes": int(table.nbytes), "rows": int(idx.size)}
                out.append((tpl, lambda table=table, idx=idx, pf=pf, acc=acc: _gather(table, idx, pf, acc)))
        return out

    def _flop_probes(self, seconds):
        seed = np.full((PROBE_CHAINS + 2) * PROBE_LANES, 0.5, np.float32)
        seed[:PROBE_LANES] = 1.0  # a: a runtime 1.0 (no decay into denormals, nothing to fold)
        seed[PROBE_LANES:2 * PROBE_LANES] = 1e-6  # b
        theo = CPU["mhz"] * 1e6 * 2 * PROBE_LANES * 2 / 1e9 if CPU["mhz"] else None  # 2 FMA pipes x lanes x 2
        if "registers" not in self._arrays:
            self._arrays["registers"] = _vector_registers(seed)
        out = []
        for fused in (True, False):
            if fused not in self._flop_iters:
                _flops_probe(seed, 1000, fused)  # compile or load
                iters = 1 << 16
                while True:  # iterations per second
                    t0 = time.perf_counter()
                    _flops_probe(seed, iters, fused)
                    dt = time.perf_counter() - t0
                    if dt > 0.02 or iters > 1 << 34:
                        break
                    iters *= 4
                self._flop_iters[fused] = iters / max(dt, 1e-9)
            iters = max(1000, int(self._flop_iters[fused] * seconds))
            per_lane = 2 if fused else 1  # an FMA is 2 flops, a multiply or an add 1
            tpl = {"probe": "fma" if fused else "mul+add", "threads": 1, "lanes": PROBE_LANES,
                   "chains": PROBE_CHAINS, "iterations": iters, "flops": iters * PROBE_CHAINS * PROBE_LANES * per_lane,
                   "theoretical_gflops": theo, "registers": self._arrays["registers"]}
            out.append((tpl, lambda fused=fused, iters=iters: _flops_probe(seed, iters, fused)))
        return out

    def measure(self, log=print):
        """The machine table: streams and gathers far beyond the cache on 1 and ``threads`` threads, flops on 1."""
        log(f"machine: streams and gathers ({self.sizes['array_bytes'] / 2**20:.0f} MiB arrays) ...")
        for t in sorted({1, self.threads}):
            with _Threads(t) as th:
                for tpl, fn in self._stream_probes(th.n) + self._gather_probes(th.n):
                    self.records.append(_record(tpl, _samples(fn, self.reps)))
        log("machine: flops ...")
        for tpl, fn in self._flop_probes(self.sizes["flop_seconds"]):
            self.records.append(_record(tpl, _samples(fn, self.reps)))
        return self

    def _pass_probe(self, gathers):
        """The gathers of one pass alone: a table shaped like each gathered array, uniform random rows."""
        key = pass_key(gathers)
        if ("pass", key) not in self._arrays:
            rng = np.random.default_rng(len(self._arrays))
            tables, idxs = [], []
            for g in gathers:
                width = max(1, g.row_bytes // 4)
                rows = max(1, int(g.table_bytes) // (4 * width))
                tables.append(np.ones((rows, width), np.float32))
                idxs.append(rng.integers(0, rows, self.sizes["gathers"]))
            width = max(t.shape[1] for t in tables)
            self._arrays[("pass", key)] = (tuple(tables), tuple(idxs), np.zeros((CHUNKS, width), np.float32))
        tables, idxs, acc = self._arrays[("pass", key)]
        tpl = {"probe": "pass gathers", "threads": self.threads, "key": key, "steps": int(idxs[0].size),
               "tables": [[g.row_bytes, float(g.table_bytes)] for g in gathers]}
        return tpl, lambda: _pass_gather(tables, idxs, acc)

    def workload_probes(self, models, in_cache):
        """Probes to run in the same rounds as a workload's kernels (at ``threads``): the ceilings its bounds use.

        Streams (read, scale) and, per distinct gather pattern of the
        workload's kernels, its gathers alone, unless the step runs in
        cache; flops always (shorter calls).
        """
        probes = []
        if not in_cache:
            probes += self._stream_probes(self.threads, ("read", "scale"))
            seen = set()
            for m in models:
                if m.gathers and pass_key(m.gathers) not in seen:
                    seen.add(pass_key(m.gathers))
                    probes.append(self._pass_probe(m.gathers))
        probes += self._flop_probes(self.sizes["flop_seconds"] / 5)
        return probes

    def release_tables(self):
        """Free the tables of the workload probes (the far-beyond-cache one stays)."""
        keep = ("table", int(self.sizes["array_bytes"]))
        for key in [k for k in self._arrays if isinstance(k, tuple) and k != keep]:
            del self._arrays[key]

    def release(self):
        self._arrays.clear()

    # -- lookups
    def find(self, probe, threads=None, **kw):
        for r in self.records:
            if r["probe"] == probe and (threads is None or r["threads"] == threads) and all(
                r.get(k) == v for k, v in kw.items()
            ):
                return r
        raise KeyError((probe, threads, kw))

    def rates(self, records=(), median=False):
        """Rates from ``records`` (first) and the machine table (where ``records`` lack a probe)."""
        return Rates.from_records(list(records) + self.records, self.threads, self.cache_bytes, median)


@dataclass
class Rates:
    """The machine figures the bounds use, at the configured thread count."""

    read_bps: float  # streamed bytes read per second
    write_bps: float  # streamed bytes written per second (read-for-ownership included)
    gather: dict  # table bytes -> {64: s, 256: s}: seconds per gathered row (index stream excluded)
    flops_numba: float  # multiply + add rate x threads
    flops_blas: float  # FMA rate x threads
    cache_bytes: float
    threads: int = 1
    passes: dict = field(default_factory=dict)  # pass_key -> seconds per step of that pass's gathers alone

    @classmethod
    def from_records(cls, records, threads, cache_bytes, median=False):
        """Rates from probe records (the first record of each kind counts; best sample, or median)."""
        suffix = "_median" if median else ""

        def get(probe, **kw):
            return [r for r in records if r["probe"] == probe and all(r.get(k) == v for k, v in kw.items())]

        t = max(r["threads"] for r in records if r["probe"] == "stream read")
        read = get("stream read", threads=t)[0]["gbps" + suffix] * 1e9
        scale = get("stream scale", threads=t)[0]["gbps" + suffix] * 1e9
        # scale moves N bytes in and N out in time 2N / scale_bw; the read half costs N / read_bw
        per_written = max(2.0 / scale - 1.0 / read, 0.25 / read)
        gather = {}
        seen = set()
        for r in get("gather", threads=t):
            size = r.get("table_request", r.get("table_bytes"))
            key = (size, r["row_bytes"], r["prefetch"])
            if key in seen:  # an earlier record of the same probe wins
                continue
            seen.add(key)
            per_row = 1.0 / r["rows_per_s" + suffix]
            per_row = max(per_row - 8.0 / read, 0.5 * per_row)  # the probe's own index stream
            slot = gather.setdefault(size, {})
            slot[r["row_bytes"]] = min(slot.get(r["row_bytes"], math.inf), per_row)  # best of prefetch or not
        passes = {}
        for r in get("pass gathers", threads=t):
            if r["key"] not in passes:
                per_step = r["s_per_step" + suffix]
                # less the probe's own index streams (8 bytes per table and step)
                passes[r["key"]] = max(per_step - 8.0 * len(r["tables"]) / read, 0.5 * per_step)
        return cls(read, 1.0 / per_written, gather,
                   get("mul+add")[0]["gflops" + suffix] * 1e9 * t, get("fma")[0]["gflops" + suffix] * 1e9 * t,
                   float(cache_bytes), t, passes)

    @property
    def memory_table(self):
        """The largest table measured: the probe far larger than the cache."""
        return max(self.gather)

    def row_seconds(self, row_bytes, table_bytes=None):
        """Seconds per gathered row of ``row_bytes`` from a table of ``table_bytes`` (default: far beyond the cache).

        Uses the measurement at the nearest table size (log scale), linear in
        cache lines between the 64-byte (1 line) and 256-byte (4 lines) rows.
        """
        if table_bytes is None:
            size = self.memory_table
        else:
            size = min(self.gather, key=lambda m: abs(math.log(m / max(table_bytes, 1.0))))
        t64, t256 = self.gather[size][64], self.gather[size][256]
        lines = max(1, math.ceil(row_bytes / LINE))
        return t64 + (lines - 1) * max(0.0, (t256 - t64) / 3.0)


# ---------------------------------------------------------------------- the model
@dataclass(frozen=True)
class Gather:
    """``rows`` reads of rows of ``row_bytes`` at random positions of a table of ``table_bytes``."""

    table: str
    rows: float
    row_bytes: int
    table_bytes: float


@dataclass
class Model:
    """Minimum traffic and arithmetic of one kernel call (bytes by array name)."""

    reads: dict = field(default_factory=dict)
    writes: dict = field(default_factory=dict)
    gathers: list = field(default_factory=list)
    flops: float = 0.0
    blas: bool = False

    @property
    def stream_bytes(self):
        return sum(self.reads.values()) + sum(self.writes.values())

    def arrays(self):
        """Every array the kernel touches, name -> bytes."""
        out = dict(self.reads)
        for k, v in self.writes.items():
            out[k] = max(out.get(k, 0), v)
        for g in self.gathers:
            out[g.table] = max(out.get(g.table, 0), g.table_bytes)
        return out


@dataclass
class Kernel:
    name: str
    label: str
    model: Model
    run: object = None  # a no-argument callable, or None (model only)
    edge: bool = False  # an edge kernel (the 1.3x goal)


@dataclass
class Dims:
    """Sizes one layer step depends on."""

    n: int  # nodes
    nnz: int  # edges (self loops included)
    heads: int
    channels: int
    in_features: int
    f: int = 4  # float itemsize
    i: int = 8  # graph index itemsize (int64)
    theta_r: str = "linear"
    pairs: int = 0  # sum over targets of deg * (deg - 1) / 2 (pairwise Θ_R form)
    x_sparse: bool = False
    x_nnz: int = 0  # stored entries of sparse x
    xi: int = 4  # sparse x index itemsize
    bias: bool = True

    @property
    def hc(self):
        return self.heads * self.channels

    @property
    def att_blocks(self):
        return num_att_blocks(self.n)

    @classmethod
    def from_graph(cls, graph, x, heads, channels, theta_r="linear", dtype=np.float32):
        import scipy.sparse as sp

        deg = np.diff(graph.indptr).astype(np.int64)
        sparse = sp.issparse(x)
        return cls(
            n=int(graph.num_nodes), nnz=int(graph.nnz), heads=int(heads), channels=int(channels),
            in_features=int(x.shape[1]), f=np.dtype(dtype).itemsize, i=graph.indices.itemsize,
            theta_r=theta_r, pairs=int((deg * (deg - 1) // 2).sum()), x_sparse=sparse,
            x_nnz=int(x.nnz) if sparse else 0, xi=x.indices.itemsize if sparse else 4,
        )

    @classmethod
    def from_workload(cls, w):
        if w.kind != "layer" or not w.concat:
            raise ValueError(f"workload {w.name!r}: only single layers with concat=True are modelled")
        return cls.from_graph(w.graph, w.x, w.heads, w.out_features, w.theta_r)


# One function per kernel: the model (from Dims) and the call (from the prepared
# arrays ``s``, see prepare()). When a kernel's signature changes, only its own
# function changes.

def k_check_x(d, s=None):
    """Forward input checks: ``x`` and the parameters finite (``all_finite``)."""
    x_bytes = d.x_nnz * d.f if d.x_sparse else d.n * d.in_features * d.f
    params = 2 * d.hc * d.in_features * d.f
    # a finiteness check must look at every element once: one compare each is its arithmetic
    model = Model(reads={"x": x_bytes, "W": params}, flops=(x_bytes + params) // d.f)

    def run():
        V.check_features(s.x, "x", d.n, d.in_features, s.dtype)
        s.layer.params.check_finite()

    return Kernel("check_x", "checks: x, params finite", model, run if s else None)


def k_projections(d, s=None):
    """``xl = x @ W_l.T + b_l`` and ``xr = x @ W_r.T + b_r``: BLAS by row chunks, or the sparse kernel."""
    w_bytes = d.in_features * d.hc * d.f
    out = {"xl": d.n * d.hc * d.f, "xr": d.n * d.hc * d.f}
    if d.x_sparse:
        # W.T made contiguous (read + write), then one pass over x with rows of W_l.T, W_r.T gathered
        model = Model(
            reads={"x_indptr": (d.n + 1) * d.xi, "x_indices": d.x_nnz * d.xi, "x": d.x_nnz * d.f, "W": 2 * w_bytes},
            writes={**out, "W_T": 2 * w_bytes},
            gathers=[Gather("W_l_T", d.x_nnz, d.hc * d.f, w_bytes), Gather("W_r_T", d.x_nnz, d.hc * d.f, w_bytes)],
            flops=2 * 2 * d.x_nnz * d.hc + 2 * d.n * d.hc,
        )

        def run():
            n = d.n
            csr_dense_matmul2(
                s.x.indptr, s.x.indices, s.x.data, np.ascontiguousarray(s.W_l.T), np.ascontiguousarray(s.W_r.T),
                s.b_l, s.b_r, s.xl.reshape(n, d.hc), s.xr.reshape(n, d.hc),
            )

        return Kernel("projections", "sparse x @ W_l.T, x @ W_r.T (csr_dense_matmul2)", model, run if s else None)
    model = Model(
        reads={"x": d.n * d.in_features * d.f, "W": 2 * w_bytes},
        writes=out,
        flops=2 * (2 * d.n * d.in_features * d.hc + d.n * d.hc),
        blas=True,
    )

    def run():
        n = d.n
        with blas_single_thread():
            dense_projections(s.x, [(s.W_l, s.b_l_opt, s.xl.reshape(n, d.hc)),
                                     (s.W_r, s.b_r_opt, s.xr.reshape(n, d.hc))])

    return Kernel("projections", "x @ W_l.T, x @ W_r.T (BLAS)", model, run if s else None)


def k_forward(d, s=None):
    """Fused forward ``gatv2_forward``: scores, row softmax, aggregation; one ``xl[j]`` gather per edge."""
    row = d.hc * d.f
    model = Model(
        reads={"indptr": (d.n + 1) * d.i, "indices": d.nnz * d.i, "xr": d.n * row, "att": row},
        writes={"alpha": d.nnz * d.heads * d.f, "out": d.n * row},
        gathers=[Gather("xl", d.nnz, row, d.n * row)],
        # per edge and channel: z add, slope mul, att mul, score add; aggregation mul + add.
        # per edge and head: subtract max, exp, add to denominator, normalise; per node and head: 1 / denom
        flops=6 * d.nnz * d.hc + 4 * d.nnz * d.heads + d.n * d.heads,
    )

    def run():
        gatv2_forward(s.indptr, s.indices, s.xl, s.xr, s.att, s.slope, s.kind, s.u, s.weT, s.edge_scale, s.alpha,
                      s.out)

    return Kernel("forward", "fused forward (gatv2_forward)", model, run if s else None, edge=True)


def k_out_bias(d, s=None):
    """``out += bias`` (the layer finishes its output in place)."""
    model = Model(reads={"out": d.n * d.hc * d.f}, writes={"out": d.n * d.hc * d.f}, flops=d.n * d.hc)

    def run():
        s.out2d += s.bias

    return Kernel("out_bias", "out += bias", model, run if s else None)


def k_check_grad(d, s=None):
    """Backward input check (``grad_out`` finite) and the output-bias gradient ``grad_out.sum(0)``: one read is the minimum."""
    model = Model(reads={"grad": d.n * d.hc * d.f}, flops=2 * d.n * d.hc)  # a compare and an add per element

    def run():
        V.check_dense(s.grad_out, "grad_out", (d.n, d.hc), s.dtype)
        s.grad_out.sum(axis=0)

    return Kernel("check_grad", "checks: grad_out finite + bias grad", model, run if s else None)


def k_target(d, s=None):
    """Backward target pass ``gatv2_backward_target``: ``A_ij``, ``δ_ij``, ``P_i``, ∂a partials; one ``xl[j]`` gather per edge."""
    row = d.hc * d.f
    edge = d.nnz * d.heads * d.f
    ehc = d.nnz * d.hc
    if d.theta_r == "pairwise":
        # dot (mul + add), z add, ∂a (slope mul, δ mul, add); slopes of the row (z add) per edge;
        # per pair and head: α α (A - A) (2 mul + sub), per pair and channel: (s - s), mul, add
        flops = 6 * ehc + ehc + 3 * d.pairs * d.heads + 3 * d.pairs * d.hc
    else:
        # dot (mul + add), z add, ∂a (slope mul, δ mul, add), P (δ mul, add)
        flops = 8 * ehc
    flops += 4 * d.nnz * d.heads + d.n * d.hc  # Ā_i and δ_ij per edge and head; P_i *= a per node
    model = Model(
        reads={"indptr": (d.n + 1) * d.i, "indices": d.nnz * d.i, "xr": d.n * row, "grad": d.n * row,
               "alpha": edge, "att": row},
        writes={"upstream": edge, "delta": edge, "p_term": d.n * row, "att_part": d.att_blocks * row},
        gathers=[Gather("xl", d.nnz, row, d.n * row)],
        flops=flops,
    )

    def run():
        gatv2_backward_target(
            s.indptr, s.indices, s.xl, s.xr, s.att, s.slope, s.kind, s.u, s.weT, s.edge_scale, s.alpha, s.g_heads,
            d.theta_r == "pairwise", s.upstream, s.delta, s.p_term, s.att_part, s.we_part, s.grad_u,
        )

    return Kernel("target", "backward target pass", model, run if s else None, edge=True)


def k_source(d, s=None):
    """Backward source pass ``gatv2_backward_source``: ``Q_j`` in source-major order; gathers ``xr[i]``,
    ``grad[i]``, ``alpha[e]``, ``delta[e]`` per edge, reads ``xl[j]`` in order."""
    row = d.hc * d.f
    erow = d.heads * d.f
    model = Model(
        reads={"src_indptr": (d.n + 1) * d.i, "src_edges": d.nnz * d.i, "src_targets": d.nnz * d.i,
               "xl": d.n * row, "att": row},
        writes={"q_term": d.n * row},
        gathers=[Gather("xr", d.nnz, row, d.n * row), Gather("grad", d.nnz, row, d.n * row),
                 Gather("alpha", d.nnz, erow, d.nnz * erow), Gather("delta", d.nnz, erow, d.nnz * erow)],
        # per edge and channel: z add, δ·a mul, ·s mul, α·g mul, add, accumulate
        flops=6 * d.nnz * d.hc,
    )

    def run():
        gatv2_backward_source(
            s.src_indptr, s.src_edges, s.src_targets, s.xl, s.xr, s.att, s.slope, s.kind, s.u, s.weT,
            s.edge_scale, s.alpha, s.delta, s.g_heads, s.q_term,
        )

    return Kernel("source", "backward source pass", model, run if s else None, edge=True)


def k_dense_backward(d, s=None):
    """``gradᵀ x`` for both weights, their bias sums and ``grad_x = grad_l @ W_l + grad_r @ W_r`` (BLAS, row chunks)."""
    xb = d.n * d.in_features * d.f
    gb = d.n * d.hc * d.f
    wb = d.hc * d.in_features * d.f
    model = Model(
        reads={"x": xb, "q_term": gb, "p_term": gb, "W": 2 * wb},
        writes={"grad_x": xb, "gW": 2 * wb},
        flops=4 * 2 * d.n * d.hc * d.in_features + 2 * d.n * d.hc + d.n * d.in_features,
        blas=True,
    )

    def run():
        with blas_single_thread():
            dense_backward(s.x, s.grad_xl, s.grad_xr, s.W_l, s.W_r, s.grad_x, d.bias)

    return Kernel("dense_backward", "gradᵀ x, grad @ W (BLAS)", model, run if s else None)


def k_sparse_transpose(d, s=None):
    """``x.T.tocsr()`` (scipy), which the layer needs for the sparse weight gradients."""
    nz = d.x_nnz * (d.xi + d.f)
    model = Model(reads={"x_indptr": (d.n + 1) * d.xi, "x": nz},
                  writes={"x_t_indptr": (d.in_features + 1) * d.xi, "x_t": nz})

    def run():
        s.x.T.tocsr()

    return Kernel("sparse_transpose", "x.T.tocsr() (scipy)", model, run if s else None)


def k_sparse_weight_grads(d, s=None):
    """``(x_t @ grad_l).T``, ``(x_t @ grad_r).T`` (``csr_dense_matmul2``), made contiguous, and the bias sums."""
    gb = d.n * d.hc * d.f
    wb = d.in_features * d.hc * d.f
    model = Model(
        reads={"x_t_indptr": (d.in_features + 1) * d.xi, "x_t": d.x_nnz * (d.xi + d.f),
               "q_term": gb, "p_term": gb, "gW_T": 2 * wb},
        writes={"gW_T": 2 * wb, "gW": 2 * wb},
        gathers=[Gather("q_term", d.x_nnz, d.hc * d.f, gb), Gather("p_term", d.x_nnz, d.hc * d.f, gb)],
        flops=2 * 2 * d.x_nnz * d.hc + 2 * d.n * d.hc,
    )

    def run():
        x_t = s.x_t
        g_l = np.empty((x_t.shape[0], d.hc), s.dtype)
        g_r = np.empty((x_t.shape[0], d.hc), s.dtype)
        empty = np.zeros(0, s.dtype)
        csr_dense_matmul2(x_t.indptr, x_t.indices, x_t.data, s.grad_xl, s.grad_xr, empty, empty, g_l, g_r)
        np.ascontiguousarray(g_l.T)
        np.ascontiguousarray(g_r.T)
        s.grad_xl.sum(axis=0)
        s.grad_xr.sum(axis=0)

    return Kernel("sparse_weight_grads", "sparse x_tᵀ grad (csr_dense_matmul2) + bias sums", model,
                  run if s else None)


def kernels_for(d, s=None):
    """The kernels of one forward + backward, in the order the layer runs them."""
    ks = [k_check_x, k_projections, k_forward, k_out_bias, k_check_grad, k_target, k_source]
    ks += [k_sparse_transpose, k_sparse_weight_grads] if d.x_sparse else [k_dense_backward]
    return [k(d, s) for k in ks]


def step_footprint(kernels):
    """Bytes of the union of all arrays the step touches."""
    arrays = {}
    for k in kernels:
        for name, b in k.model.arrays().items():
            arrays[name] = max(arrays.get(name, 0), b)
    return float(sum(arrays.values()))


def gathered_tables(model):
    """Bytes of the distinct tables one pass gathers from (they share the cache)."""
    return float(sum({g.table: g.table_bytes for g in model.gathers}.values()))


def pass_key(gathers):
    """What a pass's gather probe must imitate: the row size and table size of each gathered array."""
    return ";".join(f"{g.row_bytes}B@{int(g.table_bytes)}" for g in gathers)


def bound(model, rates, in_cache=False, ideal_cache=False):
    """Lower bound of one kernel's time from its model and the machine rates (see the module docstring).

    ``in_cache``: the whole step fits in the cache, only compute counts.
    Otherwise streams move at the measured bandwidths and the gathers take
    what the probe of this pass's gathers alone took per step (a random row
    of every gathered array), times the pass's steps; without such a
    measurement, every row costs the per-row time measured for a table as
    large as the pass's tables together. ``ideal_cache``: the stricter
    variant in which an ideal cache also holds the share ``cache / tables``
    of the tables, whose gathers are then free after one compulsory read.

    Returns seconds per component, the bound, the bounding resource and the traffic.
    """
    tables = gathered_tables(model)
    resident = 0.0
    if in_cache:
        resident = 1.0
        read_b = write_b = gather_rows = gather_s = 0.0
    else:
        read_b = sum(model.reads.values())
        write_b = sum(model.writes.values())
        key = pass_key(model.gathers)
        if model.gathers and key in rates.passes:
            gather_s = sum(g.rows for g in model.gathers) / len(model.gathers) * rates.passes[key]
        else:
            gather_s = sum(g.rows * rates.row_seconds(g.row_bytes, tables) for g in model.gathers)
        if ideal_cache:
            resident = min(1.0, rates.cache_bytes / tables) if tables > 0 else 1.0
            # compulsory read of the resident part of each table: once per row, at most what the pass touches
            read_b += sum(min(g.rows * g.row_bytes, g.table_bytes) * resident for g in model.gathers)
            gather_s *= 1.0 - resident
        gather_rows = sum(g.rows * (1.0 - resident) for g in model.gathers)
    stream_s = read_b / rates.read_bps + write_b / rates.write_bps
    compute_s = model.flops / (rates.flops_blas if model.blas else rates.flops_numba)
    memory_s = stream_s + gather_s
    bound_s = max(memory_s, compute_s)
    if bound_s == 0:
        by = "none (in cache, no arithmetic)"
    elif compute_s >= memory_s:
        by = "compute"
    else:
        by = "gather" if gather_s > stream_s else "stream"
    return {"stream_s": stream_s, "gather_s": gather_s, "compute_s": compute_s, "bound_s": bound_s, "by": by,
            "read_bytes": read_b, "write_bytes": write_b, "gather_rows": gather_rows, "gathered_tables": tables,
            "resident_fraction": resident, "flops": float(model.flops)}


# ---------------------------------------------------------------------- the real kernels
class State:
    """Arrays prepared as ``gatfast/layer.py`` prepares them, from one forward + backward of the layer."""

    def __init__(self, w, runner):
        from gatfast.kernels import ACTIVATIONS

        layer = runner.layer
        self.layer = layer
        self.dtype = layer.dtype
        out, cache = layer.forward(w.graph, w.x)
        layer.backward(cache, runner.grad, theta_r=w.theta_r)
        g = cache.graph
        n, H, C = g.num_nodes, layer.heads, layer.out_features
        p = cache.params
        self.x = cache.x
        self.W_l, self.W_r = p["W_l"], p["W_r"]
        self.b_l_opt, self.b_r_opt = p.get("b_l"), p.get("b_r")
        empty = np.zeros(0, self.dtype)
        self.b_l = empty if self.b_l_opt is None else self.b_l_opt
        self.b_r = empty if self.b_r_opt is None else self.b_r_opt
        self.bias = p["bias"]
        self.att = p["att"]
        self.slope = self.dtype.type(layer.negative_slope)
        self.kind = ACTIVATIONS[layer.attention_activation]
        self.indptr, self.indices = g.indptr, g.indices
        self.src_indptr, self.src_edges = g.source_order()
        self.src_targets = g.targets()[self.src_edges]
        self.edge_scale = cache.edge_scale
        self.xl = np.array(cache.xl)  # own copies: the projections kernel overwrites xl and xr
        self.xr = np.array(cache.xr)
        self.alpha = np.array(cache.alpha)
        self.out = np.empty((n, H, C), self.dtype)
        self.out2d = self.out.reshape(n, H * C)
        self.out2d[...] = out
        self.grad_out = runner.grad
        self.g_heads = runner.grad.reshape(n, H, C)
        nnz = g.nnz
        self.upstream = np.empty((nnz, H), self.dtype)
        self.delta = np.empty((nnz, H), self.dtype)
        self.p_term = np.empty((n, H, C), self.dtype)
        self.q_term = np.empty((n, H, C), self.dtype)
        self.att_part = np.empty((num_att_blocks(n), H, C), self.dtype)
        self.u = np.zeros((0, 1), self.dtype)  # no edge features
        self.weT = np.zeros((H, 1, C), self.dtype)
        self.we_part = np.empty((0, H, 1, C), self.dtype)
        self.grad_u = np.empty((0, 1), self.dtype)
        self.grad_x = None if self.x_sparse else np.empty(self.x.shape, self.dtype)
        self.x_t = self.x.T.tocsr() if self.x_sparse else None
        # real gradients of the projections for the dense products
        gatv2_backward_target(self.indptr, self.indices, self.xl, self.xr, self.att, self.slope, self.kind,
                              self.u, self.weT, self.edge_scale, self.alpha, self.g_heads, w.theta_r == "pairwise",
                              self.upstream, self.delta, self.p_term, self.att_part, self.we_part, self.grad_u)
        gatv2_backward_source(self.src_indptr, self.src_edges, self.src_targets, self.xl, self.xr, self.att,
                              self.slope, self.kind, self.u, self.weT, self.edge_scale, self.alpha, self.delta,
                              self.g_heads, self.q_term)
        self.grad_xl = self.q_term.reshape(n, H * C)
        self.grad_xr = self.p_term.reshape(n, H * C)

    @property
    def x_sparse(self):
        import scipy.sparse as sp

        return sp.issparse(self.x)


def time_workload(name, size, reps, machine, log=print):
    """Build one workload, then time its kernels, the whole step and the probes of its ceilings in rounds.

    Every round runs each kernel, the step and each probe once, so a
    machine shared with other work slows kernels and ceilings alike. The
    bounds use the probes' medians (the ratio of medians), and separately
    their best samples (for best/bound).
    """
    w = workloads.make_workload(name, size)
    d = Dims.from_workload(w)
    runner = workloads.GatfastRunner(w)
    s = State(w, runner)
    kernels = kernels_for(d, s)
    footprint = step_footprint(kernels)
    in_cache = footprint <= machine.cache_bytes
    probes = machine.workload_probes([k.model for k in kernels], in_cache)
    items = [(k.name, k.run) for k in kernels] + [("step", runner.forward_backward)]
    items += [(f"probe {i}", fn) for i, (_, fn) in enumerate(probes)]
    for _, fn in items:  # warm-up (compilation happened in State already)
        for _ in range(2):
            fn()
    samples = {key: [] for key, _ in items}
    load_before = _loadavg()
    for _ in range(reps):
        for key, fn in items:
            t0 = time.perf_counter()
            fn()
            samples[key].append(time.perf_counter() - t0)
    load_after = _loadavg()
    machine.release_tables()
    ceilings = [_record(tpl, samples[f"probe {i}"]) for i, (tpl, _) in enumerate(probes)]
    rates = machine.rates(ceilings, median=True)
    rates_best = machine.rates(ceilings)
    rows = []
    for k in kernels:
        b = bound(k.model, rates, in_cache)
        best = bound(k.model, rates_best, in_cache)["bound_s"]
        ideal = bound(k.model, rates, in_cache, ideal_cache=True)
        st = _stats(samples[k.name])
        rows.append({"kernel": k.name, "label": k.label, "edge": k.edge, "measured": st,
                     "samples_s": samples[k.name],
                     "ratio": st["median"] / b["bound_s"] if b["bound_s"] > 0 else None,
                     "best_bound_s": best,
                     "best_ratio": min(samples[k.name]) / best if best > 0 else None,
                     "model": {"reads": k.model.reads, "writes": k.model.writes,
                               "gathers": [asdict(g) for g in k.model.gathers], "flops": float(k.model.flops),
                               "blas": k.model.blas},
                     "ideal_cache": {key: ideal[key] for key in ("bound_s", "by", "resident_fraction",
                                                                   "gather_rows")}, **b})
    step = _stats(samples["step"])
    step_bound = sum(r["bound_s"] for r in rows)
    step_best_bound = sum(r["best_bound_s"] for r in rows)
    kernel_sum = sum(r["measured"]["median"] for r in rows)
    worst = max((r for r in rows if r["edge"]), key=lambda r: r["ratio"])
    result = {
        "workload": name, "description": workloads.WORKLOADS[name][1], "size": size, "dims": asdict(d),
        "footprint_bytes": footprint, "in_cache": in_cache, "kernels": rows,
        "ceilings": ceilings, "rates": asdict(rates), "rates_best": asdict(rates_best),
        "step": {"measured": step, "samples_s": samples["step"], "bound_s": step_bound,
                 "ratio": step["median"] / step_bound if step_bound > 0 else None,
                 "best_bound_s": step_best_bound,
                 "best_ratio": min(samples["step"]) / step_best_bound if step_best_bound > 0 else None,
                 "kernels_measured_s": kernel_sum, "other_s": step["median"] - kernel_sum},
        "goals": {"edge_kernel_limit": GOALS["edge_kernel"], "worst_edge_ratio": worst["ratio"],
                  "worst_edge_kernel": worst["kernel"], "edge_met": worst["ratio"] <= GOALS["edge_kernel"]},
        "loadavg": [load_before, load_after],
    }
    if name == "large":
        result["goals"]["step_limit"] = GOALS["large_step"]
        result["goals"]["step_met"] = result["step"]["ratio"] <= GOALS["large_step"]
    log(f"{name}: step {step['median'] * 1e3:.2f} ms, bound {step_bound * 1e3:.2f} ms")
    return result


# ---------------------------------------------------------------------- report
def _ms(s):
    return f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}"


def _mb(b):
    return f"{b / 1e6:.2f}"


def context_line(meta):
    m = meta["cpu"]
    return (f"_{m['model']}, {m['usable_cpus']} cores, {m['simd']} ({m['simd_bits']}-bit), "
            f"{meta['threads']} threads, {meta['date']}, `{meta['command']}`_")


def _rate_text(r, median=False):
    """A probe's rate as text: best of its repetitions, or the median."""
    if r["probe"].startswith("stream"):
        return f"{r['gbps_median' if median else 'gbps']:.1f} GB/s"
    if r["probe"] == "gather":
        rows = r["rows_per_s_median"] if median else r["rows_per_s"]
        return f"{rows * r['row_bytes'] / 1e9:.2f} GB/s, {rows / 1e6:.1f} M rows/s"
    text = f"{r['gflops_median' if median else 'gflops']:.1f} GFLOP/s"
    if not median and r["fraction_of_peak"]:
        text += f" ({r['fraction_of_peak'] * 100:.0f}% of {r['theoretical_gflops']:.0f})"
    return text


def _probe_name(r):
    if r["probe"].startswith("stream"):
        return r["probe"]
    if r["probe"] == "gather":
        return (f"gather {r['row_bytes']} B rows, {'prefetch' if r['prefetch'] else 'no prefetch'} "
                f"(table {r['table_bytes'] / 2**20:.0f} MiB)")
    return f"{r['probe']} float32, {r['lanes']} lanes x {r['chains']} chains ({r['registers']} registers)"


def _rates_text(rates, in_cache=False, per_row=True):
    """One line of the ceilings a set of bounds used (a Rates or its asdict)."""
    r = rates if isinstance(rates, dict) else asdict(rates)
    compute = (f"compute {r['flops_numba'] / 1e9:.0f} GFLOP/s (mul+add, Numba kernels) / "
               f"{r['flops_blas'] / 1e9:.0f} GFLOP/s (FMA, BLAS)")
    if in_cache:
        return compute + "."
    gathers = []
    for size in sorted(r["gather"], key=float):
        g = r["gather"][size]
        gathers.append(f"{float(size) / 2**20:.0f} MiB table {g[64] * 1e9:.1f} / {g[256] * 1e9:.1f} ns")
    text = f"read {r['read_bps'] / 1e9:.1f} GB/s, write {r['write_bps'] / 1e9:.1f} GB/s (derived from scale and read); "
    if per_row:
        text += f"a gathered 64 / 256-byte row: {'; '.join(gathers)}; "
    for key, per_step in r.get("passes", {}).items():
        parts = ", ".join(f"{p.split('@')[0]} rows of {int(p.split('@')[1]) / 2**20:.1f} MiB" for p in key.split(";"))
        text += f"a pass gathering ({parts}): {per_step * 1e9:.1f} ns per step; "
    return text + compute + "."


def markdown(meta, machine_records, rates, results):
    ctx = context_line(meta)
    cpu = meta["cpu"]
    lines = ["# Roofline: gatfast kernels against this machine's limits", "",
             f"{ctx}", "",
             f"L3 {cpu['l3_bytes'] / 2**20:.0f} MiB (cache assumed by the model: {rates.cache_bytes / 2**20:.0f} "
             f"MiB), size `{meta['size']}`, {meta['reps']} repetitions per kernel, Numba {meta['numba']}, NumPy "
             f"{meta['numpy']}, threading layer {meta['threading_layer']}. 1-minute load average before / after: "
             f"{meta['load']}. The machine may be shared with other work: compare ratios, not absolute times.",
             ""]
    if meta["size"] == "tiny":
        lines += ["**Tiny size: a smoke test, the figures mean nothing.**", ""]
    lines += ["## Machine", "", ctx, "",
              "Measured at the start of the run: best and median of the repetitions; time spread = 10th-90th "
              "percentile of one probe call.", "",
              "| probe | threads | best | median | time spread |", "|---|---:|---:|---:|---:|"]
    for r in machine_records:
        st = _stats(r["samples_s"])
        lines.append(f"| {_probe_name(r)} | {r['threads']} | {_rate_text(r)} | {_rate_text(r, True)} "
                     f"| {st['p10'] * 1e3:.1f}-{st['p90'] * 1e3:.1f} ms |")
    fma = next((r for r in machine_records if r["probe"] == "fma"), None)
    lines += [""]
    if fma and fma["implied_ghz"]:
        lines += [f"The FMA probe's rate is {fma['implied_ghz']:.2f} GHz x 2 full-width FMAs per cycle; the "
                  f"theoretical figure uses the `cpu MHz` of /proc/cpuinfo ({cpu['mhz']:.0f} MHz, nominal on "
                  "virtual machines, so boost clocks can exceed 100%) and assumes two FMA pipes per core.", ""]
    lines += [f"From these (best samples, {rates.threads} threads): {_rates_text(rates)}",
              f"Check of the stream model: triad predicted from the read and write costs "
              f"{meta['triad_predicted_gbps']:.1f} GB/s, measured {meta['triad_measured_gbps']:.1f} GB/s.", "",
              "The bounds of each workload use the same probes run again in that workload's timing rounds "
              "(medians), so that other work on the machine slows kernels and ceilings alike.", ""]
    for res in results:
        d = res["dims"]
        where = "in cache (only compute counts)" if res["in_cache"] else "from memory"
        lines += [f"## {res['workload']}", "", ctx, "",
                  f"{res['description']}: {d['n']:,} nodes, {d['nnz']:,} edges, {d['heads']} x {d['channels']} "
                  f"channels, {d['in_features']} input features{' (sparse)' if d['x_sparse'] else ''}, "
                  f"Θ_R {d['theta_r']}. Step footprint {res['footprint_bytes'] / 2**20:.1f} MiB: {where}. "
                  "Bound: streams at the measured bandwidths, gathers at what the same gathers alone took (a probe "
                  "gathering a random row of every array the pass gathers from, per step); ideal-cache bound: the "
                  "L3 also holds its share of those arrays, whose gathers are then free. Ceilings measured in this "
                  f"workload's rounds (medians): {_rates_text(res['rates'], res['in_cache'], per_row=False)}", "",
                  "| kernel | measured ms, median (p10-p90) | bound ms | measured/bound | best/bound | bound by "
                  "| stream MB | gathered rows (tables MiB) | GFLOP | ideal-cache bound ms |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
        for r in res["kernels"]:
            m = r["measured"]
            ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
            best = "—" if r["best_ratio"] is None else f"{r['best_ratio']:.2f}"
            edge = " (edge)" if r["edge"] else ""
            rows = (f"{sum(g['rows'] for g in r['model']['gathers']):,.0f} ({r['gathered_tables'] / 2**20:.1f})"
                    if r["model"]["gathers"] else "—")
            lines.append(
                f"| {r['label']}{edge} | {_ms(m['median'])} ({_ms(m['p10'])}-{_ms(m['p90'])}) | {_ms(r['bound_s'])} "
                f"| {ratio} | {best} | {r['by']} | {_mb(r['read_bytes'] + r['write_bytes'])} "
                f"| {rows} | {r['flops'] / 1e9:.3f} | {_ms(r['ideal_cache']['bound_s'])} |")
        st = res["step"]
        m = st["measured"]
        lines.append(f"| other (Python, allocations, small ops: step minus kernels) | {_ms(st['other_s'])} | — "
                     "| — | — | — | | | | |")
        lines.append(f"| **whole fwd+bwd step** | {_ms(m['median'])} ({_ms(m['p10'])}-{_ms(m['p90'])}) "
                     f"| {_ms(st['bound_s'])} | {st['ratio']:.2f} | {st['best_ratio']:.2f} | sum of kernels "
                     "| | | | |")
        lines.append("")
    lines += ["## Goals", "", ctx, "",
              f"Every edge kernel within {GOALS['edge_kernel']}x of its bound; the whole `large` step within "
              f"{GOALS['large_step']}x (medians).", "",
              "| workload | worst edge kernel ratio | edge goal met | step ratio | step goal met |",
              "|---|---:|---|---:|---|"]
    for res in results:
        g = res["goals"]
        step_met = {True: "yes", False: "**no**", None: "—"}[g.get("step_met")]
        lines.append(f"| {res['workload']} | {g['worst_edge_ratio']:.2f} ({g['worst_edge_kernel']}) "
                     f"| {'yes' if g['edge_met'] else '**no**'} | {res['step']['ratio']:.2f} | {step_met} |")
    lines += ["", "Model assumptions: the docstring of `bench/roofline.py` and `bench/README.md`.", ""]
    return "\n".join(lines)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="Numba threads (and BLAS chunks) for the kernels")
    parser.add_argument("--size", choices=workloads.SIZES, default="full")
    parser.add_argument("--reps", type=int, default=20,
                        help="timed rounds per workload (median); the machine table at the start uses at most 7")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help="comma-separated names")
    parser.add_argument("--out", default=str(HERE.parent / "runs" / "roofline"))
    parser.add_argument("--cache-mb", type=float, default=None,
                        help="cache size the model assumes (default: the L3 size; 0: never count the step as cache-resident)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    names = [n for n in args.workloads.split(",") if n]
    bad = [n for n in names if n not in workloads.WORKLOADS or workloads.WORKLOADS[n][0] != "layer"]
    if bad or not names:
        layer_names = [n for n, (kind, _) in workloads.WORKLOADS.items() if kind == "layer"]
        parser.error(f"unknown or non-layer workloads {bad}; choose from {layer_names}")
    threads = max(1, min(args.threads, numba.config.NUMBA_NUM_THREADS))
    if threads != args.threads:
        print(f"--threads {args.threads}: Numba allows {threads} (NUMBA_NUM_THREADS)", file=sys.stderr)
    cache_bytes = CPU["l3_bytes"] if args.cache_mb is None else args.cache_mb * 2**20
    if args.cache_mb is None and not cache_bytes:
        cache_bytes = 32 << 20
        print("L3 size unknown: assuming 32 MiB (use --cache-mb)", file=sys.stderr)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    load0 = _loadavg()
    machine = Machine(threads, args.size, max(1, min(args.reps, 7)), cache_bytes).measure(log)
    rates = machine.rates()
    results = []
    with _Threads(threads):
        for name in names:
            log(f"{name}: building and timing ...")
            results.append(time_workload(name, args.size, args.reps, machine, log))
    machine.release()
    load1 = _loadavg()

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
        "threading_layer": _threading_layer(),
        "load": " / ".join("?" if v is None else f"{v:.2f}" for v in (load0, load1)),
        "triad_predicted_gbps": predicted,
        "triad_measured_gbps": triad["gbps"],
        "probe_sizes": machine.sizes,
    }
    text = markdown(meta, machine.records, rates, results)
    out = Path(args.out)
    raw = {"meta": meta, "machine": machine.records, "rates": asdict(rates), "results": results, "goals": GOALS}
    atomic_write_text(out / "roofline.json", json.dumps(_jsonable(raw), indent=1))
    atomic_write_text(out / "roofline.md", text)
    print(text)
    return 0


def _threading_layer():
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run yet
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
