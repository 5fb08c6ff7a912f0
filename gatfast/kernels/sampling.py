"""Neighbour sampling kernels: pick up to ``k`` in-edges per target, then relabel.

Without replacement, keyed: target ``t``'s picks depend only on the key and
``t``'s global id (Floyd's algorithm driven by ``uniform_at(key, t, j)``),
so a node's sampled neighbourhood is the same in any batch or shard, for any
thread count. Picks are returned in CSR order. ``fanout < 0`` keeps every
in-edge. The kernels release the GIL, so a background thread can sample the
next batch while the current one trains, and ``pick_rows`` runs on chunks
of targets in parallel (``gatfast._runtime.run_rows``).
"""

import numpy as np
from numba import njit

from .random import uniform_at


@njit(nogil=True, cache=True)
def _count(indptr, targets, fanout, counts):
    for r in range(targets.size):
        t = targets[r]
        deg = indptr[t + 1] - indptr[t]
        counts[r] = deg if fanout < 0 or deg <= fanout else fanout


@njit(nogil=True, cache=True)
def _pick_row(indptr, indices, t, fanout, key, out, sources, start, chosen):
    """Floyd's sampling of ``fanout`` of the row's positions, written sorted into ``out[start:]``,
    and their source nodes into ``sources[start:]``."""
    lo = indptr[t]
    deg = indptr[t + 1] - lo
    if fanout < 0 or deg <= fanout:
        for k in range(deg):
            out[start + k] = lo + k
            sources[start + k] = indices[lo + k]
        return
    m = 0
    for j in range(deg - fanout, deg):
        r = np.int64(uniform_at(key, t, j) * (j + 1))
        if r > j:  # guard against rounding at the top of [0, 1)
            r = j
        taken = False
        for q in range(m):
            if chosen[q] == r:
                taken = True
                break
        chosen[m] = j if taken else r
        m += 1
    # insertion sort: fanouts are small
    for a in range(1, m):
        v = chosen[a]
        b = a - 1
        while b >= 0 and chosen[b] > v:
            chosen[b + 1] = chosen[b]
            b -= 1
        chosen[b + 1] = v
    for k in range(m):
        out[start + k] = lo + chosen[k]
        sources[start + k] = indices[lo + chosen[k]]


@njit(nogil=True, cache=True)
def pick_rows(r0, r1, indptr, indices, targets, fanout, key, ptr, edges, sources):
    """Write target ``r``'s picks into ``edges[ptr[r]:ptr[r + 1]]`` (positions in ``indices``) and
    their source nodes into ``sources[ptr[r]:ptr[r + 1]]``, for ``r0 <= r < r1``."""
    chosen = np.empty(max(fanout, 1), dtype=np.int64)
    k = np.uint64(key)
    for r in range(r0, r1):
        _pick_row(indptr, indices, targets[r], fanout, k, edges, sources, ptr[r], chosen)


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


@njit(nogil=True, cache=True)
def relabel(targets, sources, local):
    """Local ids for a block: the targets first (in order), then new sources in order of first use.

    ``local`` is a scratch array of size num_nodes filled with -1; it is
    left filled with -1 again. Returns ``(src_ids, local_indices)``: the
    global ids of the block's sources, and each edge's source as a local id.
    """
    n_src = 0
    src_ids = np.empty(targets.size + sources.size, dtype=np.int64)
    for t in targets:
        if local[t] < 0:
            local[t] = n_src
            src_ids[n_src] = t
            n_src += 1
    local_indices = np.empty(sources.size, dtype=np.int64)
    for e in range(sources.size):
        s = sources[e]
        if local[s] < 0:
            local[s] = n_src
            src_ids[n_src] = s
            n_src += 1
        local_indices[e] = local[s]
    for q in range(n_src):
        local[src_ids[q]] = -1
    return src_ids[:n_src].copy(), local_indices


@njit(nogil=True, cache=True)
def gather_rows(r0, r1, x, ids, out):
    """``out[r] = x[ids[r]]`` for ``r0 <= r < r1`` (the first layer's input rows of a batch)."""
    for r in range(r0, r1):
        src = ids[r]
        for c in range(x.shape[1]):
            out[r, c] = x[src, c]
