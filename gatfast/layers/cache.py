"""What a layer's forward pass keeps for its backward pass."""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from ..graph import CSRGraph

__all__ = ["LayerCache"]


def _frozen(arr, owned):
    """Read-only: the kernels trust these arrays, so nobody may write to them through the cache.

    An array the call made for itself (``owned``) is marked read-only as is;
    one the layer's workspace may hand out again gets a read-only view.
    """
    if not owned:
        arr = arr.view()
    arr.setflags(write=False)
    return arr


class LayerCache(NamedTuple):
    """What ``forward`` keeps for ``backward`` (immutable; owned by the layer that made it).

    Attributes
    ----------
    graph : CSRGraph
        The graph the attention ran on (self loops added or removed as configured).
    inputs : Inputs
        The validated features (``x_src``, ``x_dst``, how they relate) and
        edge attributes in the attention graph's order.
    xl, xr : ndarray, shapes (num_src, heads, out_features), (num_dst, heads, out_features)
        Source and target projections.
    alpha : ndarray, shape (graph.nnz, heads)
        Attention weights in the CSR order of ``graph`` (before dropout).
    edge_scale : ndarray, shape (graph.nnz, heads) or (0, heads)
        Attention-dropout multipliers ``m_ij / (1 - p)``; empty without dropout.
    params : mapping
        The parameter arrays the forward pass used (a read-only mapping).
    owner : object
        The token of the layer that made the cache (see :meth:`check_owner`).
    """

    graph: CSRGraph
    inputs: object
    xl: np.ndarray
    xr: np.ndarray
    alpha: np.ndarray
    edge_scale: np.ndarray
    params: dict
    owner: object

    @classmethod
    def make(cls, owner, inputs, xl, xr, alpha, edge_scale, params, owned=False):
        """Build a read-only cache, tagged with the layer's ``owner`` token.

        Parameters
        ----------
        owner : object
            The layer's token.
        inputs : Inputs
            The validated inputs; ``inputs.attention`` is the attention graph.
        xl, xr, alpha, edge_scale : ndarray
            The arrays of the same names (see the class docstring), made read-only.
        params : dict
            The parameter arrays used (a new dict); stored as a read-only mapping.
        owned : bool, default False
            The arrays are the call's own (marked read-only in place), not
            the layer workspace's (read-only views).

        Returns
        -------
        LayerCache
            The new cache.
        """
        return cls(inputs.attention, inputs, _frozen(xl, owned), _frozen(xr, owned), _frozen(alpha, owned),
                   edge_scale if not edge_scale.size else _frozen(edge_scale, owned),
                   MappingProxyType(params), owner)

    @property
    def x(self):
        """The input features (``(x_src, x_dst)`` for bipartite input)."""
        return (self.inputs.x_src, self.inputs.x_dst) if self.inputs.relation == "pair" else self.inputs.x_src

    def check_owner(self, token, layer):
        """Refuse a cache made by another layer (or by this layer before it was copied or unpickled).

        Parameters
        ----------
        token : object
            The calling layer's token.
        layer : GATv2Layer
            The calling layer, named in the error.

        Raises
        ------
        ValueError
            When the cache's ``owner`` is not ``token``.
        """
        if self.owner is not token:
            raise ValueError(f"cache was made by another layer's forward, not by this {layer!r}: pass the cache "
                             "returned by this layer's own forward")
