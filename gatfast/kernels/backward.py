"""GATv2 backward pass in closed form (see docs/MATH.md).

Two passes over the edges:

1. **target pass** (parallel over blocks of targets ``i``): ``A_ij = g_i · x_j``,
   ``δ_ij = α_ij (A_ij - Ā_i)``, the Θ_R term ``P_i`` and the partial sums
   of ``∂L/∂a`` per block of rows. ``P_i`` comes in two forms that agree to
   rounding: the O(N) one, ``a ⊙ Σ_k s_ik δ_ik``, and the paper's pairwise
   O(N²) one, ``a ⊙ Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij - s_ik)``.
2. **source pass** (parallel over sources ``j``, in the graph's cached
   source-major order): ``Q_j = Σ_i (δ_ij a ⊙ s_ij + α̃_ij g_i)``.

Each ``prange`` iteration writes only its own rows (or its own block's
partial sum); the blocks are fixed by the caller from the graph size alone
and the cross-block sum is done afterwards in a fixed order, so results
are the same bits for any thread count.
"""

import numpy as np
from numba import njit, prange

from .activations import LEAKY_RELU, act, act_slope
from .prefetch import PREFETCH_DISTANCE, prefetch_row
from .simd import dot_rows


def num_att_blocks(num_nodes, block=256):
    """How many row blocks the target pass uses for the ``∂L/∂a`` partial sums.

    Depends on the graph size only (never on the thread count), so the
    summation order, and with it every bit of the result, is fixed.
    """
    return max(1, -(-num_nodes // block))


@njit(parallel=True, cache=True)
def gatv2_backward_target(
    indptr, indices, xl, xr, att, slope, kind, edge_scale, alpha, grad, pairwise,
    upstream, delta, p_out, att_part,
):
    """Target pass.

    ``grad`` (n, H, C) is the upstream gradient per head. Writes
    ``upstream`` (E, H) = ``A_ij`` (scaled by the dropout mask),
    ``delta`` (E, H) = ``∂L/∂e_ij``, ``p_out`` (n, H, C) = ``P_i`` and
    ``att_part`` (B, H, C): block ``b`` of ``ceil(n / B)`` consecutive rows
    gets ``Σ_{i in block} Σ_k δ_ik act(z_ik)``; ``att_part.sum(0)`` is
    ``∂L/∂a`` (with ``B = n`` these are the per-row sums).
    """
    n = indptr.size - 1
    nnz = indices.size
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    simd = grad.strides[2] == grad.itemsize and xl.strides[2] == xl.itemsize
    num_blocks = att_part.shape[0]
    block = -(-n // num_blocks) if n > 0 else 1
    for b in prange(num_blocks):
        for h in range(heads):
            for c in range(channels):
                att_part[b, h, c] = zero
        for i in range(b * block, min(n, (b + 1) * block)):
            start = indptr[i]
            end = indptr[i + 1]
            for h in range(heads):
                for c in range(channels):
                    p_out[i, h, c] = zero
            if start == end:
                continue
            # A_ij = g_i · x_j for all heads: one gather of xl[j] per edge
            for e in range(start, end):
                if e + PREFETCH_DISTANCE < nnz:
                    prefetch_row(xl, indices[e + PREFETCH_DISTANCE], row_bytes)
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
            # δ_ij = α_ij (A_ij - Ā_i)
            for h in range(heads):
                mean_a = zero
                for e in range(start, end):
                    mean_a += alpha[e, h] * upstream[e, h]
                for e in range(start, end):
                    delta[e, h] = alpha[e, h] * (upstream[e, h] - mean_a)
            # ∂a partials and the O(N) Θ_R term; xl[j] is still in cache
            for e in range(start, end):
                j = indices[e]
                for h in range(heads):
                    d = delta[e, h]
                    # separate loops per case, so each inner loop is branch-free and vectorises
                    if leaky and not pairwise:
                        for c in range(channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            pos = z > zero
                            att_part[b, h, c] += d * (z if pos else slope * z)
                            p_out[i, h, c] += d * (one if pos else slope)
                    elif leaky:
                        for c in range(channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            att_part[b, h, c] += d * (z if z > zero else slope * z)
                    else:
                        for c in range(channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            att_part[b, h, c] += d * act(z, kind, slope)
                            if not pairwise:
                                p_out[i, h, c] += d * act_slope(z, kind, slope)
            if pairwise:
                _pairwise_row(indices, xl, xr, i, start, end, kind, slope, alpha, upstream, p_out)
            for h in range(heads):
                for c in range(channels):
                    p_out[i, h, c] *= att[h, c]


@njit(cache=True)
def _pairwise_row(indices, xl, xr, i, start, end, kind, slope, alpha, upstream, p_out):
    """The paper's form for row ``i``: a sum over unordered pairs of in-edges.

    The slopes ``s_ik`` of the row are computed once (deg x H x C scratch),
    then every pair costs one multiply-add per channel.
    """
    heads = p_out.shape[1]
    channels = p_out.shape[2]
    s = np.empty((end - start, heads, channels), dtype=xl.dtype)
    for e in range(start, end):
        j = indices[e]
        for h in range(heads):
            for c in range(channels):
                s[e - start, h, c] = act_slope(xr[i, h, c] + xl[j, h, c], kind, slope)
    for h in range(heads):
        for e1 in range(start, end):
            for e2 in range(e1 + 1, end):
                w = alpha[e1, h] * alpha[e2, h] * (upstream[e1, h] - upstream[e2, h])
                for c in range(channels):
                    p_out[i, h, c] += w * (s[e1 - start, h, c] - s[e2 - start, h, c])


@njit(parallel=True, cache=True)
def gatv2_backward_source(
    src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, edge_scale, alpha,
    delta, grad, q_out,
):
    """Source pass: ``q_out`` (n, H, C) = ``Q_j``, the gradient of ``xl[j]``.

    ``src_edges`` (E,) lists the edge ids (CSR positions) grouped by source
    and ``src_targets`` (E,) their targets in that same order, so both are
    read sequentially; the scattered rows ``xr[i]``, ``grad[i]``,
    ``alpha[e]``, ``delta[e]`` (and ``edge_scale[e]``) are prefetched.
    """
    n = src_indptr.size - 1
    nnz = src_edges.size
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    edge_bytes = heads * alpha.itemsize
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    for j in prange(n):
        for h in range(heads):
            for c in range(channels):
                q_out[j, h, c] = zero
        for p in range(src_indptr[j], src_indptr[j + 1]):
            if p + PREFETCH_DISTANCE < nnz:
                ahead = src_edges[p + PREFETCH_DISTANCE]
                target = src_targets[p + PREFETCH_DISTANCE]
                prefetch_row(xr, target, row_bytes)
                prefetch_row(grad, target, row_bytes)
                prefetch_row(alpha, ahead, edge_bytes)
                prefetch_row(delta, ahead, edge_bytes)
                if dropout:
                    prefetch_row(edge_scale, ahead, edge_bytes)
            e = src_edges[p]
            i = src_targets[p]
            for h in range(heads):
                d = delta[e, h]
                w = alpha[e, h]
                if dropout:
                    w = w * edge_scale[e, h]
                if leaky:  # branch-free inner loop
                    for c in range(channels):
                        s = one if xr[i, h, c] + xl[j, h, c] > zero else slope
                        q_out[j, h, c] += d * att[h, c] * s + w * grad[i, h, c]
                else:
                    for c in range(channels):
                        z = xr[i, h, c] + xl[j, h, c]
                        q_out[j, h, c] += d * att[h, c] * act_slope(z, kind, slope) + w * grad[i, h, c]
