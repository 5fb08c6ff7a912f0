"""Graph structure in one or two linear passes: the source-major order and the self-loop layout.

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


#: Rows whose edges ``CSRGraph.mean_edge_span`` averages over, spread evenly over a bigger graph: the
#: prefetch choice it serves needs an estimate, and a pass over every edge (3 ms on 2.2 million, one
#: thread) would cost a graph used once (a sampled block) 5 % of its forward pass.
SPAN_SAMPLE_ROWS = 4096


@njit(nogil=True, cache=True)
def edge_span_mean(indptr, indices, step):
    """Mean ``|indices[e] - i|`` over the edges of the CSR rows ``i = 0, step, 2 step, ...`` (0.0 without
    edges there); ``step = 1``: every row."""
    total = 0.0
    count = 0
    for i in range(0, indptr.size - 1, step):
        for e in range(indptr[i], indptr[i + 1]):
            total += abs(indices[e] - i)
        count += indptr[i + 1] - indptr[i]
    return total / count if count > 0 else 0.0
