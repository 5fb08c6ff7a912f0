"""What a layer's forward pass reads: the attention graph, source and target
features, and the edge attributes in the attention graph's order.

Three ways the features relate to the graph (``relation``):

* ``"same"``: a square graph and one matrix; sources and targets are the
  same nodes (``x_src is x_dst``).
* ``"prefix"``: a rectangular graph (a sampled block, ``num_src >= num_dst``)
  and one matrix of ``num_src`` rows; the targets are its first ``num_dst``
  rows, as in DGL's blocks and PyG's ``NeighborLoader`` output.
* ``"pair"``: a bipartite layer given ``(x_src, x_dst)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from .. import _validate as V
from ..graph import CSRGraph
from ..kernels import FILL_CONST, FILL_MODES, fill_loop_attr, fill_loop_attr_backward

__all__ = ["Inputs", "check_fill_value", "edge_attr_grad", "resolve_inputs"]


class Inputs(NamedTuple):
    """Validated inputs of one forward call (see the module docstring for ``relation``)."""

    graph: CSRGraph  # the graph as given
    attention: CSRGraph  # the graph the attention runs on (self loops handled)
    x_src: object
    x_dst: object
    relation: str
    u: np.ndarray  # (attention.nnz, D), or (0, D) without edge features
    edge_attr_shape: tuple  # the shape of edge_attr as given, () without


def check_fill_value(fill_value, edge_dim):
    """``fill_value`` as stored by the layer: a mode name, a float, or a tuple of ``edge_dim`` floats."""
    if isinstance(fill_value, str):
        if fill_value not in FILL_MODES:
            raise ValueError(f"fill_value must be one of {sorted(FILL_MODES)!r}, a number or a vector, "
                             f"got {fill_value!r}")
        return fill_value
    arr = np.asarray(fill_value)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"fill_value must be a mode name, a number or a vector of numbers, got {fill_value!r}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"fill_value must be finite, got {fill_value!r}")
    if arr.ndim == 0:
        return float(arr)
    if arr.ndim != 1 or (edge_dim is not None and arr.size != edge_dim):
        raise ValueError(f"fill_value as a vector must have edge_dim = {edge_dim} entries, got shape {arr.shape}")
    return tuple(float(v) for v in arr)


def _features(layer, graph, x, finite=True):
    """``(x_src, x_dst, relation)``, validated and converted to the layer's dtype."""
    n_dst, n_src = graph.shape
    f_src, f_dst = layer.in_features_src, layer.in_features_dst
    if layer.bipartite:
        if not isinstance(x, (tuple, list)) or len(x) != 2:
            raise TypeError(f"x must be a pair (x_src, x_dst) for a bipartite layer built with in_features="
                            f"{layer.in_features!r}, got {type(x).__name__}")
        x_src = V.check_features(x[0], "x[0] (x_src)", n_src, f_src, layer.dtype, finite)
        x_dst = V.check_features(x[1], "x[1] (x_dst)", n_dst, f_dst, layer.dtype, finite)
        return x_src, x_dst, "pair"
    if isinstance(x, (tuple, list)):
        raise TypeError("x is a pair (x_src, x_dst) but this layer takes one feature matrix: build "
                        "GATv2Layer((F_src, F_dst), ...) for bipartite input")
    if n_src == n_dst:
        x = V.check_features(x, "x", n_dst, f_src, layer.dtype, finite)
        return x, x, "same"
    if n_src < n_dst:
        raise ValueError(f"graph has more targets ({n_dst}) than sources ({n_src}): one feature matrix can only "
                         "describe a block whose targets are its first sources; pass (x_src, x_dst) to a "
                         "bipartite layer instead")
    x = V.check_features(x, "x", n_src, f_src, layer.dtype, finite)
    return x, x[:n_dst], "prefix"


def _edge_attr(layer, graph, edge_attr):
    if layer.edge_dim is None:
        if edge_attr is not None:
            raise ValueError("edge_attr was given but the layer has no edge features: build it with edge_dim=D")
        return None
    if edge_attr is None:
        raise ValueError(f"edge_attr is required: the layer was built with edge_dim={layer.edge_dim}")
    if sp.issparse(edge_attr):
        raise TypeError("edge_attr must be a dense array of shape (nnz, edge_dim), got a scipy.sparse matrix")
    arr = np.asarray(edge_attr)
    if arr.ndim == 1 and layer.edge_dim == 1:
        arr = arr.reshape(-1, 1)
    return V.check_dense(arr, "edge_attr", (graph.nnz, layer.edge_dim), layer.dtype), np.shape(edge_attr)


def resolve_inputs(layer, graph, x, edge_attr, x_finite=False):
    """Validate one forward call's inputs; returns :class:`Inputs`. Nothing given is modified.

    ``x_finite``: ``x`` is known to be finite (see ``check_features``); the
    edge attributes are always checked.
    """
    graph = V.as_graph(graph)
    x_src, x_dst, relation = _features(layer, graph, x, not x_finite)
    checked = _edge_attr(layer, graph, edge_attr)
    if layer.root_weight is not None:
        attention = graph.without_self_loops()
    elif layer.add_self_loops:
        attention = graph.with_self_loops()
    else:
        attention = graph
    if checked is None:
        u, shape = layer.constants.no_edges, ()
    else:
        attr, shape = checked
        u = _attention_order(layer, graph, attention, attr)
    return Inputs(graph, attention, x_src, x_dst, relation, u, shape)


def _attention_order(layer, graph, attention, attr):
    if attention is graph:
        return attr
    if layer.root_weight is not None:  # loops removed
        return np.ascontiguousarray(attr[graph.indices != graph.targets()])
    layout = graph.loop_layout()
    u = np.empty((attention.nnz, attr.shape[1]), attr.dtype)
    u[attention.loop_layout().kept] = attr[layout.kept]
    mode, const = _fill_mode(layer, attr.dtype)
    fill_loop_attr(attention.indptr, layout.loop_slots, mode, const, u)
    return u


def _fill_mode(layer, dtype):
    fill = layer.fill_value
    if isinstance(fill, str):
        return FILL_MODES[fill], np.zeros(layer.edge_dim, dtype)
    return FILL_CONST, np.broadcast_to(np.asarray(fill, dtype), (layer.edge_dim,)).copy()


def edge_attr_grad(layer, inputs, grad_u):
    """``∂L/∂edge_attr`` in the shape and order it was given, from the attention graph's ``grad_u``."""
    graph, attention = inputs.graph, inputs.attention
    if attention is graph:
        out = grad_u
    else:
        out = np.zeros((graph.nnz, grad_u.shape[1]), grad_u.dtype)  # dropped self loops get none
        if layer.root_weight is not None:
            out[graph.indices != graph.targets()] = grad_u
        else:
            layout = graph.loop_layout()
            mode, _ = _fill_mode(layer, grad_u.dtype)
            fill_loop_attr_backward(attention.indptr, layout.loop_slots, mode, inputs.u, grad_u)
            out[layout.kept] = grad_u[attention.loop_layout().kept]
    return out.reshape(inputs.edge_attr_shape)
