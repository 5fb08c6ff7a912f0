"""GATv2 backward pass in closed form (see docs/MATH.md), without edge features.

Two passes over the edges:

1. **target pass** (blocks of target rows ``i``): ``A_ij = g_i · x_j``,
   ``δ_ij = α_ij (A_ij - Ā_i)``, the Θ_R term ``P_i = a ⊙ Σ_k s_ik δ_ik``
   (the O(N) form; ``pairwise.py`` replaces it with the paper's O(N²) form
   on request), and the partial sums of ``∂L/∂a`` per block of rows.
2. **source pass** (sources ``j``, in the graph's cached source-major order):
   ``Q_j = Σ_i (δ_ij a ⊙ s_ij + α̃_ij g_i)``.

On a batch of small graphs the target pass does the source pass too (its
``cuts``): a range of rows no edge leaves holds every edge of its sources,
so as the pass walks those rows in order it adds each edge's term to its
source's ``Q_j`` in the source pass's order (edge order), the same bits,
without a second walk over the edges that forms ``z`` again. On
``small-batch`` (1 x 32 channels, one thread, AMD EPYC Zen 4) the two passes
took 2.48 ms and the pass that does both 2.29 ms; the whole step, both
alternating in one process, 0.93-0.975x on 2 threads (one pass fewer to
share out) and 0.99-1.01x on one. A chunk of rows that cuts through a graph
leaves that graph's sources to :func:`gatv2_backward_source_ranges`.

With several heads, the softmax's backward (``δ`` from ``A``) of a row runs
as vector code over the heads (``softmax.row_deltas``, the same bits); with
one head of whole vectors, a row's ``A_ij`` come from up to 8 edges side by
side (``head_sums.row_dots``, the same bits).
With LeakyReLU attention the per-row sums of both passes run in
``edge_sums.py`` and ``source_sums.py`` (the sums in vector registers, the same bits) for the
channels in whole 8-lane vectors; the loops here do the rest and every
channel of other activations. On graphs that need the source pass's
edge prefetch, the LeakyReLU target pass also writes each edge's source record
and the source pass is ``records.py``'s (other activations: the one here).
``backward_edge.py`` has the same two passes with edge features. Each row
(or source) writes only its own outputs, and each block its own partial
sums; the blocks are fixed by the graph size alone and the caller adds
them in a fixed order, so results are the same bits for any thread count.
Each pass is one function over a range of blocks or sources that releases
the GIL (``gatfast._runtime.run_rows`` runs it whole or in chunks on a
thread pool). Arrays are as in ``forward.py``; bipartite graphs have
``n_dst`` target rows (``xr``, ``grad``, ``p_out``) and ``n_src`` sources
(``xl``, ``q_out``).
"""

import numpy as np
from numba import njit

from .activations import LEAKY_RELU, act, act_slope
from .edge_sums import target_row_sums, target_row_sums_signs, target_row_sums_sources
from .head_sums import row_dots
from .ir_parts import ALL_HEADS, edges_at_once, typed_contiguous
from .prefetch import WINDOW, prefetch_row, window_rows
from .records import check_records
from .simd import dot_rows
from .softmax import row_deltas
from .source_sums import source_row_sums

ATT_BLOCK = 256  # target rows per partial sum of ∂L/∂a and ∂L/∂W_E


