"""Inverted dropout on dense arrays and on the stored values of sparse matrices."""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from .. import _runtime
from .. import _validate as V
from .._random import RandomKeys
from ..kernels.random import keep_threshold, keyed_dropout_rows

__all__ = ["apply_dropout", "checked_dropout", "dropout_backward", "dropout_mask"]


def dropout_mask(rng, shape, p, dtype):
    """Draw inverted-dropout multipliers: ``keep / (1 - p)`` with ``P(keep) = 1 - p``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The random stream to draw from.
    shape : int or tuple of int
        Shape of the mask.
    p : float in [0, 1)
        Drop probability. With ``p == 0`` the mask is all ones and ``rng``
        is not advanced.
    dtype : numpy.float32 or numpy.float64
        Floating-point type of the mask.

    Returns
    -------
    mask : ndarray of ``dtype`` and ``shape``
        Zeros (dropped) and ``1 / (1 - p)`` (kept).

    Notes
    -----
    An element is kept when ``rng.random() >= p``, the rule the GATv2 layer
    uses for attention dropout, so a seeded generator reproduces all masks.
    """
    V.check_rng(rng)
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, tuple):
        raise TypeError(f"shape must be an int or a tuple of ints, got {type(shape).__name__}")
    shape = tuple(V.check_int(s, f"shape[{k}]", 0) for k, s in enumerate(shape))
    p = V.check_probability(p)
    dtype = V.check_dtype(dtype)
    if p == 0.0:
        return np.ones(shape, dtype)
    keep = rng.random(shape) >= p
    return (keep / (1.0 - p)).astype(dtype)


def _row_ids(n, row_ids):
    """The global ids of ``n`` rows as int64 (default ``[0, n)``), or a ValueError naming ``row_ids``."""
    rows = np.arange(n, dtype=np.int64) if row_ids is None else np.ascontiguousarray(row_ids, dtype=np.int64)
    if rows.shape != (n,):
        raise ValueError(f"row_ids must have one id per row of x ({n}), got shape {rows.shape}")
    return rows


def _keyed_mask(rng, x, p, row_ids):
    """Keep-multipliers drawn per (row id, column) from RandomKeys: dense shape of ``x``, or one per stored entry."""
    rows = _row_ids(x.shape[0], row_ids)
    if sp.issparse(x):
        draws = rng.uniform_entries(np.repeat(rows, np.diff(x.indptr)), x.indices)
    else:
        draws = rng.uniform(rows, x.shape[1])
    return ((draws >= p) / (1.0 - p)).astype(x.dtype)


def _keyed_dense(rng, x, p, row_ids):
    """``(x * mask, mask, finite)`` for a 2-D ``x``: the multipliers of :func:`_keyed_mask`, in one fused
    pass that also tells whether every ``x * mask`` is finite."""
    n, width = x.shape
    rows = _row_ids(n, row_ids)
    x = np.ascontiguousarray(x)
    mask, y = np.empty(x.shape, x.dtype), np.empty(x.shape, x.dtype)
    scale = x.dtype.type(1.0 / (1.0 - p))  # what (True / (1 - p)).astype(dtype) gives
    overflow = np.zeros(1, dtype=np.int8)
    # ~8 operations per draw: rows on threads when that is worth it (each row's draws depend on its id only)
    args = (np.uint64(rng.key), rows, x, keep_threshold(p), scale, mask, y, overflow)
    _runtime.run_rows(keyed_dropout_rows, n, args, n * width * 8)
    return y, mask, not overflow[0]


