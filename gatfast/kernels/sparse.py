"""Sparse (CSR) times dense products for sparse node features.

Bag-of-words features such as Cora's are ~1% dense; multiplying them as
sparse costs ``nnz(x) * width`` instead of ``n * F * width``. Each function
computes the rows ``[r0, r1)`` and releases the GIL
(``gatfast._runtime.run_rows`` runs chunks of rows on threads); each row
sums its nonzeros in stored order, so the result is the same for any thread
count (scipy's own product is single-threaded). Each row is one
:func:`combine.combine_rows` (the sums in registers).
"""

from numba import njit

from .combine import combine_rows


@njit(inline="always", cache=True)
def _add_bias(r0, r1, bias, out):
    """``out[r0:r1] += bias`` (a bias of size 0: none), over ``out``'s width."""
    if bias.size == 0:
        return
    for i in range(r0, r1):
        for c in range(out.shape[1]):
            out[i, c] += bias[c]


@njit(nogil=True, cache=True)
def csr_dense_matmul_rows(r0, r1, indptr, indices, data, dense, bias, out):
    """Rows ``[r0, r1)`` of ``out = A @ dense (+ bias)`` for ``A`` given by CSR arrays.

    ``dense`` (k, m) and ``out`` (rows, m); ``bias`` has shape (m,) or (0,)
    for none. ``out``'s rows are overwritten.
    """
    no_scale = data[:0]
    for i in range(r0, r1):
        combine_rows(out, i, 0, dense, indices, data, no_scale, indptr[i], indptr[i + 1])
    _add_bias(r0, r1, bias, out)


@njit(nogil=True, cache=True)
def csr_dense_matmul2_rows(r0, r1, indptr, indices, data, dense_a, dense_b, bias_a, bias_b, out_a, out_b):
    """Rows ``[r0, r1)`` of ``out_a = A @ dense_a + bias_a`` and ``out_b = A @ dense_b + bias_b``.

    As :func:`csr_dense_matmul_rows` for two right-hand sides (the source and
    the target projections), with each row of the sparse matrix read twice
    while it is in cache.
    """
    no_scale = data[:0]
    for i in range(r0, r1):
        lo, hi = indptr[i], indptr[i + 1]
        combine_rows(out_a, i, 0, dense_a, indices, data, no_scale, lo, hi)
        combine_rows(out_b, i, 0, dense_b, indices, data, no_scale, lo, hi)
    _add_bias(r0, r1, bias_a, out_a)
    _add_bias(r0, r1, bias_b, out_b)


@njit(nogil=True, cache=True)
def gather_if_same(kept_indptr, indptr, kept_indices, indices, positions, data, out):
    """Whether ``indptr`` and ``indices`` equal ``kept_indptr`` and ``kept_indices``; where they do, also
    ``out[k] = data[positions[k]]`` for every ``k``: the values of a kept sparse structure, gathered.

    One pass over each array with no temporaries (``workspace.Workspace.transposed``, at every step of a
    layer on sparse features): ``numpy.array_equal`` twice and a fancy index took 0.12 ms on Cora's
    49,216 nonzeros (one thread, Intel Xeon). Arrays of other lengths are never equal; ``positions`` must
    hold indices into ``data`` and have ``out``'s length.
    """
    if indptr.size != kept_indptr.size or indices.size != kept_indices.size:
        return False
    if positions.size != out.size or data.size != indices.size:
        raise ValueError("positions must have out's length and data one value per index")
    for k in range(indptr.size):
        if indptr[k] != kept_indptr[k]:
            return False
    for k in range(indices.size):
        if indices[k] != kept_indices[k]:
            return False
    for k in range(positions.size):
        out[k] = data[positions[k]]
    return True
