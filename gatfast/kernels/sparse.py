"""Sparse (CSR) times dense products for sparse node features.

Bag-of-words features such as Cora's are ~1% dense; multiplying them as
sparse costs ``nnz(x) * width`` instead of ``n * F * width``. Each function
computes the rows ``[r0, r1)`` and releases the GIL
(``gatfast._runtime.run_rows`` runs chunks of rows on threads); each row
sums its nonzeros in stored order, so the result is the same for any thread
count (scipy's own product is single-threaded).
"""

from numba import njit


@njit(nogil=True, cache=True)
def csr_dense_matmul_rows(r0, r1, indptr, indices, data, dense, bias, out):
    """Rows ``[r0, r1)`` of ``out = A @ dense (+ bias)`` for ``A`` given by CSR arrays.

    ``dense`` (k, m) and ``out`` (rows, m) are C-contiguous; ``bias`` has
    shape (m,) or (0,) for none. ``out``'s rows are overwritten.
    """
    width = dense.shape[1]
    has_bias = bias.size > 0
    zero = out.dtype.type(0.0)
    for i in range(r0, r1):
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


@njit(nogil=True, cache=True)
def csr_dense_matmul2_rows(r0, r1, indptr, indices, data, dense_a, dense_b, bias_a, bias_b, out_a, out_b):
    """Rows ``[r0, r1)`` of ``out_a = A @ dense_a + bias_a`` and ``out_b = A @ dense_b + bias_b``.

    As :func:`csr_dense_matmul_rows` for two right-hand sides (the source and
    the target projections), reading the sparse matrix once.
    """
    width_a = dense_a.shape[1]
    width_b = dense_b.shape[1]
    zero = out_a.dtype.type(0.0)
    for i in range(r0, r1):
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
