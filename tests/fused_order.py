"""The dense tile's documented order of operations, written plainly (``kernels/gemm.py``). Tests only.

Each output element ``Σ_k a[i, k] * b[k, j]`` over ``k`` in increasing order, each step one fused
multiply-add (``gemm.fma``), from 0 or from a start value, then the bias: the bits the tile must give.
"""

import numpy as np
from numba import njit

from gatfast.kernels.gemm import fma


@njit
def _fused_sums(a, b, c):
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            total = c[i, j]
            for k in range(a.shape[1]):
                total = fma(a[i, k], b[k, j], total)
            c[i, j] = total


def in_order(a, b, bias=None, start=None):
    """``a @ b`` in the tile's order, from 0 (or from a copy of ``start``), then ``+ bias`` when given."""
    total = np.zeros((a.shape[0], b.shape[1]), a.dtype) if start is None else start.copy()
    _fused_sums(np.ascontiguousarray(a), np.ascontiguousarray(b), total)
    return total + bias if bias is not None and bias.size else total
