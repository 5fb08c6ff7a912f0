"""Sparse (CSR) times dense products for sparse node features.

Bag-of-words features such as Cora's are ~1% dense; multiplying them as
sparse costs ``nnz(x) * width`` instead of ``n * F * width``. Rows run in
parallel and each row sums its nonzeros in stored order, so the result is
the same for any thread count (scipy's own product is single-threaded).
"""

from numba import njit, prange


@njit(parallel=True, cache=True)
def csr_dense_matmul(indptr, indices, data, dense, bias, out):
    """``out = A @ dense (+ bias)`` for ``A`` given by CSR arrays.

    ``dense`` (k, m) and ``out`` (rows, m) are C-contiguous; ``bias`` has
    shape (m,) or (0,) for none. ``out`` is overwritten.
    """
    rows = indptr.size - 1
    width = dense.shape[1]
    has_bias = bias.size > 0
    zero = out.dtype.type(0.0)
    for i in prange(rows):
        for c in range(width):
            out[i, c] = zero
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k]
            f = indices[k]
            for c in range(width):
                out[i, c] += v * dense[f, c]
        if has_bias:
            for c in range(width):
                out[i, c] += bias[c]


@njit(parallel=True, cache=True)
def csr_dense_matmul2(indptr, indices, data, dense_a, dense_b, bias_a, bias_b, out_a, out_b):
    """``out_a = A @ dense_a + bias_a`` and ``out_b = A @ dense_b + bias_b`` in one pass over ``A``.

    As :func:`csr_dense_matmul` for two right-hand sides (the source and the
    target projections), reading the sparse matrix once.
    """
    rows = indptr.size - 1
    width_a = dense_a.shape[1]
    width_b = dense_b.shape[1]
    zero = out_a.dtype.type(0.0)
    for i in prange(rows):
        for c in range(width_a):
            out_a[i, c] = zero
        for c in range(width_b):
            out_b[i, c] = zero
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k]
            f = indices[k]
            for c in range(width_a):
                out_a[i, c] += v * dense_a[f, c]
            for c in range(width_b):
                out_b[i, c] += v * dense_b[f, c]
        if bias_a.size > 0:
            for c in range(width_a):
                out_a[i, c] += bias_a[c]
        if bias_b.size > 0:
            for c in range(width_b):
                out_b[i, c] += bias_b[c]
