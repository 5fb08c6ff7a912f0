"""GATv2 backward pass in closed form (see docs/MATH.md).

Two passes over the edges:

1. **target pass** (blocks of target rows ``i``): ``A_ij = g_i · x_j``,
   ``δ_ij = α_ij (A_ij - Ā_i)``, the Θ_R term ``P_i``, the partial sums of
   ``∂L/∂a`` (and of ``∂L/∂W_E``) per block of rows, and ``∂L/∂u_ij``.
   ``P_i`` comes in two forms that agree to rounding: the O(N) one,
   ``a ⊙ Σ_k s_ik δ_ik``, and the paper's pairwise O(N²) one,
   ``a ⊙ Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij - s_ik)``.
2. **source pass** (sources ``j``, in the graph's cached source-major order):
   ``Q_j = Σ_i (δ_ij a ⊙ s_ij + α̃_ij g_i)``.

Each row (or source) writes only its own outputs, and each block its own
partial sums; the blocks are fixed by the graph size alone and the caller
adds them in a fixed order, so results are the same bits for any thread
count. Each pass is one function over a range of blocks or sources that
releases the GIL (``gatfast._runtime.run_rows`` runs it whole or in chunks
on a thread pool). Arrays are as in ``forward.py``;
bipartite graphs have ``n_dst`` target rows (``xr``, ``grad``, ``p_out``)
and ``n_src`` sources (``xl``, ``q_out``).
"""

import numpy as np
from numba import njit

from .activations import LEAKY_RELU, act, act_slope
from .edge import edge_z
from .prefetch import PREFETCH_DISTANCE, prefetch_row
from .simd import dot3, dot_rows

ATT_BLOCK = 256  # target rows per partial sum of ∂L/∂a and ∂L/∂W_E


