"""Many small graphs as one block-diagonal graph (a mini-batch)."""

from __future__ import annotations

import numpy as np

from .csr import CSRGraph

__all__ = ["batch_graphs"]


def batch_graphs(graphs):
    """Join many graphs into one block-diagonal graph.

    Parameters
    ----------
    graphs : sequence of CSRGraph
        The graphs to join, in order. Each must be square: bipartite blocks are not supported.

    Returns
    -------
    graph : CSRGraph
        Node ``k`` of graph ``g`` becomes node ``graph_ptr[g] + k``.
    graph_ptr : ndarray of int64, shape (len(graphs) + 1,)
        Nodes of graph ``g`` are ``graph_ptr[g]:graph_ptr[g + 1]``.
    """
    graphs = list(graphs)
    if not graphs:
        raise ValueError("graphs must contain at least one CSRGraph, got none")
    for k, g in enumerate(graphs):
        if not isinstance(g, CSRGraph):
            raise TypeError(f"graphs[{k}] must be a CSRGraph, got {type(g).__name__}")
    sizes = np.array([g.num_nodes for g in graphs], dtype=np.int64)
    nnzs = np.array([g.nnz for g in graphs], dtype=np.int64)
    graph_ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=graph_ptr[1:])
    edge_ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum(nnzs, out=edge_ptr[1:])
    indptr = np.concatenate([[0]] + [g.indptr[1:] + edge_ptr[k] for k, g in enumerate(graphs)])
    indices = np.concatenate([g.indices + graph_ptr[k] for k, g in enumerate(graphs)])
    return CSRGraph(indptr.astype(np.int64), indices.astype(np.int64), int(graph_ptr[-1])), graph_ptr
