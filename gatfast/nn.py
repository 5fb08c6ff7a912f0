"""Building blocks around the GATv2 layer: activations, dropout, losses,
per-graph readout and a dense linear layer, all with closed-form gradients.

Pure NumPy/SciPy: every operation here is elementwise, a reduction or a
BLAS product, so a Numba kernel would not be faster. Each public function
validates its arguments and names the bad one in the error.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _validate as V
from ._validate import NonFiniteError, all_finite
from .layer import glorot
from .params import ParamDict

__all__ = [
    "ACTIVATIONS",
    "POOL_MODES",
    "Linear",
    "LinearCache",
    "PoolCache",
    "accuracy",
    "activation_backward",
    "activation_forward",
    "apply_dropout",
    "check_graph_ptr",
    "dropout_backward",
    "dropout_mask",
    "global_pool",
    "global_pool_backward",
    "mse_loss",
    "softmax_cross_entropy",
]

ACTIVATIONS = ("elu", "relu", "identity")
POOL_MODES = ("mean", "sum", "max")


# ---------------------------------------------------------------------- checks
def _float_array(value, name, finite=True):
    """``value`` as a dense floating-point ndarray (no copy), or raise."""
    if sp.issparse(value):
        raise TypeError(f"{name} must be a dense array, got a scipy.sparse {type(value).__name__}")
    arr = np.asarray(value)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must have a floating-point dtype, got {arr.dtype}")
    if finite and not all_finite(arr):
        raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
    return arr


def _same_shape(arr, name, shape, ref_name):
    if arr.shape != shape:
        raise ValueError(f"{name} must have the shape of {ref_name} {shape}, got {arr.shape}")


def _row_mask(mask, n, name="mask"):
    """A boolean mask over ``n`` rows from a bool array or unique integer indices."""
    if mask is None:
        return None
    if sp.issparse(mask):
        raise TypeError(f"{name} must be a dense boolean or integer array, got scipy.sparse")
    m = np.asarray(mask)
    if m.dtype == bool:
        if m.shape != (n,):
            raise ValueError(f"{name} must be a boolean array of shape ({n},), got shape {m.shape}")
        return m
    if not np.issubdtype(m.dtype, np.integer):
        raise TypeError(f"{name} must be a boolean mask or an integer index array, got dtype {m.dtype}")
    if m.ndim != 1:
        raise ValueError(f"{name} as indices must be 1-D, got shape {m.shape}")
    if m.size and (m.min() < 0 or m.max() >= n):
        raise ValueError(f"{name} indices must lie in [0, {n}), got values in [{m.min()}, {m.max()}]")
    out = np.zeros(n, dtype=bool)
    out[m] = True
    if out.sum() != m.size:
        raise ValueError(f"{name} indices must be unique")
    return out


def _check_rng(rng, name="rng"):
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{name} must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def _check_p(p, name="p"):
    return V.check_float(p, name, 0.0, 1.0, high_open=True)


def check_graph_ptr(graph_ptr, num_nodes, name="graph_ptr"):
    """Validate a graph pointer: int64 (num_graphs + 1,), from 0 to ``num_nodes``, non-decreasing.

    Returns
    -------
    ndarray of int64
    """
    if sp.issparse(graph_ptr):
        raise TypeError(f"{name} must be a 1-D integer array, got scipy.sparse")
    ptr = np.asarray(graph_ptr)
    if ptr.dtype == bool or not np.issubdtype(ptr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array, got dtype {ptr.dtype}")
    if ptr.ndim != 1 or ptr.size < 2:
        raise ValueError(f"{name} must be 1-D with num_graphs + 1 >= 2 entries, got shape {ptr.shape}")
    if ptr[0] != 0:
        raise ValueError(f"{name} must start at 0, got {ptr[0]}")
    if ptr[-1] != num_nodes:
        raise ValueError(f"{name} must end at num_nodes = {num_nodes}, got {ptr[-1]}")
    if np.any(np.diff(ptr) < 0):
        raise ValueError(f"{name} must be non-decreasing")
    return np.ascontiguousarray(ptr, dtype=np.int64)


# ---------------------------------------------------------------------- activations
def activation_forward(name, x):
    """Apply an elementwise activation.

    Parameters
    ----------
    name : {"elu", "relu", "identity"}
        ELU uses ``alpha = 1`` (the PyTorch/PyG default).
    x : ndarray of float

    Returns
    -------
    y : ndarray, same shape and dtype as ``x`` (a new array; ``x`` is untouched)
    """
    V.check_choice(name, "name", set(ACTIVATIONS))
    x = _float_array(x, "x")
    if name == "identity":
        return x.copy()
    if name == "relu":
        return np.maximum(x, x.dtype.type(0))
    # min(x, 0) keeps expm1 from overflowing on large positive inputs
    return np.where(x > 0, x, np.expm1(np.minimum(x, x.dtype.type(0))))


def activation_backward(name, x, y, grad_y):
    """Gradient of an activation: ``grad_x = grad_y * f'(x)``.

    Parameters
    ----------
    name : {"elu", "relu", "identity"}
    x, y : ndarray
        Input and output of :func:`activation_forward` (``y`` is validated
        but only used for its shape; the ELU slope ``exp(x)`` is computed
        from ``x`` so it keeps full relative precision for very negative x).
    grad_y : ndarray, same shape
        Upstream gradient.

    Returns
    -------
    grad_x : ndarray, same shape and dtype as ``grad_y``
    """
    V.check_choice(name, "name", set(ACTIVATIONS))
    x = _float_array(x, "x")
    y = _float_array(y, "y")
    grad_y = _float_array(grad_y, "grad_y")
    _same_shape(y, "y", x.shape, "x")
    _same_shape(grad_y, "grad_y", x.shape, "x")
    if name == "identity":
        return grad_y.copy()
    zero = grad_y.dtype.type(0)
    if name == "relu":
        return np.where(x > 0, grad_y, zero)
    slope = np.exp(np.minimum(x, x.dtype.type(0)))
    return np.where(x > 0, grad_y, grad_y * slope.astype(grad_y.dtype, copy=False))


# ---------------------------------------------------------------------- dropout
def dropout_mask(rng, shape, p, dtype):
    """Inverted-dropout multipliers: ``keep / (1 - p)`` with ``P(keep) = 1 - p``.

    Parameters
    ----------
    rng : numpy.random.Generator
    shape : int or tuple of int
    p : float in [0, 1)
        Drop probability. With ``p == 0`` the mask is all ones and ``rng``
        is not advanced.
    dtype : numpy.float32 or numpy.float64

    Returns
    -------
    mask : ndarray of ``dtype`` and ``shape``

    Notes
    -----
    An element is kept when ``rng.random() >= p``, the rule the GATv2 layer
    uses for attention dropout, so a seeded generator reproduces all masks.
    """
    _check_rng(rng)
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, tuple):
        raise TypeError(f"shape must be an int or a tuple of ints, got {type(shape).__name__}")
    shape = tuple(V.check_int(s, f"shape[{k}]", 0) for k, s in enumerate(shape))
    p = _check_p(p)
    dtype = V.check_dtype(dtype)
    if p == 0.0:
        return np.ones(shape, dtype)
    keep = rng.random(shape) >= p
    return (keep / (1.0 - p)).astype(dtype)


def apply_dropout(x, p, rng):
    """Inverted dropout on a dense array or on the stored values of a sparse matrix.

    Parameters
    ----------
    x : ndarray or scipy.sparse matrix/array
        A sparse ``x`` is never densified: the result is a new CSR array with
        the same structure whose stored values are masked. (The implicit
        zeros would stay zero under dropout anyway.)
    p : float in [0, 1)
    rng : numpy.random.Generator

    Returns
    -------
    y : ndarray or scipy.sparse.csr_array
        ``x * mask``. With ``p == 0``: ``x`` itself for dense input, its
        CSR form for sparse input (never a modified copy).
    mask : ndarray
        Multipliers ``keep / (1 - p)``: the shape of ``x`` for dense input,
        ``(y.nnz,)`` over ``y.data`` for sparse input.
    """
    p = _check_p(p)
    _check_rng(rng)
    if sp.issparse(x):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"x must have a floating-point dtype, got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"x must be 2-D, got shape {x.shape}")
        csr = sp.csr_array(x)
        if not all_finite(csr.data):
            raise NonFiniteError("x must be finite, but contains NaN or inf")
        if p == 0.0:
            return csr, np.ones(csr.data.shape, csr.dtype)
        mask = dropout_mask(rng, csr.data.shape, p, csr.dtype)
        y = sp.csr_array((csr.data * mask, csr.indices.copy(), csr.indptr.copy()), shape=csr.shape)
        return y, mask
    x = _float_array(x, "x")
    if x.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"x must be float32 or float64, got {x.dtype}")
    mask = dropout_mask(rng, x.shape, p, x.dtype)
    if p == 0.0:
        return x, mask
    return x * mask, mask


def dropout_backward(grad_y, mask):
    """Gradient of dense dropout: ``grad_y * mask``."""
    grad_y = _float_array(grad_y, "grad_y")
    mask = _float_array(mask, "mask")
    _same_shape(mask, "mask", grad_y.shape, "grad_y")
    return grad_y * mask


# ---------------------------------------------------------------------- losses
def softmax_cross_entropy(logits, y, mask=None):
    """Mean softmax cross-entropy over the selected rows, and its gradient.

    Parameters
    ----------
    logits : ndarray of float, shape (n, num_classes)
    y : ndarray of int, shape (n,)
        Class labels; only the selected rows must lie in
        ``[0, num_classes)`` (others, e.g. ``-1`` for unlabelled, are ignored).
    mask : ndarray of bool (n,) or unique int indices, optional
        Rows that count; default all rows. Must select at least one row.

    Returns
    -------
    loss : float
        ``mean_i (logsumexp(logits_i) - logits_i[y_i])`` over the selected rows.
    grad_logits : ndarray, shape and dtype of ``logits``
        ``(softmax(logits_i) - onehot(y_i)) / m`` on selected rows, zero elsewhere.
    """
    logits = _float_array(logits, "logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"logits must be 2-D (n, num_classes), got shape {logits.shape}")
    n, c = logits.shape
    y = _labels(y, n)
    rows = _row_mask(mask, n)
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
    loss = float(np.mean(np.log(s[:, 0]) - picked))
    g = e / s
    g[np.arange(idx.size), yy] -= 1
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


def mse_loss(pred, target, mask=None):
    """Mean squared error over the selected elements, and its gradient.

    Parameters
    ----------
    pred, target : ndarray of float, same shape (n, ...)
    mask : ndarray of bool, optional
        Either over rows (shape ``(n,)``, or unique int row indices) or over
        elements (the shape of ``pred``). Default: everything.

    Returns
    -------
    loss : float
        ``sum(mask * (pred - target)**2) / count``.
    grad : ndarray, shape and dtype of ``pred``
        ``2 (pred - target) / count`` on selected elements, zero elsewhere.
    """
    pred = _float_array(pred, "pred")
    target = _float_array(target, "target")
    if pred.ndim < 1:
        raise ValueError("pred must have at least one dimension (rows)")
    _same_shape(target, "target", pred.shape, "pred")
    diff = (pred - target.astype(pred.dtype, copy=False))
    if mask is None:
        sel = np.ones(pred.shape, dtype=bool)
    elif np.asarray(mask).dtype == bool and np.asarray(mask).shape == pred.shape:
        sel = np.asarray(mask)
    else:
        rows = _row_mask(mask, pred.shape[0])
        sel = np.broadcast_to(rows.reshape((-1,) + (1,) * (pred.ndim - 1)), pred.shape)
    count = int(sel.sum())
    if count == 0:
        raise ValueError("mask must select at least one element, got none")
    diff = np.where(sel, diff, pred.dtype.type(0))
    loss = float(np.sum(diff * diff) / count)
    grad = diff * pred.dtype.type(2.0 / count)
    return loss, grad


def accuracy(logits, y, mask=None):
    """Fraction of selected rows whose argmax equals the label (first max on ties)."""
    logits = _float_array(logits, "logits", finite=False)
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"logits must be 2-D (n, num_classes), got shape {logits.shape}")
    n = logits.shape[0]
    y = _labels(y, n)
    rows = _row_mask(mask, n)
    idx = np.arange(n) if rows is None else np.flatnonzero(rows)
    if idx.size == 0:
        raise ValueError("mask must select at least one row, got none")
    return float(np.mean(np.argmax(logits[idx], axis=1) == y[idx]))


# ---------------------------------------------------------------------- readout
@dataclass
class PoolCache:
    """What :func:`global_pool` keeps for :func:`global_pool_backward`.

    ``matrix`` is the (num_graphs, num_nodes) pooling operator for mean/sum;
    ``argmax`` holds, for max, the winning row per (graph, feature) (-1 for
    empty graphs).
    """

    mode: str
    num_nodes: int
    num_features: int
    dtype: np.dtype
    matrix: object = None
    counts: np.ndarray = None
    argmax: np.ndarray = None


def global_pool(x, graph_ptr, mode="mean"):
    """Pool node features per graph of a batch (PyG's ``global_*_pool``).

    Parameters
    ----------
    x : ndarray of float, shape (num_nodes, F)
    graph_ptr : ndarray of int, shape (num_graphs + 1,)
        Nodes of graph ``g`` are ``graph_ptr[g]:graph_ptr[g + 1]``
        (as returned by :func:`gatfast.batch_graphs`).
    mode : {"mean", "sum", "max"}

    Returns
    -------
    pooled : ndarray, shape (num_graphs, F), dtype of ``x``
        Empty graphs pool to 0 in every mode.
    cache : PoolCache
    """
    V.check_choice(mode, "mode", set(POOL_MODES))
    x = _float_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (num_nodes, F), got shape {x.shape}")
    n, f = x.shape
    ptr = check_graph_ptr(graph_ptr, n)
    num_graphs = ptr.size - 1
    sizes = np.diff(ptr)
    cache = PoolCache(mode, n, f, x.dtype)
    if mode in ("mean", "sum"):
        # A sparse (num_graphs, n) summing operator: one pass, fixed summation order.
        op = sp.csr_array(
            (np.ones(n, x.dtype), np.arange(n, dtype=np.int64), ptr.copy()), shape=(num_graphs, n)
        )
        cache.matrix = op
        pooled = np.ascontiguousarray(op @ x, dtype=x.dtype)
        if mode == "mean":
            # sum / count as PyG's scatter mean; empty graphs stay 0
            cache.counts = np.maximum(sizes, 1).astype(x.dtype)[:, None]
            pooled /= cache.counts
        return pooled, cache
    pooled = np.zeros((num_graphs, f), x.dtype)
    argmax = np.full((num_graphs, f), -1, dtype=np.int64)
    full = np.flatnonzero(sizes > 0)
    if full.size and f:
        starts = ptr[full]
        pooled[full] = np.maximum.reduceat(x, starts, axis=0)
        # first row reaching the max: positions where x equals its graph's max, min per graph
        seg = np.repeat(np.arange(num_graphs), sizes)
        hit = x == pooled[seg]
        pos = np.where(hit, np.arange(n)[:, None], n)
        argmax[full] = np.minimum.reduceat(pos, starts, axis=0)
    cache.argmax = argmax
    return pooled, cache


def global_pool_backward(grad_pooled, cache):
    """Gradient of :func:`global_pool` with respect to ``x``.

    Parameters
    ----------
    grad_pooled : ndarray, shape (num_graphs, F)
    cache : PoolCache

    Returns
    -------
    grad_x : ndarray, shape (num_nodes, F)
        Mean/sum spread the gradient over each graph's nodes; max sends it to
        the (first) argmax row only.
    """
    if not isinstance(cache, PoolCache):
        raise TypeError(f"cache must be the PoolCache returned by global_pool, got {type(cache).__name__}")
    num_graphs = (cache.matrix.shape[0] if cache.matrix is not None else cache.argmax.shape[0])
    grad = V.check_dense(grad_pooled, "grad_pooled", (num_graphs, cache.num_features), cache.dtype)
    if cache.mode in ("mean", "sum"):
        if cache.mode == "mean":
            grad = grad / cache.counts
        return np.ascontiguousarray(cache.matrix.T @ grad, dtype=cache.dtype)
    grad_x = np.zeros((cache.num_nodes, cache.num_features), cache.dtype)
    g_idx, f_idx = np.nonzero(cache.argmax >= 0)
    # each (row, feature) pair wins for at most one graph, so plain assignment is exact
    grad_x[cache.argmax[g_idx, f_idx], f_idx] = grad[g_idx, f_idx]
    return grad_x


# ---------------------------------------------------------------------- linear
@dataclass
class LinearCache:
    """Input and parameters seen by :meth:`Linear.forward`."""

    x: object
    params: dict


class Linear:
    """Dense layer ``y = x @ weight.T + bias``.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default True
    dtype : numpy.float32 or numpy.float64, default float32
    seed : int or numpy.random.Generator, optional
        Seed of the initialisation: glorot weight, zero bias (PyG's
        ``Linear(weight_initializer="glorot")``).

    Attributes
    ----------
    params : ParamDict
        ``weight`` (out_features, in_features) and ``bias`` (out_features,).
    """

    def __init__(self, in_features, out_features, bias=True, dtype=np.float32, seed=None):
        self.in_features = V.check_int(in_features, "in_features", 1)
        self.out_features = V.check_int(out_features, "out_features", 1)
        self.bias = bool(bias)
        self.dtype = V.check_dtype(dtype)
        self._rng = np.random.default_rng(seed)
        shapes = {"weight": (self.out_features, self.in_features)}
        if self.bias:
            shapes["bias"] = (self.out_features,)
        self.params = ParamDict(shapes, self.dtype)
        self.reset_parameters()

    def reset_parameters(self):
        """Glorot weight, zero bias."""
        self.params["weight"] = glorot(self._rng, (self.out_features, self.in_features), self.dtype)
        if self.bias:
            self.params["bias"] = np.zeros(self.out_features, self.dtype)

    def __repr__(self):
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias})"

    def get_config(self):
        """The constructor arguments (except ``seed``) as plain Python values."""
        return {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "dtype": self.dtype.name,
        }

    def forward(self, x):
        """Return ``(y, cache)`` with ``y = x @ weight.T + bias``; ``x`` dense or scipy.sparse (n, in)."""
        n = x.shape[0] if sp.issparse(x) else (np.shape(x)[0] if np.ndim(x) >= 1 else 0)
        x = V.check_features(x, "x", n, self.in_features, self.dtype)
        self.params.check_finite()
        params = dict(self.params)
        y = np.ascontiguousarray(x @ params["weight"].T, dtype=self.dtype)
        if self.bias:
            y += params["bias"]
        return y, LinearCache(x, params)

    __call__ = forward

    def backward(self, cache, grad):
        """Gradients given ``grad = dL/dy`` (n, out_features).

        Returns
        -------
        grads : dict
            ``weight``, ``bias`` (if any) and ``x`` (None for sparse input).
        """
        if not isinstance(cache, LinearCache):
            raise TypeError(f"cache must be the LinearCache returned by forward, got {type(cache).__name__}")
        x = cache.x
        grad = V.check_dense(grad, "grad", (x.shape[0], self.out_features), self.dtype)
        grads = {}
        if sp.issparse(x):
            grads["weight"] = np.ascontiguousarray((x.T @ grad).T, dtype=self.dtype)
        else:
            grads["weight"] = grad.T @ x
        if self.bias:
            grads["bias"] = grad.sum(axis=0)
        grads["x"] = None if sp.issparse(x) else grad @ cache.params["weight"]
        return grads
