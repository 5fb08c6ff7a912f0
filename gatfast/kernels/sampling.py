"""Neighbour sampling kernels: pick up to ``k`` in-edges per target, then relabel.

Without replacement, keyed: target ``t``'s picks depend only on the key and
``t``'s global id (Floyd's algorithm driven by ``uniform_at(key, t, j)``),
so a node's sampled neighbourhood is the same in any batch or shard, for any
thread count. Picks are returned in CSR order. ``fanout < 0`` keeps every
in-edge. The kernels release the GIL, so background threads can sample the
next batches while the current one trains (:func:`sample_hop`, a whole hop
in one call), and ``pick_rows`` runs on parts of a hop's targets on
several threads (``gatfast.sampling.blocks``, through
``gatfast._runtime.submit``).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .prefetch import PREFETCH_DISTANCE, prefetch_row, prefetch_span, prefetch_whole_row
from .random import uniform_at

# bytes of a row of ``indices`` asked for ahead: rows of up to 32 sources whole (longer rows are
# hubs, few, and their picks are spread over the row anyway)
_ROW_AHEAD_BYTES = 256


# bytes of an input row asked for ahead by gather_rows: 1.5-2x faster on 64 float32 features of a
# 2M-node graph (AMD EPYC, one thread)
_GATHER_AHEAD_BYTES = 512


# targets a row is asked for ahead: a pick is short (about 100 ns), and the prefetches of 16 rows
# ahead overran the outstanding misses a core can track (measured 1.1-1.4x slower on AMD EPYC)
_PICK_AHEAD = 8


# rows of up to this many in-edges keep Floyd's picks in a uint64 bit set
_BITSET_ROW = 64


@intrinsic
def _trailing_zeros(typingctx, x):
    """Index of the lowest set bit of a non-zero uint64 (one instruction)."""
    if not isinstance(x, types.Integer) or x.bitwidth != 64 or x.signed:
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]), "llvm.cttz.i64"
        )
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])

    return types.uint64(x), codegen


@njit(nogil=True, cache=True)
def _count(indptr, targets, fanout, counts):
    last = targets.size - 1
    for r in range(targets.size):
        prefetch_row(indptr, targets[min(r + PREFETCH_DISTANCE, last)], 16)
        t = targets[r]
        deg = indptr[t + 1] - indptr[t]
        counts[r] = deg if fanout < 0 or deg <= fanout else fanout


@njit(inline="always", cache=True)
def _floyd_draws(key, t, first, count, out):
    """Floyd's draws for target ``t``: ``out[q]``, uniform in ``[0, first + q]``, for ``q < count``.

    Independent of one another, so computed in a loop of their own ahead of
    the membership tests: interleaved with them the hashes' long dependency
    chains did not overlap (a third of a pick's time)."""
    for q in range(count):
        j = first + q
        r = np.int64(uniform_at(key, t, j) * (j + 1))
        out[q] = r if r <= j else j  # guard against rounding at the top of [0, 1)


@njit(nogil=True, cache=True)
def _pick_row(indptr, indices, t, fanout, key, out, sources, start, chosen, warm):
    """Floyd's sampling of ``fanout`` of the row's positions, written sorted into ``out[start:]``,
    and their source nodes into ``sources[start:]``; with ``warm``, each source's row pointer is
    prefetched (the next hop counts its in-edges)."""
    lo = indptr[t]
    deg = indptr[t + 1] - lo
    if fanout < 0 or deg <= fanout:
        for k in range(deg):
            out[start + k] = lo + k
            sources[start + k] = indices[lo + k]
            if warm:
                prefetch_row(indptr, indices[lo + k], 16)
        return
    first = deg - fanout
    _floyd_draws(key, t, first, fanout, chosen)
    if deg <= _BITSET_ROW:
        # the chosen set as a bit set: O(1) membership, sorted for free
        one = np.uint64(1)
        bits = np.uint64(0)
        for q in range(fanout):
            bit = one << np.uint64(chosen[q])
            bits |= (one << np.uint64(first + q)) if bits & bit else bit
        k = start
        while bits:
            c = np.int64(_trailing_zeros(bits))
            out[k] = lo + c
            sources[k] = indices[lo + c]
            if warm:
                prefetch_row(indptr, indices[lo + c], 16)
            k += 1
            bits &= bits - one
        return
    for q in range(fanout):
        r = chosen[q]
        for p in range(q):
            if chosen[p] == r:
                chosen[q] = first + q
                break
    # insertion sort: fanouts are small
    for a in range(1, fanout):
        v = chosen[a]
        b = a - 1
        while b >= 0 and chosen[b] > v:
            chosen[b + 1] = chosen[b]
            b -= 1
        chosen[b + 1] = v
    for k in range(fanout):
        out[start + k] = lo + chosen[k]
        sources[start + k] = indices[lo + chosen[k]]
        if warm:
            prefetch_row(indptr, indices[lo + chosen[k]], 16)


@njit(nogil=True, cache=True)
def pick_rows(r0, r1, indptr, indices, targets, fanout, key, ptr, edges, sources, warm):
    """Write target ``r``'s picks into ``edges[ptr[r]:ptr[r + 1]]`` (positions in ``indices``) and
    their source nodes into ``sources[ptr[r]:ptr[r + 1]]``, for ``r0 <= r < r1``.

    ``warm``: prefetch the sources' row pointers, which the next hop reads
    (:func:`pick_counts`); on a big graph each is a main-memory miss, and
    asked for here they are in cache by then."""
    chosen = np.empty(max(fanout, 1), dtype=np.int64)
    k = np.uint64(key)
    last = targets.size - 1
    for r in range(r0, r1):
        # the rows of targets scattered over a big graph are main-memory misses: ask for the row
        # pointer two distances ahead and, once it has arrived, the row itself one distance ahead
        prefetch_row(indptr, targets[min(r + 2 * _PICK_AHEAD, last)], 16)
        ahead = targets[min(r + _PICK_AHEAD, last)]
        prefetch_span(indices, indptr[ahead], indptr[ahead + 1], _ROW_AHEAD_BYTES)
        _pick_row(indptr, indices, targets[r], fanout, k, edges, sources, ptr[r], chosen, warm)


@njit(nogil=True, cache=True)
def pick_counts(indptr, targets, fanout):
    """``ptr`` (len(targets) + 1,): where each target's picks start, from its degree and the fanout."""
    n = targets.size
    counts = np.empty(n, dtype=np.int64)
    _count(indptr, targets, fanout, counts)
    ptr = np.zeros(n + 1, dtype=np.int64)
    for r in range(n):
        ptr[r + 1] = ptr[r] + counts[r]
    return ptr


@njit(cache=True)
def _table_slots(size):
    """Slots of a relabelling table for up to ``size`` ids: a power of two at least twice that."""
    slots = 2
    while slots < 2 * size:
        slots *= 2
    return slots


def relabel_table(size):
    """An empty hash table for :func:`relabel_into` of up to ``size`` ids: a power of two at least
    twice that, of int32 slots where they can hold every local id (half the cache)."""
    return np.full(_table_slots(size), -1, dtype=np.int32 if size < 2**31 else np.int64)


@njit(nogil=True, cache=True)
def relabel_into(table, ids, src_ids, n_src, local_ids):
    """Give each of ``ids`` in order its local id, a new one (``n_src``, ``n_src + 1``, ...) at its
    first use, through the open-addressing hash ``table`` (see :func:`relabel_table`); new ids are
    appended to ``src_ids``, and ``local_ids[k]`` receives the local id of ``ids[k]`` unless
    ``local_ids`` is empty. Returns the new ``n_src``. Calls on consecutive parts of a sequence
    give what one call on all of it gives."""
    bits = 0
    while (1 << bits) < table.size:
        bits += 1
    shift = np.uint64(64 - bits)
    mask = np.uint64(table.size - 1)
    for k in range(ids.size):
        s = ids[k]
        # Fibonacci hashing: the top bits of id * 2**64 / golden ratio spread neighbouring ids
        h = (np.uint64(s) * np.uint64(0x9E3779B97F4A7C15)) >> shift
        while True:
            q = np.int64(table[h])
            if q < 0:
                table[h] = n_src
                src_ids[n_src] = s
                q = n_src
                n_src += 1
                break
            if src_ids[q] == s:
                break
            h = (h + np.uint64(1)) & mask
        if local_ids.size:
            local_ids[k] = q
    return n_src


@njit(nogil=True, cache=True)
def _relabel_all(table, targets, sources, src_ids, local_indices):
    """:func:`relabel_into` of the targets (first, as themselves) and then the sources; the new ``n_src``."""
    n_src = relabel_into(table, targets, src_ids, 0, local_indices[:0])
    return relabel_into(table, sources, src_ids, n_src, local_indices)


def relabel(targets, sources):
    """Local ids for a block: the targets first (in order), then new sources in order of first use.

    Returns ``(src_ids, local_indices)``: the global ids of the block's
    sources, and each edge's source as a local id. The ids go through a
    hash table sized by the batch (a few hundred kB, cache-resident), not
    an array over all nodes: on a big graph each lookup of the latter is a
    main-memory miss.
    """
    table = relabel_table(targets.size + sources.size)
    src_ids = np.empty(targets.size + sources.size, dtype=np.int64)
    local_indices = np.empty(sources.size, dtype=np.int64)
    n_src = _relabel_all(table, targets, sources, src_ids, local_indices)
    return src_ids[:n_src].copy(), local_indices


@njit(nogil=True, cache=True)
def sample_hop(indptr, indices, targets, fanout, key, warm):
    """One hop on the calling thread, in one call: :func:`pick_counts`, :func:`pick_rows` over
    every target, then :func:`relabel_into` of the targets and the picked sources.

    Returns ``(ptr, src_ids, edge_ids, local_indices)``. One call, not the
    several of the threaded path: a sampler that runs several batches at
    once on as many threads would otherwise hand the GIL back and forth at
    every call, each hand-off a thread wake-up."""
    n = targets.size
    ptr = pick_counts(indptr, targets, fanout)
    total = ptr[-1]
    edges = np.empty(total, dtype=np.int64)
    sources = np.empty(total, dtype=np.int64)
    pick_rows(0, n, indptr, indices, targets, fanout, key, ptr, edges, sources, warm)
    src_ids = np.empty(n + total, dtype=np.int64)
    local_indices = np.empty(total, dtype=np.int64)
    slots = _table_slots(n + total)
    if n + total < 2**31:  # the width relabel_table picks
        n_src = _relabel_all(np.full(slots, -1, dtype=np.int32), targets, sources, src_ids, local_indices)
    else:
        n_src = _relabel_all(np.full(slots, -1, dtype=np.int64), targets, sources, src_ids, local_indices)
    return ptr, src_ids[:n_src].copy(), edges, local_indices


@njit(nogil=True, cache=True)
def gather_rows(r0, r1, x, ids, out):
    """``out[r] = x[ids[r]]`` for ``r0 <= r < r1`` (the first layer's input rows of a batch).

    The rows are scattered over a big ``x``: each is a main-memory miss, so
    the row ``PREFETCH_DISTANCE`` ahead is asked for (its first
    ``_GATHER_AHEAD_BYTES``; the hardware prefetcher follows a wide row)."""
    row_bytes = min(x.shape[1] * x.itemsize, _GATHER_AHEAD_BYTES)
    last = ids.size - 1
    for r in range(r0, r1):
        # its last line too (10 % faster than without, AMD EPYC)
        prefetch_whole_row(x, ids[min(r + PREFETCH_DISTANCE, last)], row_bytes)
        src = ids[r]
        for c in range(x.shape[1]):
            out[r, c] = x[src, c]
