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
so the result does not depend on the thread count. Nothing of size E x C is
ever allocated: ``z_ij`` is recomputed from ``xr[i] + xl[j]``.
"""

import math

import numpy as np
from numba import njit, prange

from .activations import act


@njit(parallel=True, cache=True)
def gatv2_forward(indptr, indices, xl, xr, att, slope, kind, edge_scale, alpha, out):
    n = indptr.size - 1
    heads = att.shape[0]
    channels = att.shape[1]
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    for i in prange(n):
        start = indptr[i]
        end = indptr[i + 1]
        for h in range(heads):
            for c in range(channels):
                out[i, h, c] = zero
            if start == end:
                continue
            # scores e_ij, kept in alpha until normalised
            row_max = -np.inf
            for e in range(start, end):
                j = indices[e]
                score = zero
                for c in range(channels):
                    score += att[h, c] * act(xr[i, h, c] + xl[j, h, c], kind, slope)
                alpha[e, h] = score
                if score > row_max:
                    row_max = score
            denom = zero
            for e in range(start, end):
                w = math.exp(alpha[e, h] - row_max)
                alpha[e, h] = w
                denom += w
            inv = one / denom
            for e in range(start, end):
                a_ij = alpha[e, h] * inv
                alpha[e, h] = a_ij
                if dropout:
                    a_ij = a_ij * edge_scale[e, h]
                    if a_ij == zero:
                        continue
                j = indices[e]
                for c in range(channels):
                    out[i, h, c] += a_ij * xl[j, h, c]
