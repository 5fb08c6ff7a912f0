"""The projections' backward in one pass per chunk of rows: weight and bias partials, and the input gradient.

For ``xl = x @ W_lᵀ + b_l`` and ``xr = x @ W_rᵀ + b_r`` with upstream
gradients ``g_l`` and ``g_r`` (n x C each), :func:`dense_grad_chunks`
computes, for each chunk ``k`` of ``size`` rows,

* ``gw[k, s] = g_s[rows]ᵀ @ x[rows]`` (C x K) for each side ``s``,
* ``gb[k, s] = Σ_rows g_s[row]`` (skipped when ``gb`` has no columns),
* ``grad_x[rows] = g_l[rows] @ W_l + g_r[rows] @ W_r`` (skipped when
  ``grad_x`` has no rows),

all with the register tile of ``gemm.py``; the caller adds the chunks'
partials in chunk order. The chunks are fixed by the row count alone, so
the result is the same bits for any thread count.

The chunk's rows are taken in blocks of :data:`BLOCK` rows, each block's
``gᵀ x`` continuing the sums of the one before (the tile's ``accumulate``),
so every element is still one sum over the chunk's rows in increasing
order. Blocks that small keep the rows the tile reads again for every few
output rows in the L1 and L2 caches: on a 2-core Intel Xeon (one thread)
blocks of 128 rows took 0.74-0.89x OpenBLAS's time for ``gᵀ x`` on 2048
and 20,399 rows of 16 features and 0.80x on 6,250 rows of 64, where one
block of the whole chunk took 0.93-1.03x. Each block's rows of
``grad_x`` follow its ``gᵀ x``, while the block's rows of ``g_l`` and
``g_r`` are still in the cache (each row of ``grad_x`` is computed alone,
so the order of the blocks does not change it): on another 2-core Xeon
(2026-12-07, one thread, alternating in one process) a chunk of 6,250
rows of 64 features took 0.97x the time of the products one after the
other, and one chunk of 200,000 rows 0.85x.

Doing all of it in one call per chunk replaces, per chunk, two BLAS calls,
two column sums and two tile calls made from Python threads, whose glue
held the GIL while the other thread waited for it.
"""

import numpy as np
from numba import njit

from .gemm import matmul_rows
from .reduce import sum_rows

#: rows per block of a chunk (see the module docstring)
BLOCK = 128


@njit(nogil=True, cache=True)
def dense_grad_chunks(k0, k1, size, transposed, x, g_l, g_r, w_l, w_r, no_bias, gw, gb, grad_x):
    """Chunks ``[k0, k1)`` of ``size`` rows (see the module docstring).

    ``gw`` (chunks, sides, C, K) and ``gb`` (chunks, sides, C or 0) receive
    the partials; with ``transposed``, ``gw`` is (chunks, sides, K, C) and
    holds ``x[rows]ᵀ @ g_s[rows]``, the orientation whose output rows fill
    more of the tile's vectors. ``sides`` is 1 when the weights are shared
    (then ``g_r`` and ``w_r`` are not read). ``x``, ``g_l``, ``g_r`` and
    ``grad_x`` need contiguous rows, ``w_l`` and ``w_r`` (C, K) too; one
    float dtype. ``no_bias`` is an empty array of the projections' bias
    type, so that the tile compiled for them serves ``grad_x`` too.
    """
    n = x.shape[0]
    sides = gw.shape[1]
    channels = g_l.shape[1]
    features = x.shape[1]
    with_bias = gb.shape[2] > 0
    # the tile and reduce.sum_rows read and write without bounds checks
    if g_l.shape[0] < n or g_r.shape[0] < n or g_r.shape[1] != channels:
        raise ValueError("g_l and g_r must have x's rows and one width")
    if gb.shape[2] not in (0, channels) or gb.shape[0] != gw.shape[0] or gb.shape[1] != sides:
        raise ValueError("gb must have (chunks, sides, channels or 0) values")
    rows_out = features if transposed else channels
    if gw.shape[0] < k1 or gw.shape[2] != rows_out or gw.shape[3] != (channels if transposed else features):
        raise ValueError("gw must have a (C, K) partial, (K, C) transposed, per side of each chunk up to k1")
    if grad_x.shape[1] != features or (
        grad_x.shape[0] > 0
        and (
            grad_x.shape[0] != n
            or w_l.shape[0] != channels
            or w_r.shape[0] != channels
            or w_l.shape[1] != features
            or w_r.shape[1] != features
        )
    ):
        raise ValueError("grad_x must have x's shape, or no rows; w_l and w_r then (channels, features)")
    first = np.int64(0)  # not a literal: the projections' specialisation of the tile serves every call
    for k in range(k0, k1):
        r0 = k * size
        r1 = min(n, r0 + size)
        for s in range(sides):
            if with_bias:  # the rows in order from zero, in registers (reduce.sum_rows)
                sum_rows(gb[k, s], g_l if s == 0 else g_r, r0, r1)
            if r1 == r0:  # an empty chunk: no block runs, and the partial is 0
                gw[k, s] = 0.0
        for b0 in range(r0, r1, BLOCK):  # each block's rows read once from memory, for every product
            b1 = min(r1, b0 + BLOCK)
            # the sides' gᵀ x, then g_l @ w_l and += g_r @ w_r, from one call site (each site links and
            # optimises the tile's code again: compile time)
            for p in range(sides + (sides if grad_x.shape[0] > 0 else 0)):
                s = p % sides
                g = g_l if s == 0 else g_r
                if p < sides:
                    a = x[b0:b1].T if transposed else g[b0:b1].T
                    b = g[b0:b1] if transposed else x[b0:b1]
                    lo, hi, more, out = first, rows_out, b0 > r0, gw[k, s]
                else:
                    a = g[b0:b1]
                    b = w_l if s == 0 else w_r
                    lo, hi, more, out = first, b1 - b0, s > 0, grad_x[b0:b1]
                matmul_rows(lo, hi, a, b, no_bias, more, out)
