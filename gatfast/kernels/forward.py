"""GATv2 forward pass: scores, row softmax and aggregation, fused per row.

Arrays (one layer, ``H`` heads of ``C`` channels, ``n_dst`` target rows,
``n_src`` sources, ``E`` edges, ``D`` edge features):

* ``indptr`` (n_dst+1,), ``indices`` (E,): CSR by target, sources in ``[0, n_src)``.
* ``xl`` (n_src, H, C): source projections ``Θ_L h̃_j``; ``xr`` (n_dst, H, C):
  target projections ``Θ_R h̃_i``.
* ``att`` (H, C); ``slope``: LeakyReLU negative slope in the arrays' dtype.
* ``u`` (E, D) edge attributes in CSR order, or (0, D) for none; ``weT``
  (H, D, C) the edge weights (see ``edge.py``).
* ``edge_scale`` (E, H) or (0, H): attention-dropout multipliers
  (``m_ij / (1 - p)``); an empty array means no dropout.
* outputs: ``alpha`` (E, H) softmax weights, ``out`` (n_dst, H, C) per head.

:func:`gatv2_forward_rows` computes the rows ``r0 .. r1 - 1`` and releases
the GIL: ``gatfast._runtime.run_rows`` runs it once over all rows for small
work, or over chunks of rows on a thread pool. Each row writes only its own
outputs and every sum runs in a fixed order, so the result is the same bits
for any thread count.
Nothing of size E x C is ever allocated: ``z_ij`` is recomputed per edge.
All arithmetic stays in the arrays' dtype.
"""

import math

import numpy as np
from numba import njit

from .activations import LEAKY_RELU, act
from .edge import edge_z
from .prefetch import PREFETCH_DISTANCE, prefetch_row
from .simd import leaky_dot, leaky_score


@njit(nogil=True, cache=True)
def gatv2_forward_rows(r0, r1, indptr, indices, xl, xr, att, slope, kind, u, weT, edge_scale, alpha, out):
    """Forward pass of the target rows ``r0 .. r1 - 1`` (see the module docstring)."""
    nnz = indices.size
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    dropout = edge_scale.shape[0] > 0
    has_edge = u.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    leaky = kind == LEAKY_RELU
    # the SIMD score needs contiguous channels (always true for the layer's buffers)
    simd = leaky and xl.strides[2] == xl.itemsize and xr.strides[2] == xr.itemsize and att.strides[1] == att.itemsize
    zb = np.empty((1, heads, channels) if has_edge else (1, 1, 1), dtype=xl.dtype)
    for i in range(r0, r1):
        start = indptr[i]
        end = indptr[i + 1]
        for h in range(heads):
            for c in range(channels):
                out[i, h, c] = zero
        if start == end:
            continue
        # 1. scores e_ij of all heads, kept in alpha until normalised; one
        #    gather of xl[j] per edge, the rows of later edges prefetched
        for e in range(start, end):
            if e + PREFETCH_DISTANCE < nnz:
                prefetch_row(xl, indices[e + PREFETCH_DISTANCE], row_bytes)
            j = indices[e]
            if has_edge:
                edge_z(zb, xr, i, xl, j, u, weT, e)
                for h in range(heads):
                    if simd:
                        alpha[e, h] = leaky_dot(att, zb, 0, h, slope)
                    else:
                        score = zero
                        for c in range(channels):
                            score += att[h, c] * act(zb[0, h, c], kind, slope)
                        alpha[e, h] = score
                continue
            for h in range(heads):
                if simd:
                    alpha[e, h] = leaky_score(att, xr, i, xl, j, h, slope)
                else:
                    score = zero
                    for c in range(channels):
                        score += att[h, c] * act(xr[i, h, c] + xl[j, h, c], kind, slope)
                    alpha[e, h] = score
        # 2. softmax per head (max subtracted, so large logits cannot overflow)
        for h in range(heads):
            row_max = alpha[start, h]
            for e in range(start + 1, end):
                if alpha[e, h] > row_max:
                    row_max = alpha[e, h]
            denom = zero
            for e in range(start, end):
                w = math.exp(alpha[e, h] - row_max)
                alpha[e, h] = w
                denom += w
            inv = one / denom
            for e in range(start, end):
                alpha[e, h] = alpha[e, h] * inv
        # 3. aggregation; xl[j] of this row is still in cache from step 1
        for e in range(start, end):
            j = indices[e]
            for h in range(heads):
                a_ij = alpha[e, h]
                if dropout:
                    a_ij = a_ij * edge_scale[e, h]
                    if a_ij == zero:
                        continue
                for c in range(channels):
                    out[i, h, c] += a_ij * xl[j, h, c]