def checked_dropout(h, p, rng, row_ids=None):
    """A network's feature dropout on a checked ``h`` (or a pair), and whether its output is finite.

    Parameters
    ----------
    h : ndarray or scipy.sparse matrix, or a pair of them
        Finite features (a checked input or a checked layer's output);
        a pair ``(h_src, h_dst)`` keys the targets apart from the sources.
    p, rng, row_ids
        As for :func:`apply_dropout`.

    Returns
    -------
    y, mask
        As :func:`apply_dropout` returns them (pairs for a pair).
    finite : bool
        Whether ``y`` is finite: ``1 / (1 - p)`` can overflow a huge finite
        value. The keyed dense pass finds out as it writes ``y``.
    """
    if isinstance(h, tuple):
        (a, ma, fa) = checked_dropout(h[0], p, rng, row_ids)
        (b, mb, fb) = checked_dropout(h[1], p, rng.child(1) if isinstance(rng, RandomKeys) else rng)
        return (a, b), (ma, mb), fa and fb
    if (
        p > 0.0
        and isinstance(rng, RandomKeys)
        and isinstance(h, np.ndarray)
        and h.ndim == 2
        and h.dtype in V.FLOAT_DTYPES
    ):
        return _keyed_dense(rng, h, V.check_probability(p), row_ids)
    y, mask = apply_dropout(h, p, rng, row_ids, check_finite=False)
    return y, mask, V.all_finite(y.data if sp.issparse(y) else y)


def apply_dropout(x, p, rng, row_ids=None, check_finite=True):
    """Inverted dropout on a dense array or on the stored values of a sparse matrix.

    Parameters
    ----------
    x : ndarray or scipy.sparse matrix/array
        A sparse ``x`` is never densified: the result is a new CSR array with
        the same structure whose stored values are masked (the implicit
        zeros would stay zero under dropout anyway).
    p : float in [0, 1)
        Drop probability.
    rng : numpy.random.Generator or RandomKeys
        With a Generator the mask follows its stream (call order); with
        :class:`~gatfast.RandomKeys` each row's mask is a
        function of its global id (``row_ids``) and the column.
    row_ids : ndarray of int, optional
        Global ids of the rows of ``x`` (keyed masks only; default
        ``[0, n)``).
    check_finite : bool, default True
        Refuse NaN or inf in ``x``; False skips that pass over the data,
        for a caller that checked it (as ``GATv2Network`` does).

    Returns
    -------
    y : ndarray or scipy.sparse.csr_array
        ``x * mask``. With ``p == 0``: ``x`` itself for dense input, its
        CSR form for sparse input (never a modified copy).
    mask : ndarray
        Multipliers ``keep / (1 - p)``: the shape of ``x`` for dense input,
        ``(y.nnz,)`` over ``y.data`` for sparse input.
    """
    p = V.check_probability(p)
    keyed = isinstance(rng, RandomKeys)
    if not keyed:
        V.check_rng(rng)
    if sp.issparse(x):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"x must have a floating-point dtype, got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"x must be 2-D, got shape {x.shape}")
        csr = sp.csr_array(x)
        if check_finite and not V.all_finite(csr.data):
            raise V.NonFiniteError("x must be finite, but contains NaN or inf")
        if p == 0.0:
            return csr, np.ones(csr.data.shape, csr.dtype)
        mask = _keyed_mask(rng, csr, p, row_ids) if keyed else dropout_mask(rng, csr.data.shape, p, csr.dtype)
        y = sp.csr_array((csr.data * mask, csr.indices.copy(), csr.indptr.copy()), shape=csr.shape)
        return y, mask
    x = V.float_array(x, "x", check_finite)
    if x.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"x must be float32 or float64, got {x.dtype}")
    if p == 0.0:
        return x, np.ones(x.shape, x.dtype)
    if keyed and x.ndim == 2:
        return _keyed_dense(rng, x, p, row_ids)[:2]
    mask = _keyed_mask(rng, x, p, row_ids) if keyed else dropout_mask(rng, x.shape, p, x.dtype)
    return x * mask, mask


def dropout_backward(grad_y, mask):
    """Compute the gradient of dense dropout: ``grad_y * mask``.

    Parameters
    ----------
    grad_y : ndarray
        The gradient with respect to the dropout's output.
    mask : ndarray, shape of ``grad_y``
        The multipliers :func:`apply_dropout` returned.

    Returns
    -------
    ndarray
        The gradient with respect to the dropout's input.
    """
    grad_y = V.float_array(grad_y, "grad_y")
    mask = V.float_array(mask, "mask")
    V.same_shape(mask, "mask", grad_y.shape, "grad_y")
    return grad_y * mask
