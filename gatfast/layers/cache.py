"""What a layer's forward pass keeps for its backward pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import CSRGraph

__all__ = ["LayerCache"]


@dataclass
class LayerCache:
    """What ``forward`` keeps for ``backward``.

    Attributes
    ----------
    graph : CSRGraph
        The graph actually used (self loops added or removed as configured).
    x : ndarray or scipy.sparse.csr_array
        The validated input features.
    xl, xr : ndarray, shape (num_nodes, heads, out_features)
        Source and target projections.
    alpha : ndarray, shape (graph.nnz, heads)
        Attention weights in the CSR order of ``graph`` (before dropout).
    edge_scale : ndarray, shape (graph.nnz, heads) or (0, heads)
        Attention-dropout multipliers ``m_ij / (1 - p)``; empty without dropout.
    params : dict
        The parameter arrays the forward pass used.
    """

    graph: CSRGraph
    x: object
    xl: np.ndarray
    xr: np.ndarray
    alpha: np.ndarray
    edge_scale: np.ndarray
    params: dict
