"""Per-graph readout of a batch (PyG's ``global_*_pool``), with its gradient."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import _validate as V

__all__ = ["POOL_MODES", "PoolCache", "global_pool", "global_pool_backward"]


POOL_MODES = ("mean", "sum", "max")


@dataclass
class PoolCache:
    """What :func:`global_pool` keeps for :func:`global_pool_backward`.

    Attributes
    ----------
    mode : {"mean", "sum", "max"}
        The pooling.
    num_nodes, num_features : int
        Shape of the pooled input.
    dtype : numpy.dtype
        Its floating-point type.
    matrix : scipy.sparse.csr_array or None
        The (num_graphs, num_nodes) summing operator, for mean and sum.
    counts : ndarray or None
        Nodes per graph (at least 1), shape (num_graphs, 1), for mean.
    argmax : ndarray of int64 or None
        For max, the winning row per (graph, feature); -1 for empty graphs.
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
        Node features of the batch.
    graph_ptr : ndarray of int, shape (num_graphs + 1,)
        Nodes of graph ``g`` are ``graph_ptr[g]:graph_ptr[g + 1]``
        (as returned by :func:`gatfast.batch_graphs`).
    mode : {"mean", "sum", "max"}
        The pooling, as PyG's ``global_mean_pool``, ``global_add_pool``, ``global_max_pool``.

    Returns
    -------
    pooled : ndarray, shape (num_graphs, F), dtype of ``x``
        Empty graphs pool to 0 in every mode.
    cache : PoolCache
        What :func:`global_pool_backward` needs.
    """
    V.check_choice(mode, "mode", set(POOL_MODES))
    x = V.float_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (num_nodes, F), got shape {x.shape}")
    n, f = x.shape
    ptr = V.check_graph_ptr(graph_ptr, n)
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
        The gradient with respect to the pooled output.
    cache : PoolCache
        From :func:`global_pool`.

    Returns
    -------
    grad_x : ndarray, shape (num_nodes, F)
        Mean/sum spread the gradient over each graph's nodes; max sends it to
        the (first) argmax row only.
    """
    if not isinstance(cache, PoolCache):
        raise TypeError(f"cache must be the PoolCache returned by global_pool, got {type(cache).__name__}")
    num_graphs = cache.matrix.shape[0] if cache.matrix is not None else cache.argmax.shape[0]
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
