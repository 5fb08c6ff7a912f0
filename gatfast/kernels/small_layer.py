"""A whole layer in one call each way, for graphs of a few nodes (one road scene).

On a 10-node scene the arithmetic of a layer takes a few microseconds and
the general path's Python (a dozen array allocations, three kernel calls,
the dense products, the bias and the finiteness check) took ten times as
long. These two kernels chain the same steps in one call: the same
functions (``project2``, the forward and backward passes over all rows,
``project2_backward``) in the same order, and the remaining sums (the
mean over heads, the bias gradient) in the general path's order, so the result
is the same bits as the general path (tested), but for sums of a single
column (one head of one channel, or one channel averaged over heads) over
many rows: there the general path's ``kernels.column_sum`` takes numpy's
pairwise sum.

Only the plain layer (no edge features, root weight or residual) of one
dense feature matrix takes this path; ``gatfast/layers/small.py`` decides.
"""

import math

import numpy as np
from numba import njit

from .backward import gatv2_backward_target_blocks
from .dense_small import project2, project2_backward
from .forward import gatv2_forward_rows
from .frozen import frozen
from .gemm import matmul_pair_rows
from .pairwise import gatv2_pairwise_theta_r_rows
from .prefetch import WINDOW


@njit(nogil=True, cache=True)
def small_layer_forward(
    x,
    W_l,
    b_l,
    W_r,
    b_r,
    tiles,
    indptr,
    indices,
    att,
    slope,
    kind,
    edge_scale,
    bias,
    xl,
    xr,
    alpha,
    per_head,
    out,
):
    """Projections, attention and output of the layer; returns whether ``x`` and ``out`` are finite.

    ``out`` (n, H*C) is a view of ``per_head`` when the heads are
    concatenated, else (n, C) gets their mean; ``bias`` of size 0 is none.
    ``x`` is checked too: a NaN in a row no edge reads would not reach ``out``.
    ``tiles`` is ``(W_l.T, b_l, W_r.T, b_r)`` as the general path hands them to
    the dense tile (read-only, contiguous, biases of size 0 for none) for a few
    wide rows, whose projections it computes there; empty transposes for a small
    product, projected in the loops of ``project2`` as the general path does.
    """
    n = x.shape[0]
    heads, channels = att.shape
    for i in range(n):
        for k in range(x.shape[1]):
            if not math.isfinite(x[i, k]):
                return False
    wlt, blt, wrt, brt = tiles
    if wlt.shape[0] == 0:
        project2(x, W_l, b_l, W_r, b_r, xl.reshape(n, heads * channels), xr.reshape(n, heads * channels))
    else:  # the general path's dense_projections over all the rows, with its argument types
        width = heads * channels
        matmul_pair_rows(np.int64(0), n, x, wlt, blt, xl.reshape(n, width), wrt, brt, xr.reshape(n, width))
    # a first row typed int64, not the literal 0: the general path's specialisation, compiled once
    # the output is finished below (the mean of the heads first, where they are averaged)
    unfinished = n < 0  # False, typed as the general path's flag
    # the window prefetch, the cheapest: one per row where the edge prefetch makes one per edge, and a
    # scene's rows are in cache anyway
    head = (indptr, indices, xl, xr, att, slope, kind, np.int64(WINDOW))
    gatv2_forward_rows(np.int64(0), n, *head, edge_scale, bias[:0], unfinished, alpha, per_head)
    concat = out.shape[1] == heads * channels
    inv = xl.dtype.type(heads)
    finite = True
    for i in range(n):
        for h in range(heads if concat else 1):
            for c in range(channels):
                if concat:
                    v = per_head[i, h, c]
                else:  # numpy's mean: the heads added in order, then divided
                    v = per_head[i, 0, c]
                    for k in range(1, heads):
                        v += per_head[i, k, c]
                    v = v / inv
                if bias.size:
                    v += bias[h * channels + c]
                out[i, h * channels + c] = v
                finite = finite and math.isfinite(v)
    return finite


