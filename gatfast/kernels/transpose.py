"""A matrix's transpose written into a C-contiguous array, tile by tile.

The weight gradients of a layer on sparse features come out of the sparse
product as ``(features, H * C)`` and the parameters are ``(H * C,
features)``; the forward's sparse product reads ``W.T`` by rows. NumPy's
``ascontiguousarray(a.T)`` walks one of the two arrays across rows of
other cache lines: on Cora's 1433 x 64 float32 it took 106-139 us, where
these 16 x 16 tiles took 31-42 us (one thread, Intel Xeon); 64 x 1433 took
30-45 against 33-35 us. A copy: the values' bits are unchanged.
"""

from numba import njit

#: rows and columns of a tile: 16 x 16 float32 is 1 KiB read and written, within the L1 cache
TILE = 16


@njit(nogil=True, cache=True)
def transpose_into(a, out):
    """``out[j, i] = a[i, j]`` for a 2-D ``a`` of shape ``(n, m)`` and ``out`` of shape ``(m, n)``."""
    n, m = a.shape
    if out.shape[0] != m or out.shape[1] != n:
        raise ValueError("out must have a's shape reversed")
    whole_n = n - n % TILE
    whole_m = m - m % TILE
    for i0 in range(0, whole_n, TILE):
        for j0 in range(0, whole_m, TILE):
            for jj in range(TILE):
                for ii in range(TILE):
                    out[j0 + jj, i0 + ii] = a[i0 + ii, j0 + jj]
    for i in range(whole_n):  # the columns past the last whole tile
        for j in range(whole_m, m):
            out[j, i] = a[i, j]
    for i in range(whole_n, n):  # the rows past the last whole tile
        for j in range(m):
            out[j, i] = a[i, j]
