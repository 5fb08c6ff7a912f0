"""GATv2 forward pass: scores, row softmax and aggregation, fused per row.

Arrays (one layer, ``H`` heads of ``C`` channels, ``n`` nodes, ``E`` edges):

* ``indptr`` (n+1,), ``indices`` (E,): CSR by target.
* ``xl`` (n, H, C): source projections ``Θ_L h̃_j``; ``xr`` (n, H, C): target
  projections ``Θ_R h̃_i``.
* ``att`` (H, C); ``slope``: LeakyReLU negative slope in the arrays' dtype.
* ``edge_scale`` (E, H) or (0, H): attention-dropout multipliers
  (``m_ij / (1 - p)``); an empty array means no dropout.
* outputs: ``alpha`` (E, H) softmax weights, ``out`` (n, H, C) per head.

Every ``prange`` iteration writes only its own row of ``alpha`` and ``out``,
and every sum runs in a fixed order (the per-edge score as fixed-order SIMD,
see ``simd.py``), so the result does not depend on the thread count. Nothing of size E x C is ever allocated: ``z_ij`` is
recomputed from ``xr[i] + xl[j]``. All arithmetic stays in the arrays' dtype.
"""

import math

from numba import njit, prange

from .activations import LEAKY_RELU, act
from .prefetch import PREFETCH_DISTANCE, prefetch_row
from .simd import leaky_score


@njit(parallel=True, cache=True)
def gatv2_forward(indptr, indices, xl, xr, att, slope, kind, edge_scale, alpha, out):
    n = indptr.size - 1
    nnz = indices.size
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    # the SIMD score needs contiguous channels (always true for the layer's buffers)
    simd = (
        kind == LEAKY_RELU
        and xl.strides[2] == xl.itemsize
        and xr.strides[2] == xr.itemsize
        and att.strides[1] == att.itemsize
    )
    for i in prange(n):
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
