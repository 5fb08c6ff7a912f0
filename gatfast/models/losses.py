"""Losses with their gradients, and accuracy."""

from __future__ import annotations

import numpy as np

from .. import _validate as V

__all__ = ["accuracy", "mse_loss", "softmax_cross_entropy"]


def _check_reduction(reduction):
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    return reduction


def softmax_cross_entropy(logits, y, mask=None, reduction="mean"):
    """Softmax cross-entropy over the selected rows (mean or sum), and its gradient.

    Parameters
    ----------
    logits : ndarray of float, shape (n, num_classes)
        Unnormalised class scores.
    y : ndarray of int, shape (n,)
        Class labels; only the selected rows must lie in
        ``[0, num_classes)`` (others, e.g. ``-1`` for unlabelled, are ignored).
    mask : ndarray of bool (n,) or unique int indices, optional
        Rows that count; default all rows. Must select at least one row.
    reduction : {"mean", "sum"}, default "mean"
        Average over the ``m`` selected rows, or add them up (data-parallel
        shards add their sums, then divide once).

    Returns
    -------
    loss : float
        ``mean_i (logsumexp(logits_i) - logits_i[y_i])`` over the selected
        rows (or the sum).
    grad_logits : ndarray, shape and dtype of ``logits``
        ``(softmax(logits_i) - onehot(y_i)) / m`` on selected rows (without
        ``/ m`` for the sum), zero elsewhere.
    """
    _check_reduction(reduction)
    logits = V.float_array(logits, "logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"logits must be 2-D (n, num_classes), got shape {logits.shape}")
    n, c = logits.shape
    y = _labels(y, n)
    rows = V.row_mask(mask, n)
    idx = np.arange(n) if rows is None else np.flatnonzero(rows)
    if idx.size == 0:
        raise ValueError("mask must select at least one row, got none")
    yy = y[idx]
    if yy.min() < 0 or yy.max() >= c:
        bad = yy[(yy < 0) | (yy >= c)][0]
        raise ValueError(f"y must lie in [0, num_classes={c}) on the selected rows, found {bad}")
    z = logits[idx]
    z = z - z.max(axis=1, keepdims=True)  # stable: exp never overflows
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    picked = z[np.arange(idx.size), yy]
    losses = np.log(s[:, 0]) - picked
    loss = float(np.mean(losses) if reduction == "mean" else np.sum(losses))
    g = e / s
    g[np.arange(idx.size), yy] -= 1
    if reduction == "mean":
        g /= logits.dtype.type(idx.size)
    grad = np.zeros_like(logits)
    grad[idx] = g
    return loss, grad


def _labels(y, n, name="y"):
    y = np.asarray(y)
    if y.dtype == bool or not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array of class labels, got dtype {y.dtype}")
    if y.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one label per row of logits), got {y.shape}")
    return y


def mse_loss(pred, target, mask=None, reduction="mean"):
    """Squared error over the selected elements (mean or sum), and its gradient.

    Parameters
    ----------
    pred, target : ndarray of float, same shape (n, ...)
        Predictions and targets.
    mask : ndarray of bool, optional
        Either over rows (shape ``(n,)``, or unique int row indices) or over
        elements (the shape of ``pred``). Default: everything.
    reduction : {"mean", "sum"}, default "mean"
        Divide by the number of selected elements, or not.

    Returns
    -------
    loss : float
        ``sum(mask * (pred - target)**2) / count`` (no ``/ count`` for the sum).
    grad : ndarray, shape and dtype of ``pred``
        ``2 (pred - target) / count`` on selected elements, zero elsewhere.
    """
    _check_reduction(reduction)
    pred = V.float_array(pred, "pred")
    target = V.float_array(target, "target")
    if pred.ndim < 1:
        raise ValueError("pred must have at least one dimension (rows)")
    V.same_shape(target, "target", pred.shape, "pred")
    diff = pred - target.astype(pred.dtype, copy=False)
    if mask is None:  # everything selected: no selection pass, the same C-ordered values (the same bits)
        sel, count = None, pred.size
        diff = np.ascontiguousarray(diff)
    elif np.asarray(mask).dtype == bool and np.asarray(mask).shape == pred.shape:
        sel = np.asarray(mask)
    else:
        rows = V.row_mask(mask, pred.shape[0])
        sel = np.broadcast_to(rows.reshape((-1,) + (1,) * (pred.ndim - 1)), pred.shape)
    if sel is not None:
        count = int(sel.sum())
        diff = np.where(sel, diff, pred.dtype.type(0))
    if count == 0:
        raise ValueError("mask must select at least one element, got none")
    total = np.sum(diff * diff)
    if reduction == "sum":
        return float(total), diff * pred.dtype.type(2.0)
    return float(total / count), diff * pred.dtype.type(2.0 / count)


def accuracy(logits, y, mask=None):
    """Compute the fraction of selected rows whose argmax equals the label (first max on ties).

    Parameters
    ----------
    logits : ndarray of float, shape (n, num_classes)
        Class scores (NaN and inf allowed).
    y : ndarray of int, shape (n,)
        Class labels.
    mask : ndarray of bool (n,) or unique int indices, optional
        Rows that count; default all rows. Must select at least one row.

    Returns
    -------
    float
        The accuracy, in [0, 1].
    """
    logits = V.float_array(logits, "logits", finite=False)
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"logits must be 2-D (n, num_classes), got shape {logits.shape}")
    n = logits.shape[0]
    y = _labels(y, n)
    rows = V.row_mask(mask, n)
    idx = np.arange(n) if rows is None else np.flatnonzero(rows)
    if idx.size == 0:
        raise ValueError("mask must select at least one row, got none")
    return float(np.mean(np.argmax(logits[idx], axis=1) == y[idx]))
