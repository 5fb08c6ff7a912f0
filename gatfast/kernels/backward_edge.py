"""The backward passes of ``backward.py`` with edge features.

``z_ij`` gains the edge term ``W_E u_ij`` (formed by ``edge.py``), and the
target pass also writes ``∂L/∂u_ij = W_Eᵀ q_ij`` per edge and the per-block
partial sums of ``∂L/∂W_E = Σ q_ij ⊗ u_ij``, where ``q_ij = ∂L/∂z_ij =
δ_ij a ⊙ s_ij``. Separate functions from the passes without edge features,
so a run compiles only the kernels it uses; the shared steps
(``upstream_delta``) are the same functions.

The target pass keeps the ``q_ij`` of up to :data:`Q_EDGES` edges and adds
their ``q_ij ⊗ u_ij`` to the block's ``∂L/∂W_E`` in one product, the
register tile of ``gemm.py`` (each element a chain of fused multiply-adds
over the edges in order, so the thread count still changes no bit). Added
edge by edge, ``∂L/∂W_E``'s D x C values were loaded and stored again for
every edge. On 500,000 edges (one thread, 2-core Intel Xeon, the two
kernels interleaved in one process, medians of 20 calls) the pass took
0.86-0.88x the time at 64 channels and 8 attributes, 0.92x at 32 and 4,
0.87x at 3 heads of 16 and 3 attributes, 0.89x at 2 heads of 7 and 2.
The tile reads whole arrays (a view made in the loop would count
references there), so the block's sum stays in a buffer of its own until
the block ends, and the last group of a block is padded with edges whose
``u`` and ``q`` are zero. Those add exact zeros, but for the sign of a
zero: a sum that underflowed to -0 becomes +0. The groups and the padding
depend only on the graph and the number of blocks, not on the threads, so
the bits do not either.
"""

import numpy as np
from numba import njit

from .activations import LEAKY_RELU, act, act_slope
from .backward import check_bias_part, upstream_delta
from .edge import edge_z
from .edge_terms import attribute_grads, target_edge_terms
from .gemm import matmul_rows
from .ir_parts import ALL_HEADS
from .prefetch import WINDOW, prefetch_row, window_rows
from .records import check_records
from .simd import dot3
from .source_sums import source_edge_row_sums

#: edges whose ``q_ij`` the target pass keeps before adding their ``u_ij ⊗ q_ij`` to ``∂L/∂W_E`` in one
#: product (the buffer, 64 x H x C values, stays in the L1 cache at 64 channels)
Q_EDGES = 64


