"""Validation of the estimators' inputs: node ids, the graph parameters, lists of graphs."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _validate as V
from ..data import GraphDataset
from ..graph import CSRGraph

__all__ = ["check_node_ids", "graph_items", "node_inputs"]


def check_node_ids(X, num_nodes, name="GATv2Classifier"):
    """``X`` as a 1-D int64 array of node ids in ``[0, num_nodes)``.

    Parameters
    ----------
    X : array_like, shape (n,) or (n, 1)
        Integer ids (floats holding whole numbers are accepted, as after a
        cast to float by a pipeline step).
    num_nodes : int
    name : str
        The estimator, for the messages.

    Returns
    -------
    ndarray of int64, shape (n,)

    Raises
    ------
    TypeError
        A graph, sparse or non-numeric ``X``.
    ValueError
        NaN, negative, complex or non-integer values (the message says that
        the node features are the ``node_features`` parameter), a wrong
        shape, no ids, or ids outside the graph.
    """
    if isinstance(X, CSRGraph):
        raise TypeError(f"X must hold node ids, got a CSRGraph: the graph is the graph= parameter of {name}")
    if sp.issparse(X):
        raise TypeError("X must be a dense array of node ids; sparse input is not supported")
    arr = np.asarray(X)
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError("Complex data not supported: X must hold integer node ids")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"X must hold integer node ids, got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("Input X contains NaN or infinity: X must hold integer node ids")
    if arr.size and arr.min() < 0:
        raise ValueError(f"Negative values in data passed to {name}: X must hold node ids (>= 0)")
    if arr.ndim == 2:
        if arr.shape[1] == 0:
            raise ValueError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required: "
                             "X must be one column of node ids")
        if arr.shape[1] != 1:
            raise ValueError(f"X has {arr.shape[1]} features, but {name} is expecting 1 features as input "
                             "(one column of node ids; the node features are the node_features parameter)")
        arr = arr[:, 0]
    elif arr.ndim != 1:
        raise ValueError(f"X must hold node ids, shape (n,) or (n, 1), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={np.shape(X)}) while a minimum of 1 is required: "
                         "X must hold at least one node id")
    if not np.issubdtype(arr.dtype, np.integer) and not np.array_equal(arr, np.round(arr)):
        raise ValueError(f"X must hold integer node ids, got non-integer values such as {arr[arr != np.round(arr)][0]!r}:"
                         f" X is not the node features (those are {name}(node_features=...))")
    ids = arr.astype(np.int64)
    bad = ids[(ids < 0) | (ids >= num_nodes)]
    if bad.size:
        raise ValueError(f"X holds node id {bad[0]} but the graph has {num_nodes} nodes (ids 0 .. {num_nodes - 1})")
    return ids


def node_inputs(graph_param, node_features, edge_attr, dtype):
    """``(graph, x, edge_attr)`` from GATv2Classifier's parameters, validated (nothing is modified).

    Parameters
    ----------
    graph_param : CSRGraph or scipy.sparse matrix
    node_features : ndarray or scipy.sparse matrix, shape (num_nodes, F)
    edge_attr : ndarray, shape (graph.nnz, D) or (graph.nnz,), optional
    dtype : numpy dtype

    Returns
    -------
    graph : CSRGraph
    x : ndarray or scipy.sparse.csr_array, in ``dtype``
    edge_attr : ndarray or None, in ``dtype``

    Raises
    ------
    TypeError, ValueError
        Naming the parameter.
    """
    if graph_param is None or node_features is None:
        raise ValueError("GATv2Classifier needs the graph= and node_features= parameters (X holds node ids): "
                         "GATv2Classifier(graph=ds.graph, node_features=ds.x)")
    graph = V.as_graph(graph_param, "graph")
    if graph.is_bipartite():
        raise ValueError(f"graph must be square (one node set), got shape {graph.shape}")
    x = node_features
    if not sp.issparse(x):
        x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"node_features must be 2-D (num_nodes, F), got shape {x.shape}")
    x = V.check_features(x, "node_features", graph.num_nodes, x.shape[1], dtype)
    if edge_attr is not None:
        if not isinstance(graph_param, CSRGraph):
            raise TypeError("graph must be a CSRGraph when edge_attr is given (edge_attr follows its CSR "
                            "order): build both with CSRGraph.from_edge_index(..., edge_attr=...)")
        edge_attr = np.asarray(edge_attr)
        if edge_attr.ndim == 1:
            edge_attr = edge_attr.reshape(-1, 1)
        if np.issubdtype(edge_attr.dtype, np.integer) or edge_attr.dtype == bool:
            edge_attr = edge_attr.astype(dtype)
        edge_attr = V.check_dense(edge_attr, "edge_attr", (graph.nnz, None), dtype)
    return graph, x, edge_attr


_ITEMS = "X must be a list (or a sequence such as a GraphDataset) of (graph, x) or (graph, x, edge_attr) items"


def graph_items(X, dtype, num_features=None, edge_dim=False):
    """``(graphs, xs, edge_attrs or None)`` from the items of ``X``, validated (nothing is modified).

    Parameters
    ----------
    X : sequence of tuples, or GraphDataset
        ``(graph, x)`` or ``(graph, x, edge_attr)`` per graph: a
        :class:`~gatfast.CSRGraph` or square scipy matrix (rows = targets),
        dense node features ``(num_nodes, F)`` and edge features
        ``(graph.nnz, D)`` in the graph's CSR order.
    dtype : numpy dtype
    num_features : int, optional
        The ``F`` every item must have (default: the first item's).
    edge_dim : int, None or False
        The ``D`` every item must have (None: no edge features; False: the
        first item's).

    Returns
    -------
    graphs : list of CSRGraph
    xs : list of ndarray
    edge_attrs : list of ndarray, or None

    Raises
    ------
    TypeError, ValueError
        Naming the item (``X[k]``) and what is wrong with it.
    """
    if isinstance(X, GraphDataset):
        X = [X[k] for k in range(len(X))]
    if isinstance(X, (str, bytes, dict)) or sp.issparse(X) or not hasattr(X, "__len__") \
            or not hasattr(X, "__getitem__") or (isinstance(X, np.ndarray) and X.dtype != object):
        raise TypeError(f"{_ITEMS}, got {type(X).__name__}" + (f" of dtype {X.dtype}" if hasattr(X, "dtype") else ""))
    if len(X) == 0:
        raise ValueError("X must hold at least one graph, got 0 samples")
    graphs, xs, attrs = [], [], []
    for k in range(len(X)):
        item = X[k]
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise TypeError(f"{_ITEMS}; X[{k}] is a {type(item).__name__}"
                            + (f" of length {len(item)}" if isinstance(item, (tuple, list)) else ""))
        graph = V.as_graph(item[0], f"X[{k}][0] (the graph)")
        if graph.is_bipartite():
            raise ValueError(f"X[{k}][0] (the graph) must be square, got shape {graph.shape}")
        if sp.issparse(item[1]):
            raise TypeError(f"X[{k}][1] (the node features) must be a dense array, got scipy.sparse")
        x = np.asarray(item[1])
        if x.ndim != 2:
            raise ValueError(f"X[{k}][1] (the node features) must be 2-D (num_nodes, F), got shape {x.shape}")
        if num_features is None:
            num_features = x.shape[1]
        xs.append(V.check_features(x, f"X[{k}][1] (the node features)", graph.num_nodes, num_features, dtype))
        attr = item[2] if len(item) == 3 else None
        if edge_dim is False:
            edge_dim = None if attr is None else np.shape(attr)[-1] if np.ndim(attr) == 2 else 1
        if (attr is None) != (edge_dim is None):
            raise ValueError(f"X[{k}] {'has no' if attr is None else 'has'} edge features, unlike "
                             + ("the fitted model" if k == 0 else "X[0]") + ": all items need the same kind")
        if attr is not None:
            attr = np.asarray(attr)
            attr = attr.reshape(-1, 1) if attr.ndim == 1 else attr
            if np.issubdtype(attr.dtype, np.integer) or attr.dtype == bool:
                attr = attr.astype(dtype)
            attr = V.check_dense(attr, f"X[{k}][2] (the edge features)", (graph.nnz, edge_dim), dtype)
        graphs.append(graph)
        attrs.append(attr)
    return graphs, xs, None if edge_dim is None else attrs
