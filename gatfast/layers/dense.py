"""The layer's dense products: projections, weight gradients and input gradients.

Products with contiguous rows of one float dtype and a full vector of output
columns run in Numba's register tile (``kernels/gemm.py``); the
projections' backward then makes one Numba call per chunk of rows for all
of its products (``kernels/dense_grads.py``), from
:data:`TILED_BACKWARD_ROWS` rows on. Others take one-thread BLAS calls by
chunks of rows on Python threads (NumPy releases the GIL inside BLAS).
Either way the chunks are fixed by the row count alone, so sums over rows
(weight gradients) run in the same order, to the bit, for any thread count.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import blas

from .. import _runtime
from ..kernels import (
    column_sum,
    csr_dense_matmul2_rows,
    csr_dense_matmul_rows,
    readonly,
    sum_in_order,
    transpose,
)
from ..kernels.dense_grads import BLOCK, dense_grad_chunks
from ..kernels.dense_small import project2, project2_backward
from ..kernels.gemm import TILE_BYTES, matmul_pair_rows, matmul_rows
from ..kernels.reduce import add_bias_rows

__all__ = [
    "SMALL_PRODUCT",
    "TILED_BACKWARD_ROWS",
    "add_bias",
    "bias_rows_fit",
    "bias_or_empty",
    "chunk_rows",
    "dense_backward",
    "dense_projections",
    "linear",
    "linear_into",
    "is_small",
    "matmul_add",
    "project_inputs",
    "project_into",
    "projections_into",
    "row_chunks",
    "small_projection_grads",
    "small_projections",
    "sparse_matmul",
    "sparse_matmul2",
    "tiled",
    "weight_grad",
]


def bias_rows_fit(out, bias):
    """Whether ``out += bias`` can take the Numba row loop (C-contiguous float32/float64 rows of ``bias``'s dtype).

    Raises ValueError if ``bias`` is not one value per column of ``out``:
    the loop reads ``bias`` by ``out``'s column index.
    """
    if out.ndim != 2 or bias.shape != (out.shape[1],):
        raise ValueError(
            f"bias must have shape ({out.shape[-1]},) for an output of shape {out.shape}, got {bias.shape}"
        )
    return out.flags.c_contiguous and out.dtype == bias.dtype and out.dtype in (np.float32, np.float64)


def add_bias(out, bias):
    """``out += bias`` in place: one Numba loop for C-contiguous rows (numpy's broadcast add is slow on short rows)."""
    if bias_rows_fit(out, bias):
        add_bias_rows(out, readonly(bias))
    else:
        out += bias


def bias_or_empty(b, dtype):
    return np.zeros(0, dtype) if b is None else b


def linear(x, W, b):
    """``x @ W.T + b`` for dense or sparse ``x``, in ``W``'s dtype (a new array)."""
    out = np.empty((x.shape[0], W.shape[0]), W.dtype)
    linear_into(x, W, b, out)
    return out


MIN_ROW_CHUNK = 2048  # rows; at most 32 chunks above 65,536 rows

#: Below this many multiply-adds per product (rows x in x out) both projections
#: (and their gradients) run in one Numba call instead of BLAS: on a 10-node
#: scene (10 x 16 x 32) that took 4.2 us instead of 6.9 us forward and 12 us
#: instead of 22 us backward; at 100 x 16 x 64 BLAS was 4x faster (2-core AMD EPYC).
SMALL_PRODUCT = 1 << 14

#: The fewest rows whose projections' backward takes the tile (``kernels/dense_grads.py``), one block of its
#: rows. Below, BLAS's few calls cost less or about the same (2-core Intel Xeon, 2 threads, BLAS on one: the
#: tile took 1.16-1.33x BLAS's time on 34 and 64 rows of 34 features, 0.86-1.20x on 96-128 rows, 0.74-0.79x
#: on 256-523 rows of 64), and a first ``gatfast train`` (the 34-node karate club) then does not compile
#: that kernel (1.7 of the 9.9 s its kernels took to compile).
TILED_BACKWARD_ROWS = BLOCK


def is_small(rows, in_width, out_width):
    """Whether a product is small enough for the single-call Numba path."""
    return rows * in_width * out_width <= SMALL_PRODUCT


def small_projections(x, W_l, b_l, W_r, b_r, xl, xr):
    """Both projections of a small dense ``x`` in one call (see :data:`SMALL_PRODUCT`)."""
    empty = np.zeros(0, x.dtype)
    project2(readonly(x), W_l, empty if b_l is None else b_l, W_r, empty if b_r is None else b_r, xl, xr)


def small_projection_grads(x, g_l, g_r, W_l, W_r, with_bias, want_x):
    """``(gW_l, gb_l, gW_r, gb_r, grad_x)`` of :func:`small_projections` in one call."""
    dtype = x.dtype
    gW_l, gW_r = np.empty(W_l.shape, dtype), np.empty(W_r.shape, dtype)
    width = W_l.shape[0] if with_bias else 0
    gb_l, gb_r = np.empty(width, dtype), np.empty(width, dtype)
    grad_x = np.empty(x.shape if want_x else (0, 0), dtype)
    project2_backward(readonly(x), g_l, g_r, W_l, W_r, gW_l, gb_l, gW_r, gb_r, grad_x)
    return gW_l, gb_l if with_bias else None, gW_r, gb_r if with_bias else None, grad_x if want_x else None


def chunk_rows(n):
    """Rows per chunk of an ``n``-row product: fixed by ``n`` alone, so sums over chunks are too."""
    return max(MIN_ROW_CHUNK, -(-n // 32))


def row_chunks(n):
    size = chunk_rows(n)
    return [(start, min(n, start + size)) for start in range(0, n, size)] or [(0, 0)]


def _in_order(values):
    """``values[0] + values[1] + ...``, left to right (the chunk partials' fixed order); None for Nones."""
    total = values[0]
    for value in values[1:]:
        total = None if total is None else total + value
    return total


def tiled(a, out):
    """Whether ``out = a @ b`` goes to the Numba tile (``kernels/gemm.py``) rather than BLAS.

    The tile needs contiguous rows in one float dtype and at least one full
    tile of output columns; there it was faster than OpenBLAS's calls on
    these skinny products. :func:`dense_backward` asks it of ``tiled(g, x)``
    for the weight gradients ``gᵀ x``, whose output rows are ``x``'s width.
    """
    return (
        a.dtype == out.dtype
        and a.dtype in (np.float32, np.float64)
        and a.flags.c_contiguous
        and out.flags.c_contiguous
        and out.shape[1] * out.itemsize >= TILE_BYTES
    )


def dense_projections(x, pairs):
    """``out[...] = x @ W.T + b`` for every ``(W, b, out)`` in ``pairs`` (one or two), by row chunks in parallel.

    In the tile, one kernel call per chunk on the thread team: two pairs (a
    layer's ``W_l`` and ``W_r`` on one input) share each tile of rows
    (``kernels.gemm.matmul_pair_rows``). Otherwise one-thread BLAS calls per
    chunk on Python threads.
    """
    if len(pairs) not in (1, 2):
        raise ValueError(f"pairs must hold one or two (W, b, out), got {len(pairs)}")
    if all(tiled(x, out) for _, _, out in pairs):
        sides = [(readonly(transpose(W)), readonly(bias_or_empty(b, x.dtype)), out) for W, b, out in pairs]
        if len(sides) == 2:
            kernel, args = matmul_pair_rows, (readonly(x), *sides[0], *sides[1])
        else:
            wt, b, out = sides[0]
            kernel, args = matmul_rows, (readonly(x), wt, b, False, out)
        macs = x.shape[0] * x.shape[1] * sum(out.shape[1] for _, _, out in pairs)
        _runtime.run_rows(kernel, x.shape[0], args, macs // _runtime.MACS_PER_UNIT)
        return

    def task(start, stop):
        for W, b, out in pairs:
            np.matmul(x[start:stop], W.T, out=out[start:stop])
            if b is not None:
                add_bias(out[start:stop], b)

    # BLAS at one thread, as in _blas_backward
    with _runtime.blas_single_thread(x.shape[0] * x.shape[1] * max(out.shape[1] for _, _, out in pairs)):
        if x.shape[0] <= MIN_ROW_CHUNK:  # one chunk: no thread pool
            task(0, x.shape[0])
            return
        macs = x.shape[0] * x.shape[1] * sum(out.shape[1] for _, _, out in pairs)
        _runtime.run_chunks(task, row_chunks(x.shape[0]), macs // _runtime.MACS_PER_UNIT)


def dense_backward(x, grad_l, grad_r, W_l, W_r, grad_x, with_bias):
    """Weight (and bias) gradients ``grad.T @ x`` of both projections and ``grad_x = grad_l @ W_l + grad_r @ W_r``.

    ``grad_r`` / ``W_r`` may be None (shared weights). Per chunk of rows: the
    partial weight gradients and the rows of ``grad_x``; the partials are then
    added in chunk order. Returns ``(gW_l, gb_l, gW_r, gb_r)`` (None where absent).
    """
    _check_backward(x, grad_l, grad_r, W_l, W_r, grad_x)
    grads = [g for g in (grad_l, grad_r) if g is not None]
    weights = [W_l, W_r][: len(grads)]
    if (
        x.shape[0] >= TILED_BACKWARD_ROWS
        and all(tiled(g, x) for g in grads)
        and all(W.dtype == x.dtype for W in weights)
        and (grad_x is None or all(tiled(g, grad_x) for g in grads))
    ):
        parts = _tiled_backward(x, grads, W_l, W_r, grad_x, with_bias)
    else:
        parts = _blas_backward(x, grads, W_l, W_r, grad_x, with_bias)
    gW_l, gb_l = parts[0]
    gW_r, gb_r = parts[1] if len(parts) > 1 else (None, None)
    return gW_l, gb_l, gW_r, gb_r


def _check_backward(x, grad_l, grad_r, W_l, W_r, grad_x):
    """ValueError unless the arrays of :func:`dense_backward` fit ``x`` (the tile reads without bounds checks)."""
    if grad_l is None:
        raise ValueError("grad_l is required (one side alone goes as grad_l, with W_l)")
    rows, features = x.shape
    channels = grad_l.shape[-1]
    for name, g, w_name, W in (("grad_l", grad_l, "W_l", W_l), ("grad_r", grad_r, "W_r", W_r)):
        if g is None:
            continue
        if g.shape != (rows, channels):
            raise ValueError(f"{name} must have shape ({rows}, {channels}), one row per x row, got {g.shape}")
        if W is None or W.shape != (channels, features):
            got = None if W is None else W.shape
            raise ValueError(f"{w_name} must have shape ({channels}, {features}) for {name}, got {got}")
    if grad_x is not None and grad_x.shape != x.shape:
        raise ValueError(f"grad_x must have x's shape {x.shape}, got {grad_x.shape}")


def _tiled_backward(x, grads, W_l, W_r, grad_x, with_bias):
    """:func:`dense_backward` with the tile, one Numba call per chunk (``kernels/dense_grads.py``)."""
    n, features = x.shape
    channels = grads[0].shape[1]
    size = chunk_rows(n)
    count = max(1, -(-n // size))
    transposed = channels > features  # the wider output rows fill more of the tile's vectors
    shape = (features, channels) if transposed else (channels, features)
    gw = np.empty((count, len(grads), *shape), x.dtype)
    gb = np.empty((count, len(grads), channels if with_bias else 0), x.dtype)
    g_l = readonly(grads[0])
    g_r = readonly(grads[-1])
    w_l = readonly(np.ascontiguousarray(W_l))
    w_r = w_l if len(grads) == 1 else readonly(np.ascontiguousarray(W_r))
    out_x = np.empty((0, features), x.dtype) if grad_x is None else grad_x
    no_bias = readonly(np.zeros(0, x.dtype))
    args = (size, transposed, readonly(x), g_l, g_r, w_l, w_r, no_bias, gw, gb, out_x)
    if count == 1:
        dense_grad_chunks(0, 1, *args)
    else:
        macs = n * features * channels * len(grads) * (2 if grad_x is not None else 1)
        _runtime.run_rows(dense_grad_chunks, count, args, macs // _runtime.MACS_PER_UNIT)
    gw, gb = sum_in_order(gw), sum_in_order(gb) if with_bias else None  # the chunks' partials, as _in_order
    return [(transpose(w) if transposed else w, None if gb is None else gb[k]) for k, w in enumerate(gw)]


def _blas_backward(x, grads, W_l, W_r, grad_x, with_bias):
    """:func:`dense_backward` through BLAS, by row chunks on Python threads, BLAS held at one thread.

    For narrow, strided or mixed-dtype arrays, and fewer rows than :data:`TILED_BACKWARD_ROWS`. The hold is
    its own (free inside a layer's): a layer sizes its hold by its source side's product, and the target
    side of a bipartite layer may be the bigger.
    """
    chunks = row_chunks(x.shape[0])

    def task(start, stop):
        xs = x[start:stop] if len(chunks) > 1 else x
        parts = [(g[start:stop].T @ xs, column_sum(g[start:stop]) if with_bias else None) for g in grads]
        if grad_x is not None:
            np.matmul(grads[0][start:stop], W_l, out=grad_x[start:stop])
            if len(grads) > 1:
                matmul_add(grads[1][start:stop], W_r, grad_x[start:stop])
        return parts

    with _runtime.blas_single_thread(x.shape[0] * x.shape[1] * max(g.shape[1] for g in grads)):
        if len(chunks) == 1:  # the same operations as one chunk, without the thread pool
            results = [task(0, x.shape[0])]
        else:
            macs = x.shape[0] * x.shape[1] * sum(g.shape[1] for g in grads) * (2 if grad_x is not None else 1)
            results = _runtime.run_chunks(task, chunks, macs // _runtime.MACS_PER_UNIT)
    return [
        tuple(_in_order([r[side][item] for r in results]) for item in range(2)) for side in range(len(grads))
    ]


def _c_rows(dense):
    """``dense`` with C-contiguous rows: itself, or a copy (``W.T``, the usual argument, in tiles)."""
    if dense.flags.c_contiguous:
        return dense
    return transpose(dense.T) if dense.ndim == 2 else np.ascontiguousarray(dense)


def sparse_matmul(a, dense, bias, out):
    """``out = a @ dense (+ bias)`` for a CSR ``a``, rows in chunks on threads (bias of size 0: none)."""
    args = (a.indptr, a.indices, a.data, readonly(_c_rows(dense)), bias, out)
    _runtime.run_rows(csr_dense_matmul_rows, a.shape[0], args, a.nnz * dense.shape[1])


def sparse_matmul2(a, dense_a, dense_b, bias_a, bias_b, out_a, out_b):
    """``out_a = a @ dense_a + bias_a`` and ``out_b = a @ dense_b + bias_b`` in one pass over a CSR ``a``."""
    args = (
        a.indptr,
        a.indices,
        a.data,
        readonly(_c_rows(dense_a)),
        readonly(_c_rows(dense_b)),
        bias_a,
        bias_b,
        out_a,
        out_b,
    )
    _runtime.run_rows(csr_dense_matmul2_rows, a.shape[0], args, a.nnz * (dense_a.shape[1] + dense_b.shape[1]))


def linear_into(x, W, b, out):
    """``out[...] = x @ W.T + b``: BLAS for dense ``x``, the CSR kernel for sparse ``x``."""
    if sp.issparse(x):
        sparse_matmul(x, W.T, np.zeros(0, W.dtype) if b is None else b, out)
        return out
    np.matmul(x, W.T, out=out)
    if b is not None:
        add_bias(out, b)
    return out


def project_into(x, W, b, out):
    """``out[...] = x @ W.T + b``: the CSR kernel in row chunks for sparse ``x``, row-chunked BLAS for dense."""
    if sp.issparse(x):
        linear_into(x, W, b, out)
    else:
        dense_projections(x, [(W, b, out)])


def projections_into(x, W_l, b_l, W_r, b_r, out_l, out_r):
    """Both projections of one input: one Numba call when tiny, one pass over sparse ``x``, else BLAS."""
    dtype = out_l.dtype
    if sp.issparse(x):
        sparse_matmul2(x, W_l.T, W_r.T, bias_or_empty(b_l, dtype), bias_or_empty(b_r, dtype), out_l, out_r)
    elif is_small(x.shape[0], x.shape[1], out_l.shape[1]):
        small_projections(x, W_l, b_l, W_r, b_r, out_l, out_r)
    else:
        dense_projections(x, [(W_l, b_l, out_l), (W_r, b_r, out_r)])


def project_inputs(layer, inputs, ws):
    """``(xl, xr)`` of a layer: the source and target projections of its ``inputs``, shape (rows, H, C).

    In the layer's workspace ``ws``; one array for both with shared weights on one input.
    """
    H, C, dtype = layer.heads, layer.out_features, layer.dtype
    x_src, x_dst = inputs.x_src, inputs.x_dst
    n_src, n_dst = x_src.shape[0], x_dst.shape[0]
    W_l, b_l = layer.params["W_l"], layer.params.get("b_l")
    W_r, b_r = (W_l, b_l) if layer.share_weights else (layer.params["W_r"], layer.params.get("b_r"))
    xl = ws.empty("xl", (n_src, H, C), dtype)
    if layer.share_weights and inputs.relation == "same":
        project_into(x_src, W_l, b_l, xl.reshape(n_src, H * C))
        return xl, xl
    xr = ws.empty("xr", (n_dst, H, C), dtype)
    if inputs.relation == "same":
        projections_into(x_src, W_l, b_l, W_r, b_r, xl.reshape(n_src, H * C), xr.reshape(n_dst, H * C))
    else:
        project_into(x_src, W_l, b_l, xl.reshape(n_src, H * C))
        project_into(x_dst, W_r, b_r, xr.reshape(n_dst, H * C))
    return xl, xr


def matmul_add(a, b, c):
    """``c += a @ b`` in place through BLAS gemm (beta = 1), with no temporary.

    Row-major ``c`` is column-major ``c.T``, and ``c.T += b.T @ a.T``.
    """
    if c.size == 0 or a.shape[1] == 0:
        return
    gemm = blas.sgemm if c.dtype == np.float32 else blas.dgemm
    res = gemm(1.0, b.T, a.T, beta=1.0, c=c.T, overwrite_c=True)
    if not np.shares_memory(res, c):  # BLAS had to copy: write the result back
        c[...] = res.T


def weight_grad(grad, x, x_t=None):
    """``grad.T @ x`` (out, F); for sparse ``x`` as ``(x_t @ grad).T`` with ``x_t = x.T`` in CSR."""
    if x_t is not None:
        g = np.empty((x_t.shape[0], grad.shape[1]), grad.dtype)
        sparse_matmul(x_t, grad, np.zeros(0, grad.dtype), g)
        return transpose(g)
    return grad.T @ x