@njit(nogil=True, cache=True)
def gatv2_backward_target_edge_blocks(
    b0,
    b1,
    indptr,
    indices,
    xl,
    xr,
    att,
    slope,
    kind,
    ahead,
    u,
    weT,
    edge_scale,
    alpha,
    grad,
    upstream,
    delta,
    p_out,
    att_part,
    we_part,
    grad_u,
    rec_w,
    rec_signs,
    bias_part,
):
    """``gatv2_backward_target_blocks`` with edge features (``ahead`` and ``bias_part`` as there).

    Also writes ``we_part`` (B, H, D, C), the blocks' ``Σ q_ij ⊗ u_ij``
    (fused multiply-adds in edge order, see the module docstring), and
    ``grad_u`` (E, D) = ``W_Eᵀ q_ij`` (none when ``grad_u`` has no rows: the
    attributes' gradient was not asked for); and, for LeakyReLU unless ``rec_signs``
    is None, each edge's source record (``rec_w`` and ``rec_signs``, one buffer; ``records.py``)
    for ``records.gatv2_backward_source_record_rows``.
    """
    n = indptr.size - 1
    block = -(-n // att_part.shape[0]) if n > 0 else 1
    heads = att.shape[0]
    channels = att.shape[1]
    dims = u.shape[1]
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    want_grad_u = grad_u.shape[0] > 0
    if want_grad_u and (grad_u.shape[0] != indptr[n] or grad_u.shape[1] != dims):
        raise ValueError("grad_u must have one row per edge and one column per attribute, or no rows")
    if weT.shape[0] != heads or weT.shape[1] != dims or weT.shape[2] != channels:
        raise ValueError("weT must have shape (heads, attributes, channels)")
    # dot3 (where attribute_grads steps aside) reads whole vectors of it; one channel has any stride
    if channels > 1 and weT.strides[2] != weT.itemsize:
        raise ValueError("weT must have contiguous channels")
    sign_base, head_bytes = (
        (0, 0)
        if rec_signs is None
        else check_records(rec_w, rec_signs, indices.size, heads, channels, kind, xl.itemsize)
    )
    dropout = edge_scale.shape[0] > 0
    with_bias = check_bias_part(bias_part, att_part)
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    # whole arrays for the tile (views made in the loops would count references there)
    qb = np.zeros((Q_EDGES, heads, channels), dtype=xl.dtype)  # q of the buffered edges
    q_rows = qb.reshape(Q_EDGES, heads * channels)  # the same memory, an edge per row
    u_cols = np.zeros((dims, Q_EDGES), dtype=xl.dtype)  # their u, an edge per column
    we_block = np.zeros((dims, heads * channels), dtype=xl.dtype)  # the block's Σ u_ij ⊗ q_ij
    no_bias = np.empty(0, dtype=xl.dtype)
    sb = np.empty((1, heads, channels), dtype=xl.dtype)
    for b in range(b0, b1):
        for h in range(heads):
            for c in range(channels):
                att_part[b, h, c] = zero
                if with_bias:
                    bias_part[b, h, c] = zero
        last = indptr[min(n, (b + 1) * block)] - 1  # the block's last edge
        k = 0  # edges in qb
        for i in range(b * block, min(n, (b + 1) * block)):
            start = indptr[i]
            end = indptr[i + 1]
            if with_bias:
                for h in range(heads):
                    for c in range(channels):
                        bias_part[b, h, c] += grad[i, h, c]
            for h in range(heads):
                for c in range(channels):
                    p_out[i, h, c] = zero
            upstream_delta(i, start, end, indices, xl, ahead, grad, alpha, edge_scale, upstream, delta)
            if rec_signs is not None:  # as backward.gatv2_backward_target_blocks: keep in step
                for e in range(start, end):
                    for h in range(heads):
                        rec_w[e, h] = alpha[e, h] * edge_scale[e, h] if dropout else alpha[e, h]
                        rec_w[e, heads + h] = delta[e, h]
            for e in range(start, end):
                j = indices[e]
                # LeakyReLU: the channels in whole vectors without scratch rows (see edge_sums.py)
                first = 0
                if leaky:
                    for h in range(heads):
                        first = target_edge_terms(
                            p_out,
                            att_part,
                            qb,
                            b,
                            i,
                            h,
                            e,
                            j,
                            k,
                            xl,
                            xr,
                            att,
                            u,
                            weT,
                            delta[e, h],
                            slope,
                            rec_signs,
                            sign_base,
                            head_bytes,
                        )
                if first < channels:
                    edge_z(zb, xr, i, xl, j, u, weT, e)
                    for h in range(heads):
                        dl = delta[e, h]
                        if leaky:  # branch-free, so the channel loop vectorises
                            for c in range(first, channels):
                                z = zb[0, h, c]
                                pos = z > zero
                                sb[0, h, c] = one if pos else slope
                                att_part[b, h, c] += dl * (z if pos else slope * z)
                            if rec_signs is not None:  # the signs of the channels left to this loop
                                at = sign_base + h * head_bytes
                                for kk in range(at + first // 8, at + head_bytes):
                                    rec_signs[e, kk] = 0
                                for c in range(first, channels):
                                    if zb[0, h, c] > zero:
                                        rec_signs[e, at + c // 8] |= np.uint8(1 << (c % 8))
                        else:
                            for c in range(first, channels):
                                z = zb[0, h, c]
                                sb[0, h, c] = act_slope(z, kind, slope)
                                att_part[b, h, c] += dl * act(z, kind, slope)
                        for c in range(first, channels):
                            qb[k, h, c] = dl * att[h, c] * sb[0, h, c]  # q_ij = ∂L/∂z_ij
                            p_out[i, h, c] += dl * sb[0, h, c]
                if want_grad_u and not attribute_grads(grad_u, e, weT, qb, k):
                    for d in range(dims):
                        g = zero
                        for h in range(heads):
                            g += dot3(weT, h, d, qb, k, h)
                        grad_u[e, d] = g
                for d in range(dims):
                    u_cols[d, k] = u[e, d]
                k += 1
                if k == Q_EDGES or e == last:
                    # the rest padded with u = q = 0 (stale q could be infinite: 0 * inf is NaN)
                    for kk in range(k, Q_EDGES):
                        for d in range(dims):
                            u_cols[d, kk] = zero
                        for c in range(heads * channels):
                            q_rows[kk, c] = zero
                    matmul_rows(np.int64(0), dims, u_cols, q_rows, no_bias, True, we_block)
                    k = 0
            for h in range(heads):
                for c in range(channels):
                    p_out[i, h, c] *= att[h, c]
        for h in range(heads):
            for d in range(dims):
                for c in range(channels):
                    we_part[b, h, d, c] = we_block[d, h * channels + c]
                    we_block[d, h * channels + c] = zero


@njit(nogil=True, cache=True)
def gatv2_backward_source_edge_rows(
    j0,
    j1,
    src_indptr,
    src_edges,
    src_targets,
    xl,
    xr,
    att,
    slope,
    kind,
    ahead,
    u,
    weT,
    edge_scale,
    alpha,
    delta,
    grad,
    q_out,
):
    """``gatv2_backward_source_rows`` with edge features (``u[e]`` prefetched too where ``ahead`` is an edge
    distance)."""
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    edge_bytes = heads * alpha.itemsize
    attr_bytes = u.shape[1] * u.itemsize
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    if (
        u.shape[0] != src_edges.size
        or weT.shape[0] != heads
        or weT.shape[1] != u.shape[1]
        or weT.shape[2] != channels
    ):
        raise ValueError("u must have one row per edge and weT shape (heads, attributes, channels)")
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    window = window_rows(row_bytes)
    n_dst = xr.shape[0]
    for j in range(j0, j1):
        lo = src_indptr[j]
        hi = src_indptr[j + 1]
        if ahead is not None and ahead != WINDOW:  # as gatv2_backward_source_rows, and u[e]
            for p in range(lo + ahead, min(hi + ahead, src_edges.size)):
                e = src_edges[p]
                i = src_targets[p]
                prefetch_row(xr, i, row_bytes)
                prefetch_row(grad, i, row_bytes)
                prefetch_row(alpha, e, edge_bytes)
                prefetch_row(delta, e, edge_bytes)
                prefetch_row(u, e, attr_bytes)
                if dropout:
                    prefetch_row(edge_scale, e, edge_bytes)
        elif ahead is not None and j + window < n_dst:  # as gatv2_backward_source_rows
            prefetch_row(xr, j + window, row_bytes)
            prefetch_row(grad, j + window, row_bytes)
        # LeakyReLU: the channels in whole vectors in registers (see source_sums.py)
        first = 0
        if leaky:  # every head (ir_parts.for_heads)
            first = source_edge_row_sums(
                q_out, j, ALL_HEADS, xl, xr, att, grad, src_edges, src_targets, alpha, delta, edge_scale, u, weT,
                lo, hi, slope,
            )  # fmt: skip
        if first == channels:
            continue
        for h in range(heads):
            for c in range(first, channels):
                q_out[j, h, c] = zero
        for p in range(lo, hi):
            e = src_edges[p]
            i = src_targets[p]
            edge_z(zb, xr, i, xl, j, u, weT, e)
            for h in range(heads):
                dl = delta[e, h]
                w = alpha[e, h]
                if dropout:
                    w = w * edge_scale[e, h]
                if leaky:  # branch-free
                    for c in range(first, channels):
                        s = one if zb[0, h, c] > zero else slope
                        q_out[j, h, c] += dl * att[h, c] * s + w * grad[i, h, c]
                else:
                    for c in range(first, channels):
                        q_out[j, h, c] += (
                            dl * att[h, c] * act_slope(zb[0, h, c], kind, slope) + w * grad[i, h, c]
                        )