def num_att_blocks(num_rows, block=ATT_BLOCK):
    """How many row blocks the target pass uses for the ``∂L/∂a`` partial sums.

    Depends on the graph size only (never on the thread count), so the
    summation order, and with it every bit of the result, is fixed.
    """
    return max(1, -(-num_rows // block))


@njit(inline="always", cache=True)
def check_bias_part(bias_part, att_part):
    """Whether the target pass forms the bias gradient's partial sums: ``bias_part`` has rows, then
    exactly ``att_part``'s shape (ValueError otherwise: it is written without bounds checks).

    With the output bias, the layer's bias gradient is the column sums of the
    upstream gradient: the target pass, which reads each row of it anyway, adds
    them up per block of rows, and the layer adds the
    blocks in order, where a separate pass over the upstream gradient took
    0.2-0.25 ms of a 6-8 ms ``small-batch`` step. Each block's sums start
    from zero and add its rows in order, as ``kernels.column_sum`` does.
    """
    if bias_part.shape[0] == 0:
        return False
    if bias_part.shape[0] != att_part.shape[0] or bias_part.shape[1] != att_part.shape[1] \
            or bias_part.shape[2] != att_part.shape[2]:
        raise ValueError("bias_part must have att_part's shape, or no rows")
    return True


@njit(inline="always", cache=True)
def upstream_delta(i, start, end, indices, xl, ahead, grad, alpha, edge_scale, upstream, delta):
    """Row ``i``: ``upstream[e]`` = ``A_ij`` (times the dropout mask), ``delta[e]`` = ``α_ij (A_ij - Ā_i)``.

    One gather of ``xl[j]`` per edge, the rows of the edge ``ahead`` positions on prefetched (or with
    ``prefetch.WINDOW`` the row a few rows past ``i``, as the forward kernels); the caller's next loop
    over the row finds them in cache.
    """
    nnz = indices.size
    heads = grad.shape[1]
    channels = grad.shape[2]
    row_bytes = heads * channels * xl.itemsize
    by_edge = nnz if ahead == WINDOW else ahead  # nnz: no edge is that far ahead
    window = window_rows(row_bytes)
    if ahead == WINDOW and i + window < xl.shape[0]:
        prefetch_row(xl, i + window, row_bytes)
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    simd = grad.strides[2] == grad.itemsize and xl.strides[2] == xl.itemsize
    # one head of whole vectors: a row's edges side by side (head_sums.py), the rows prefetched as below
    by_row = simd and edges_at_once(heads, channels) and typed_contiguous(grad, xl, upstream)
    if by_row:
        for e in range(start, end if ahead != WINDOW else start):
            if e + by_edge < nnz:
                prefetch_row(xl, indices[e + by_edge], row_bytes)
        by_row = row_dots(grad, i, xl, indices, upstream, start, end)
        if by_row and dropout:
            for e in range(start, end):
                upstream[e, 0] = upstream[e, 0] * edge_scale[e, 0]
    for e in range(start, start if by_row else end):
        if e + by_edge < nnz:
            prefetch_row(xl, indices[e + by_edge], row_bytes)
        j = indices[e]
        for h in range(heads):
            if simd:
                a_ij = dot_rows(grad, i, xl, j, h)
            else:
                a_ij = zero
                for c in range(channels):
                    a_ij += grad[i, h, c] * xl[j, h, c]
            if dropout:
                a_ij = a_ij * edge_scale[e, h]
            upstream[e, h] = a_ij
    if row_deltas(alpha, upstream, delta, start, end):  # several heads: vector code (softmax.py)
        return
    for h in range(heads):
        mean_a = zero
        for e in range(start, end):
            mean_a += alpha[e, h] * upstream[e, h]
        for e in range(start, end):
            delta[e, h] = alpha[e, h] * (upstream[e, h] - mean_a)


@njit(nogil=True, cache=True)
def gatv2_backward_target_blocks(
    b0, b1, indptr, indices, xl, xr, att, slope, kind, ahead, edge_scale, alpha, grad, upstream, delta, p_out,
    att_part, bias_part, rec_w, rec_signs, cuts, q_out,
):
    """Target pass over the row blocks ``[b0, b1)``; ``B = att_part.shape[0]`` blocks of ``ceil(n_dst / B)`` rows.

    ``ahead``: the prefetch of the gathered rows ``xl[j]``, as in ``forward.gatv2_forward_rows``.
    ``grad`` (n_dst, H, C) is the upstream gradient per head. Writes
    ``upstream`` (E, H) = ``A_ij`` (scaled by the dropout mask), ``delta``
    (E, H) = ``∂L/∂e_ij``, ``p_out`` (n_dst, H, C) = ``P_i`` and
    ``att_part`` (B, H, C): block ``b`` gets ``Σ_{i in block} Σ_k δ_ik act(z_ik)``;
    unless it has no rows, ``bias_part`` (B, H, C): block ``b`` gets
    ``Σ_{i in block} grad[i]``, the rows added in order (see :func:`check_bias_part`);
    and, for LeakyReLU unless ``rec_signs`` is None, each edge's source record
    (``rec_w`` (E, R / itemsize) and ``rec_signs`` (E, R) uint8, views of one
    buffer; ``records.py``) for ``records.gatv2_backward_source_record_rows``.

    ``cuts`` (n_dst + 1,) uint8, or empty: with it (and no records), the
    pass also does the source pass (:func:`gatv2_backward_source_rows`) of
    the sources in ``[c0, c1)``, the widest range within the blocks' rows
    whose ends are cuts (``cuts[r]``: no edge joins a node below ``r`` to one
    at or above it; ``graph.components.component_cuts``; a square graph):
    those sources' targets all lie in it, so each ``q_out[j]`` gets its terms
    in edge order from zero as the rows go by, the source pass's sum, the
    same bits, without a second walk over the edges forming ``z`` again.
    Returns ``(c0, c1)``, empty (``c0 == c1``) without ``cuts``; the caller
    runs the source pass for the other sources
    (:func:`gatv2_backward_source_ranges`).
    """
    slope = xl.dtype.type(slope)  # the vector sums' type, so that the loops' terms are the same bits
    n = indptr.size - 1
    block = -(-n // att_part.shape[0]) if n > 0 else 1
    heads = att.shape[0]
    channels = att.shape[1]
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    with_bias = check_bias_part(bias_part, att_part)
    sign_base, head_bytes = (0, 0) if rec_signs is None else check_records(
        rec_w, rec_signs, indices.size, heads, channels, kind, xl.itemsize
    )
    dropout = edge_scale.shape[0] > 0
    if cuts.size not in (0, n + 1):
        raise ValueError("cuts must have one value per row and one more, or none")
    c0, c1 = closed_range(cuts, b0 * block, min(n, b1 * block))
    if rec_signs is not None:  # a graph with source records gets no cuts (layers/passes.py)
        c0 = c1
    # q_out is written without bounds checks at every source of the range's edges: a square graph's
    if c1 > c0 and (q_out.shape[0] != n or xl.shape[0] != n or q_out.shape[1] != heads or q_out.shape[2] != channels):
        raise ValueError("cuts need a square graph and q_out a row per node with the heads' channels")
    for j in range(c0, c1):
        for h in range(heads):
            for c in range(channels):
                q_out[j, h, c] = zero
    for b in range(b0, b1):
        for h in range(heads):
            for c in range(channels):
                att_part[b, h, c] = zero
                if with_bias:
                    bias_part[b, h, c] = zero
        for i in range(b * block, min(n, (b + 1) * block)):
            start = indptr[i]
            end = indptr[i + 1]
            if with_bias:  # written here, not in a helper: see forward.py on inlined helpers' arrays
                for h in range(heads):
                    for c in range(channels):
                        bias_part[b, h, c] += grad[i, h, c]
            upstream_delta(i, start, end, indices, xl, ahead, grad, alpha, edge_scale, upstream, delta)
            # the weights and deltas the source pass reads, in CSR order (as in backward_edge.py: keep in step)
            if rec_signs is not None:
                for e in range(start, end):
                    for h in range(heads):
                        rec_w[e, h] = alpha[e, h] * edge_scale[e, h] if dropout else alpha[e, h]
                        rec_w[e, heads + h] = delta[e, h]
            # ∂a partials and the Θ_R term; xl[j] is still in cache. LeakyReLU: the channels in
            # whole vectors with the sums in registers (see edge_sums.py), the rest in the loop below
            first = 0
            sources = c0 <= i < c1  # this row's edges add their terms to Q of their sources
            if leaky:  # every head (ir_parts.for_heads)
                if sources:
                    first = target_row_sums_sources(p_out, att_part, b, i, ALL_HEADS, xl, xr, att, indices, delta,
                                                    start, end, slope, q_out, grad, alpha, edge_scale)
                elif rec_signs is None:
                    first = target_row_sums(p_out, att_part, b, i, ALL_HEADS, xl, xr, att, indices, delta, start,
                                            end, slope)
                else:
                    first = target_row_sums_signs(p_out, att_part, b, i, ALL_HEADS, xl, xr, att, indices, delta,
                                                  start, end, slope, rec_signs, sign_base, head_bytes)
            if first == channels:
                continue
            for h in range(heads):
                for c in range(first, channels):
                    p_out[i, h, c] = zero
            for e in range(start, end):
                j = indices[e]
                for h in range(heads):
                    dl = delta[e, h]
                    if leaky:  # branch-free, so the channel loop vectorises
                        for c in range(first, channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            pos = z > zero
                            att_part[b, h, c] += dl * (z if pos else slope * z)
                            p_out[i, h, c] += dl * (one if pos else slope)
                    else:
                        for c in range(first, channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            att_part[b, h, c] += dl * act(z, kind, slope)
                            p_out[i, h, c] += dl * act_slope(z, kind, slope)
                    if sources:  # as gatv2_backward_source_rows' loops, term by term (each in its own type)
                        w = alpha[e, h] * edge_scale[e, h] if dropout else alpha[e, h]
                        if leaky:
                            for c in range(first, channels):
                                s = one if xr[i, h, c] + xl[j, h, c] > zero else slope
                                q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]
                        else:
                            for c in range(first, channels):
                                z = xr[i, h, c] + xl[j, h, c]
                                q_out[j, h, c] += dl * att[h, c] * act_slope(z, kind, slope) + w * grad[i, h, c]
                    if rec_signs is not None:  # the signs of the channels left to this loop (as backward_edge.py)
                        for k in range(sign_base + h * head_bytes + first // 8, sign_base + (h + 1) * head_bytes):
                            rec_signs[e, k] = 0
                        for c in range(first, channels):
                            if xr[i, h, c] + xl[j, h, c] > zero:
                                k = sign_base + h * head_bytes + c // 8
                                rec_signs[e, k] |= np.uint8(1 << (c % 8))
            for h in range(heads):
                for c in range(first, channels):
                    p_out[i, h, c] *= att[h, c]
    return c0, c1


@njit(inline="always", cache=True)
def closed_range(cuts, r0, r1):
    """``(c0, c1)``: the first cut at or after ``r0`` and the last at or before ``r1`` (see
    :func:`gatv2_backward_target_blocks`), or ``(r0, r0)`` where there is no such range (no cuts)."""
    if cuts.size == 0:
        return r0, r0
    c0 = r0
    while c0 < r1 and cuts[c0] == 0:
        c0 += 1
    c1 = r1
    while c1 > c0 and cuts[c1] == 0:
        c1 -= 1
    return (c0, c1) if c1 > c0 else (r0, r0)


@njit(nogil=True, cache=True)
def gatv2_backward_source_rows(
    j0, j1, src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, ahead, edge_scale, alpha, delta, grad, q_out,
):
    """Source pass over sources ``[j0, j1)``: ``q_out[j]`` = ``Q_j``, the gradient of ``xl[j]``.

    The layer's pass on graphs that fit in cache, and on big graphs for other
    activations than LeakyReLU (which read the source records there:
    ``records.gatv2_backward_source_record_rows``).
    ``src_edges`` (E,) lists the edge ids (CSR positions) grouped by source
    and ``src_targets`` (E,) their targets in that same order, so both are
    read sequentially; the scattered rows ``xr[i]``, ``grad[i]``,
    ``alpha[e]``, ``delta[e]`` (and ``edge_scale[e]``) of the edge ``ahead``
    positions on are prefetched, a source's edges at once before its sums.
    ``ahead`` ``prefetch.WINDOW``: the rows ``xr`` and ``grad`` of the node a
    few rows past each source instead (batches of small graphs). ``ahead``
    None: no prefetch, for graphs whose gathers stay in cache (see
    ``prefetch.source_pass_ahead``); None is a type of its own, so Numba
    compiles that case without the prefetch code. The prefetches are written
    in the loop, not in an inlined helper: the helper's reference counts
    (see ``forward.py``) made the pass 3.5x slower at in-degree 256 (32
    channels, 2 threads, Intel Xeon: 28 vs 8 ns per edge).
    """
    slope = xl.dtype.type(slope)  # as the target pass: the vector sums' type
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    edge_bytes = heads * alpha.itemsize
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    window = window_rows(row_bytes)
    n_dst = xr.shape[0]
    for j in range(j0, j1):
        lo = src_indptr[j]
        hi = src_indptr[j + 1]
        if ahead is not None and ahead != WINDOW:  # the scattered rows of the edges `ahead` positions on
            for p in range(lo + ahead, min(hi + ahead, src_edges.size)):
                e = src_edges[p]
                i = src_targets[p]
                prefetch_row(xr, i, row_bytes)
                prefetch_row(grad, i, row_bytes)
                prefetch_row(alpha, e, edge_bytes)
                prefetch_row(delta, e, edge_bytes)
                if dropout:
                    prefetch_row(edge_scale, e, edge_bytes)
        elif ahead is not None and j + window < n_dst:  # the rows near the sources ahead (prefetch.WINDOW)
            prefetch_row(xr, j + window, row_bytes)
            prefetch_row(grad, j + window, row_bytes)
        # LeakyReLU: the channels in whole vectors with the sums in registers (see source_sums.py), the
        # rest in the loop below
        first = 0
        if leaky:  # every head (ir_parts.for_heads)
            first = source_row_sums(q_out, j, ALL_HEADS, xl, xr, att, grad, src_edges, src_targets, alpha, delta,
                                    edge_scale, lo, hi, slope)
        if first == channels:
            continue
        for h in range(heads):
            for c in range(first, channels):
                q_out[j, h, c] = zero
        for p in range(lo, hi):  # the target pass with cuts adds these terms too: keep the two in step
            e = src_edges[p]
            i = src_targets[p]
            for h in range(heads):
                dl = delta[e, h]
                w = alpha[e, h]
                if dropout:
                    w = w * edge_scale[e, h]
                if leaky:  # branch-free inner loop
                    for c in range(first, channels):
                        s = one if xr[i, h, c] + xl[j, h, c] > zero else slope
                        q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]
                else:
                    for c in range(first, channels):
                        z = xr[i, h, c] + xl[j, h, c]
                        q_out[j, h, c] += dl * att[h, c] * act_slope(z, kind, slope) + w * grad[i, h, c]


@njit(nogil=True, cache=True)
def gatv2_backward_source_ranges(
    ranges, src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, ahead, edge_scale, alpha, delta, grad,
    q_out,
):
    """:func:`gatv2_backward_source_rows` over each range ``[ranges[k, 0], ranges[k, 1])`` of sources, in one call:
    the sources a target pass with ``cuts`` left (a graph cut by its chunks' ends), on the calling thread."""
    for k in range(ranges.shape[0]):
        gatv2_backward_source_rows(
            ranges[k, 0], ranges[k, 1], src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, ahead,
            edge_scale, alpha, delta, grad, q_out,
        )
