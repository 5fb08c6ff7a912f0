"""Graph structure in one or two linear passes: the source-major order, the self-loop layout and the
rows between which no edge runs (``component_cuts``).

Every sampled block is a new graph, so these run once per block per step;
NumPy's stable argsort and boolean-mask passes took as long as a layer's
edge kernels on a sampled batch.
"""

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def source_major(indices, num_src):
    """``(src_indptr, src_edges)``: edge ids grouped by source, by edge id within a source (a counting sort)."""
    src_indptr = np.zeros(num_src + 1, dtype=np.int64)
    for e in range(indices.size):
        src_indptr[indices[e] + 1] += 1
    for j in range(num_src):
        src_indptr[j + 1] += src_indptr[j]
    fill = src_indptr[:-1].copy()
    src_edges = np.empty(indices.size, dtype=np.int64)
    for e in range(indices.size):
        j = indices[e]
        src_edges[fill[j]] = e
        fill[j] += 1
    return src_indptr, src_edges


@njit(nogil=True, cache=True)
def loop_layout(indptr, indices, num_dst, num_src):
    """PyG's remove-then-add self loops: target ``i < min(num_src, num_dst)`` keeps its other edges in
    order and gets its loop appended.

    Returns ``(looped_indptr, looped_indices, kept, loop_slots, looped_kept)``: ``kept`` the original
    edge id of every non-loop slot of the looped graph, ``loop_slots`` the slot of each loop and
    ``looped_kept`` the positions of the non-loop slots (in CSR order).
    """
    loops = min(num_src, num_dst)
    looped_indptr = np.zeros(num_dst + 1, dtype=np.int64)
    for i in range(num_dst):
        count = 1 if i < loops else 0
        for e in range(indptr[i], indptr[i + 1]):
            if indices[e] != i:
                count += 1
        looped_indptr[i + 1] = looped_indptr[i] + count
    total = looped_indptr[num_dst]
    looped_indices = np.empty(total, dtype=np.int64)
    kept = np.empty(total - loops, dtype=np.int64)
    looped_kept = np.empty(total - loops, dtype=np.int64)
    loop_slots = np.empty(loops, dtype=np.int64)
    k = 0
    for i in range(num_dst):
        slot = looped_indptr[i]
        for e in range(indptr[i], indptr[i + 1]):
            if indices[e] != i:
                looped_indices[slot] = indices[e]
                kept[k] = e
                looped_kept[k] = slot
                k += 1
                slot += 1
        if i < loops:
            looped_indices[slot] = i
            loop_slots[i] = slot
    return looped_indptr, looped_indices, kept, loop_slots, looped_kept


#: Edges ``CSRGraph.mean_edge_span`` averages over, spread evenly over a bigger graph's CSR order: the
#: prefetch choice it serves needs an estimate, and a pass over every edge (3 ms on 2.2 million, one
#: thread) would cost a graph used once (a sampled block) 5 % of its forward pass. Edges, not rows: a
#: sample of rows could miss the few that hold the edges (a hub), and would weigh a row of one edge as
#: one of a thousand.
SPAN_SAMPLE_EDGES = 4096


@njit(nogil=True, cache=True)
def edge_span_mean(indptr, indices, samples):
    """Mean ``|indices[e] - i|`` over the edges ``e`` of the CSR rows ``i``: every edge when there are at most
    ``samples``, else the edges ``k * nnz // samples`` for ``k < samples`` (0.0 without edges)."""
    nnz = indices.size
    if nnz == 0:
        return 0.0
    total = 0.0
    if nnz <= samples:
        for i in range(indptr.size - 1):
            for e in range(indptr[i], indptr[i + 1]):
                total += abs(indices[e] - i)
        return total / nnz
    for k in range(samples):
        e = k * nnz // samples
        i = np.searchsorted(indptr, e, side="right") - 1  # the row holding edge e
        total += abs(indices[e] - i)
    return total / samples


@njit(nogil=True, cache=True)
def component_cuts(indptr, indices):
    """``(cuts, longest)`` of a square graph: ``cuts`` (n + 1,) uint8 is 1 at each ``r`` where no edge joins a
    node below ``r`` to one at or above it (always at 0 and n), ``longest`` the most rows from one cut to the
    next. An edge between ``lo < hi`` rules out the cuts ``lo + 1 ... hi``: a difference array of those spans
    (one pass over the edges), then a running sum (one over the rows)."""
    n = indptr.size - 1
    spans = np.zeros(n + 2, np.int64)
    for i in range(n):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            if j < 0 or j >= n:  # spans is written without bounds checks
                raise ValueError("component_cuts needs a square graph: every source a row")
            lo, hi = min(i, j), max(i, j)
            if hi > lo:
                spans[lo + 1] += 1
                spans[hi + 1] -= 1
    cuts = np.zeros(n + 1, np.uint8)
    open_spans = 0
    last = 0
    longest = 0
    for r in range(n + 1):
        open_spans += spans[r]
        if open_spans == 0:
            cuts[r] = 1
            longest = max(longest, r - last)
            last = r
    return cuts, longest