@njit(nogil=True, cache=True)
def small_layer_backward(
    x,
    W_l,
    W_r,
    indptr,
    indices,
    xl,
    xr,
    att,
    slope,
    kind,
    no_edges,
    no_edge_weights,
    edge_scale,
    alpha,
    grad_out,
    pairwise,
    num_blocks,
    grad_att,
    grad_bias,
    gW_l,
    gb_l,
    gW_r,
    gb_r,
    grad_x,
):
    """Every gradient of the layer given ``grad_out`` (n, out_dim); returns whether ``grad_out`` is finite.

    Writes the ``g*`` and ``grad_*`` arrays (garbage when ``grad_out`` is
    not finite: the caller then takes the general path, which names the
    error). The per-head gradient is ``grad_out`` itself with concatenated
    heads, ``grad_out / H`` with averaged ones. The attention gradient is
    summed over the general path's ``num_blocks`` row blocks, in block
    order, and so is the bias gradient with concatenated heads. ``grad_bias``
    of size 0 (no bias) is skipped, as ``gb_l`` and ``gb_r``. ``no_edges`` (0, 1) and ``no_edge_weights`` (H, 1, C) stand for
    the absent edge features. The scratch arrays are allocated here: a
    NumPy allocation and an argument from Python cost more than the work.
    """
    n = x.shape[0]
    heads, channels = att.shape
    width = heads * channels
    concat = grad_out.shape[1] == width
    inv = xl.dtype.type(heads)
    dtype = xl.dtype
    nnz = indices.size
    g_heads = np.empty((n, heads, channels), dtype)
    upstream = np.empty((nnz, heads), dtype)
    delta = np.empty((nnz, heads), dtype)
    p_term = np.empty((n, heads, channels), dtype)
    q_term = np.empty((n, heads, channels), dtype)
    att_part = np.empty((num_blocks, heads, channels), dtype)
    finite = True
    for i in range(n):
        for c in range(grad_out.shape[1]):
            finite = finite and math.isfinite(grad_out[i, c])
    if not finite:
        return False
    for i in range(n):
        for h in range(heads):
            for c in range(channels):
                g_heads[i, h, c] = grad_out[i, h * channels + c] if concat else grad_out[i, c] / inv
    # the bias gradient: with concatenated heads the target pass's block sums (below), as the general path;
    # with averaged heads numpy's sum over rows, the first row, then the others in order (0 for none)
    in_target_pass = grad_bias.size > 0 and concat
    bias_part = np.empty((num_blocks if in_target_pass else 0, heads, channels), dtype)
    if grad_bias.size and not concat:
        for c in range(grad_out.shape[1]):
            grad_bias[c] = grad_out[0, c] if n > 0 else xl.dtype.type(0.0)
        for i in range(1, n):
            for c in range(grad_out.shape[1]):
                grad_bias[c] += grad_out[i, c]
    # int64 and read-only, as from the general path: its specialisations, not a second compile of each
    first = np.int64(0)
    grad = frozen(g_heads)
    # one chunk of every row: its ends close it, so the target pass does the source pass too (the same bits)
    ends = np.zeros(n + 1, np.uint8)
    ends[0] = 1
    ends[n] = 1
    gatv2_backward_target_blocks(
        first,
        att_part.shape[0],
        indptr,
        indices,
        xl,
        xr,
        att,
        slope,
        kind,
        np.int64(WINDOW),
        edge_scale,
        alpha,
        grad,
        upstream,
        delta,
        p_term,
        att_part,
        bias_part,
        None,
        None,
        frozen(ends),
        q_term,
    )
    if in_target_pass:  # the blocks added in order, from zero (kernels.column_sum)
        for c in range(width):
            grad_bias[c] = dtype.type(0.0)
        for b in range(num_blocks):
            for h in range(heads):
                for c in range(channels):
                    grad_bias[h * channels + c] += bias_part[b, h, c]
    for h in range(heads):  # numpy's sum over the blocks: in block order
        for c in range(channels):
            grad_att[h, c] = att_part[0, h, c]
    for b in range(1, att_part.shape[0]):
        for h in range(heads):
            for c in range(channels):
                grad_att[h, c] += att_part[b, h, c]
    if pairwise:
        gatv2_pairwise_theta_r_rows(
            first,
            n,
            indptr,
            indices,
            xl,
            xr,
            att,
            slope,
            kind,
            no_edges,
            no_edge_weights,
            alpha,
            upstream,
            p_term,
        )
    project2_backward(
        x, q_term.reshape(n, width), p_term.reshape(n, width), W_l, W_r, gW_l, gb_l, gW_r, gb_r, grad_x
    )
    return True
