"""Both projections of a layer, and their gradients, for small inputs, in one call each.

For a handful of nodes (one road scene: 10 x 16 features, 32 channels) a
BLAS call costs microseconds of dispatch for nanoseconds of arithmetic, and
the layer makes six of them. These loops do the same products on the
calling thread, in a fixed order (sums over the feature or node index in
increasing order), so the result depends on the sizes only, never on the
thread count. Larger inputs go to BLAS (``gatfast/layers/dense.py``).
"""

from numba import njit


@njit(cache=True)
def project2(x, W_l, b_l, W_r, b_r, xl, xr):
    """``xl = x @ W_l.T + b_l`` and ``xr = x @ W_r.T + b_r`` (a bias of size 0 is none)."""
    n, f = x.shape
    width = W_l.shape[0]
    zero = xl.dtype.type(0.0)
    for i in range(n):
        for c in range(width):
            sl = zero
            sr = zero
            for k in range(f):
                v = x[i, k]
                sl += v * W_l[c, k]
                sr += v * W_r[c, k]
            if b_l.size:
                sl += b_l[c]
            if b_r.size:
                sr += b_r[c]
            xl[i, c] = sl
            xr[i, c] = sr


@njit(cache=True)
def project2_backward(x, g_l, g_r, W_l, W_r, gW_l, gb_l, gW_r, gb_r, grad_x):
    """Gradients of :func:`project2` given ``g_l = ∂L/∂xl`` and ``g_r = ∂L/∂xr``.

    Writes ``gW_l = g_lᵀ x``, ``gW_r = g_rᵀ x``, the bias gradients (column
    sums; skipped when their size is 0) and ``grad_x = g_l W_l + g_r W_r``
    (skipped when its size is 0).
    """
    n, f = x.shape
    width = W_l.shape[0]
    zero = x.dtype.type(0.0)
    for c in range(width):
        for k in range(f):
            sl = zero
            sr = zero
            for i in range(n):
                sl += g_l[i, c] * x[i, k]
                sr += g_r[i, c] * x[i, k]
            gW_l[c, k] = sl
            gW_r[c, k] = sr
        if gb_l.size:
            sl = zero
            sr = zero
            for i in range(n):
                sl += g_l[i, c]
                sr += g_r[i, c]
            gb_l[c] = sl
            gb_r[c] = sr
    if grad_x.size:
        for i in range(n):
            for k in range(f):
                s = zero
                for c in range(width):
                    s += g_l[i, c] * W_l[c, k] + g_r[i, c] * W_r[c, k]
                grad_x[i, k] = s
