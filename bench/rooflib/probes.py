"""The probes of the machine figures: small Numba kernels (``cache=True``, no fast-math).

Each parallel probe hands contiguous slices to a serial helper: LLVM
vectorises the helper's loop, while the same loop written inside the
``prange`` body stayed scalar (vmulss instead of vmulps; about half the
bandwidth on one thread).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from gatfast.kernels.prefetch import PREFETCH_DISTANCE, prefetch_row

from .cpu import CPU

CHUNKS = 64  # fixed work split of the parallel probes
PROBE_LANES = CPU["lanes_f32"]
PROBE_CHAINS = 16 if PROBE_LANES == 16 else 12  # 12 + 2 operands fit the 16 ymm registers of AVX2


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
def read_sum(a, out):
    """Sum of ``a`` (uint64) in ``out.size`` fixed chunks: an integer sum LLVM vectorises freely."""
    n = a.size
    chunks = out.size
    for ch in prange(chunks):
        out[ch] = _sum_chunk(a[ch * n // chunks:(ch + 1) * n // chunks])


@njit(parallel=True, cache=True)
def scale(a, b, s, chunks):
    """STREAM scale ``b = s * a``."""
    n = a.size
    for ch in prange(chunks):
        lo = ch * n // chunks
        hi = (ch + 1) * n // chunks
        _scale_chunk(a[lo:hi], b[lo:hi], s)


@njit(parallel=True, cache=True)
def triad(a, b, c, s, chunks):
    """STREAM triad ``a = b + s * c`` (no contraction into FMA without fast-math)."""
    n = a.size
    for ch in prange(chunks):
        lo = ch * n // chunks
        hi = (ch + 1) * n // chunks
        _triad_chunk(a[lo:hi], b[lo:hi], c[lo:hi], s)


@njit(parallel=True, cache=True)
def gather(table, idx, prefetch, acc):
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
def pass_gather(tables, idxs, acc):
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
def flops_probe(seed, iters, fused):
    return _vector_chains(seed, iters, fused)


def vector_registers(seed):
    """Which register class the flop probe compiles to (zmm / ymm / xmm), from its assembly.

    Numba keeps no assembly for cached code, so an uncached twin is compiled for the inspection.
    """
    try:
        twin = njit(cache=False)(flops_probe.py_func)
        twin(seed, 1, True)
        asm = "".join(twin.inspect_asm().values())
    except Exception:  # inspection is a nicety: never fail the run for it
        return "unknown"
    for reg in ("zmm", "ymm", "xmm"):
        if reg in asm:
            return reg
    return "unknown"
