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