def num_att_blocks(num_rows, block=ATT_BLOCK):
    """How many row blocks the target pass uses for the ``∂L/∂a`` partial sums.

    Depends on the graph size only (never on the thread count), so the
    summation order, and with it every bit of the result, is fixed.
    """
    return max(1, -(-num_rows // block))


@njit(nogil=True, cache=True)
def gatv2_backward_target_blocks(
    b0, b1, indptr, indices, xl, xr, att, slope, kind, u, weT, edge_scale, alpha, grad, pairwise,
    upstream, delta, p_out, att_part, we_part, grad_u,
):
    """Target pass over the row blocks ``b0 .. b1 - 1``; ``B = att_part.shape[0]`` blocks of ``ceil(n_dst / B)`` rows.

    ``grad`` (n_dst, H, C) is the upstream gradient per head. Writes
    ``upstream`` (E, H) = ``A_ij`` (scaled by the dropout mask), ``delta``
    (E, H) = ``∂L/∂e_ij``, ``p_out`` (n_dst, H, C) = ``P_i``, ``att_part``
    (B, H, C): block ``b`` gets ``Σ_{i in block} Σ_k δ_ik act(z_ik)``, and
    with edge features ``we_part`` (B, H, D, C) (the blocks' ``Σ q_ij ⊗
    u_ij``) and ``grad_u`` (E, D) = ``W_Eᵀ q_ij``.
    """
    n = indptr.size - 1
    block = -(-n // att_part.shape[0]) if n > 0 else 1
    nnz = indices.size
    heads = att.shape[0]
    channels = att.shape[1]
    dims = u.shape[1]
    row_bytes = heads * channels * xl.itemsize
    dropout = edge_scale.shape[0] > 0
    has_edge = u.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    simd = grad.strides[2] == grad.itemsize and xl.strides[2] == xl.itemsize
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    qb = np.empty((1, heads, channels), dtype=xl.dtype)
    sb = np.empty((1, heads, channels), dtype=xl.dtype)
    for b in range(b0, b1):
        for h in range(heads):
            for c in range(channels):
                att_part[b, h, c] = zero
            if has_edge:
                for d in range(dims):
                    for c in range(channels):
                        we_part[b, h, d, c] = zero
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
            # ∂a partials, the O(N) Θ_R term and the edge-feature gradients; xl[j] is still in cache
            for e in range(start, end):
                j = indices[e]
                if has_edge:
                    edge_z(zb, xr, i, xl, j, u, weT, e)
                    for h in range(heads):
                        dl = delta[e, h]
                        if leaky:  # branch-free, so the channel loop vectorises
                            for c in range(channels):
                                z = zb[0, h, c]
                                pos = z > zero
                                sb[0, h, c] = one if pos else slope
                                att_part[b, h, c] += dl * (z if pos else slope * z)
                        else:
                            for c in range(channels):
                                z = zb[0, h, c]
                                sb[0, h, c] = act_slope(z, kind, slope)
                                att_part[b, h, c] += dl * act(z, kind, slope)
                        for c in range(channels):
                            qb[0, h, c] = dl * att[h, c] * sb[0, h, c]  # q_ij = ∂L/∂z_ij
                        if not pairwise:
                            for c in range(channels):
                                p_out[i, h, c] += dl * sb[0, h, c]
                    for d in range(dims):
                        g = zero
                        for h in range(heads):
                            g += dot3(weT, h, d, qb, 0, h)
                        grad_u[e, d] = g
                        ud = u[e, d]
                        for h in range(heads):
                            for c in range(channels):
                                we_part[b, h, d, c] += qb[0, h, c] * ud
                    continue
                for h in range(heads):
                    dl = delta[e, h]
                    # separate loops per case, so each inner loop is branch-free and vectorises
                    if leaky and not pairwise:
                        for c in range(channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            pos = z > zero
                            att_part[b, h, c] += dl * (z if pos else slope * z)
                            p_out[i, h, c] += dl * (one if pos else slope)
                    elif leaky:
                        for c in range(channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            att_part[b, h, c] += dl * (z if z > zero else slope * z)
                    else:
                        for c in range(channels):
                            z = xr[i, h, c] + xl[j, h, c]
                            att_part[b, h, c] += dl * act(z, kind, slope)
                            if not pairwise:
                                p_out[i, h, c] += dl * act_slope(z, kind, slope)
            if pairwise:
                _pairwise_row(indices, xl, xr, u, weT, i, start, end, kind, slope, alpha, upstream, p_out, zb)
            for h in range(heads):
                for c in range(channels):
                    p_out[i, h, c] *= att[h, c]


@njit(cache=True)
def _pairwise_row(indices, xl, xr, u, weT, i, start, end, kind, slope, alpha, upstream, p_out, zb):
    """The paper's form for row ``i``: a sum over unordered pairs of in-edges.

    The slopes ``s_ik`` of the row are computed once (deg x H x C scratch),
    then every pair costs one multiply-add per channel.
    """
    heads = p_out.shape[1]
    channels = p_out.shape[2]
    has_edge = u.shape[0] > 0
    s = np.empty((end - start, heads, channels), dtype=xl.dtype)
    for e in range(start, end):
        j = indices[e]
        if has_edge:
            edge_z(zb, xr, i, xl, j, u, weT, e)
            for h in range(heads):
                for c in range(channels):
                    s[e - start, h, c] = act_slope(zb[0, h, c], kind, slope)
        else:
            for h in range(heads):
                for c in range(channels):
                    s[e - start, h, c] = act_slope(xr[i, h, c] + xl[j, h, c], kind, slope)
    for h in range(heads):
        for e1 in range(start, end):
            for e2 in range(e1 + 1, end):
                w = alpha[e1, h] * alpha[e2, h] * (upstream[e1, h] - upstream[e2, h])
                for c in range(channels):
                    p_out[i, h, c] += w * (s[e1 - start, h, c] - s[e2 - start, h, c])


@njit(nogil=True, cache=True)
def gatv2_backward_source_rows(
    j0, j1, src_indptr, src_edges, src_targets, xl, xr, att, slope, kind, u, weT, edge_scale, alpha,
    delta, grad, q_out,
):
    """Source pass over sources ``j0 .. j1 - 1``: ``q_out[j]`` = ``Q_j``, the gradient of ``xl[j]``.

    ``src_edges`` (E,) lists the edge ids (CSR positions) grouped by source
    and ``src_targets`` (E,) their targets in that same order, so both are
    read sequentially; the scattered rows ``xr[i]``, ``grad[i]``,
    ``alpha[e]``, ``delta[e]`` (and ``edge_scale[e]``, ``u[e]``) are prefetched.
    """
    nnz = src_edges.size
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    edge_bytes = heads * alpha.itemsize
    attr_bytes = u.shape[1] * u.itemsize
    dropout = edge_scale.shape[0] > 0
    has_edge = u.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    for j in range(j0, j1):
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
                if has_edge:
                    prefetch_row(u, ahead, attr_bytes)
            e = src_edges[p]
            i = src_targets[p]
            if has_edge:
                edge_z(zb, xr, i, xl, j, u, weT, e)
            for h in range(heads):
                dl = delta[e, h]
                w = alpha[e, h]
                if dropout:
                    w = w * edge_scale[e, h]
                if has_edge and leaky:  # branch-free
                    for c in range(channels):
                        s = one if zb[0, h, c] > zero else slope
                        q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]
                elif has_edge:
                    for c in range(channels):
                        q_out[j, h, c] += dl * att[h, c] * act_slope(zb[0, h, c], kind, slope) + w * grad[i, h, c]
                elif leaky:  # branch-free inner loop
                    for c in range(channels):
                        s = one if xr[i, h, c] + xl[j, h, c] > zero else slope
                        q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]
                else:
                    for c in range(channels):
                        z = xr[i, h, c] + xl[j, h, c]
                        q_out[j, h, c] += dl * att[h, c] * act_slope(z, kind, slope) + w * grad[i, h, c]
