"""Both projections of a layer, and their gradients, for small inputs, in one call each.

For a handful of nodes (one road scene: 10 x 16 features, 32 channels) a
BLAS call costs microseconds of dispatch for nanoseconds of arithmetic, and
the layer makes six of them. These loops do the same products on the
calling thread, in a fixed order (sums over the feature or node index in
increasing order), so the result depends on the sizes only, never on the
thread count. Larger inputs go to BLAS (``gatfast/layers/dense.py``).
"""

import numpy as np
from numba import njit


@njit(cache=True)
def project2(x, W_l, b_l, W_r, b_r, xl, xr):
    """``xl = x @ W_l.T + b_l`` and ``xr = x @ W_r.T + b_r`` (a bias of size 0 is none).

    Each output is a sum over the features ``k`` in increasing order, then
    the bias; the loops run over the output channels innermost (on
    transposed copies of the weights), so that they vectorise without
    changing that order.
    """
    n, f = x.shape
    width = W_l.shape[0]
    zero = xl.dtype.type(0.0)
    wl = np.empty((f, width), W_l.dtype)
    wr = np.empty((f, width), W_r.dtype)
    for c in range(width):
        for k in range(f):
            wl[k, c] = W_l[c, k]
            wr[k, c] = W_r[c, k]
    for i in range(n):
        for c in range(width):
            xl[i, c] = zero
            xr[i, c] = zero
        for k in range(f):
            v = x[i, k]
            for c in range(width):
                xl[i, c] += v * wl[k, c]
                xr[i, c] += v * wr[k, c]
        if b_l.size:
            for c in range(width):
                xl[i, c] += b_l[c]
        if b_r.size:
            for c in range(width):
                xr[i, c] += b_r[c]


@njit(cache=True)
def project2_backward(x, g_l, g_r, W_l, W_r, gW_l, gb_l, gW_r, gb_r, grad_x):
    """Gradients of :func:`project2` given ``g_l = ∂L/∂xl`` and ``g_r = ∂L/∂xr``.

    Writes ``gW_l = g_lᵀ x``, ``gW_r = g_rᵀ x``, the bias gradients (column
    sums; skipped when their size is 0) and ``grad_x = g_l W_l + g_r W_r``
    (skipped when its size is 0). Every sum runs over its index in
    increasing order (rows ``i`` for the weights and biases, channels ``c``
    for ``grad_x``), with the contiguous index innermost so the loops vectorise.
    """
    n, f = x.shape
    width = W_l.shape[0]
    zero = x.dtype.type(0.0)
    # The loops over the summed index run outermost, so consecutive updates
    # go to different rows of the output (independent, not one chain
    # through memory); each element still sums in increasing order.
    for c in range(width):
        for k in range(f):
            gW_l[c, k] = zero
            gW_r[c, k] = zero
    for i in range(n):
        for c in range(width):
            a = g_l[i, c]
            b = g_r[i, c]
            for k in range(f):
                gW_l[c, k] += a * x[i, k]
                gW_r[c, k] += b * x[i, k]
    if gb_l.size:
        for c in range(width):
            gb_l[c] = zero
            gb_r[c] = zero
        for i in range(n):
            for c in range(width):
                gb_l[c] += g_l[i, c]
                gb_r[c] += g_r[i, c]
    if grad_x.size:
        for i in range(n):
            for k in range(f):
                grad_x[i, k] = zero
        for c in range(width):
            for i in range(n):
                a = g_l[i, c]
                b = g_r[i, c]
                for k in range(f):
                    grad_x[i, k] += a * W_l[c, k] + b * W_r[c, k]
