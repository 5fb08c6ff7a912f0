"""Dataset containers: one graph with node labels, or many small graphs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import _validate as V
from ..graph import CSRGraph, batch_graphs

__all__ = [
    "GRAPH_TASKS",
    "NODE_TASKS",
    "Batch",
    "GraphDataset",
    "NodeDataset",
    "normalized",
    "row_normalize",
    "without_edge_features",
]

NODE_TASKS = ("node_classification", "node_regression")
GRAPH_TASKS = ("graph_classification", "node_regression")


def _check_edge_attr(edge_attr, graph, name):
    if edge_attr is None:
        return None
    arr = np.asarray(edge_attr)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] != graph.nnz:
        raise ValueError(f"{name} must have shape ({graph.nnz}, D) (one row per edge, CSR order), got {arr.shape}")
    return arr


class Batch(tuple):
    """A mini-batch of graphs: unpacks as ``(graph, x, graph_ptr, y)``.

    Attributes
    ----------
    graph : CSRGraph
        The block-diagonal graph (see :func:`~gatfast.batch_graphs`).
    x : ndarray
        The stacked node features.
    graph_ptr : ndarray of int64, shape (num_graphs + 1,)
        Where each graph's nodes start.
    y : ndarray
        Labels (one per graph) or targets (one row per node).
    edge_attr : ndarray or None
        Edge features in the batch graph's CSR order.
    graph_ids, node_ids, edge_ids : ndarray of int64 or None
        Ids of the graphs, nodes and edges in the whole dataset, for keyed randomness.
    """

    def __new__(cls, graph, x, graph_ptr, y, edge_attr=None, graph_ids=None, node_ids=None, edge_ids=None):
        batch = super().__new__(cls, (graph, x, graph_ptr, y))
        batch.edge_attr = edge_attr
        batch.graph_ids, batch.node_ids, batch.edge_ids = graph_ids, node_ids, edge_ids
        return batch

    def __reduce__(self):
        return (Batch, (*self, self.edge_attr, self.graph_ids, self.node_ids, self.edge_ids))

    graph = property(lambda self: self[0], doc="The block-diagonal graph.")
    x = property(lambda self: self[1], doc="The stacked node features.")
    graph_ptr = property(lambda self: self[2], doc="Where each graph's nodes start.")
    y = property(lambda self: self[3], doc="Labels or targets.")


@dataclass(eq=False)
class NodeDataset:
    """One graph with per-node features, labels and a train/val/test split.

    Attributes
    ----------
    name : str
        Dataset name (``"cora"``, ``"karate"``, ...).
    graph : CSRGraph
        CSR by target; undirected data holds both directions.
    x : ndarray or scipy.sparse.csr_array, shape (num_nodes, num_features)
        Node features.
    y : ndarray, shape (num_nodes,)
        int64 class labels, or float targets when ``task == "node_regression"``.
    train_mask, val_mask, test_mask : ndarray of bool, shape (num_nodes,)
        The split.
    num_classes : int
        Number of classes; 0 for regression.
    task : {"node_classification", "node_regression"}
    edge_attr : ndarray, shape (graph.nnz, D), optional
        Edge features in the graph's CSR order.
    preprocessing : dict or None
        How ``x`` was derived from the raw data: ``{"normalize_features":
        bool}`` for the datasets gatfast loads or generates; None (unknown)
        for one built by hand. A checkpoint records it so that ``gatfast
        evaluate`` preprocesses the same way.
    """

    name: str
    graph: CSRGraph
    x: object
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    task: str = "node_classification"
    edge_attr: np.ndarray = None
    preprocessing: dict = None

    def __post_init__(self):
        V.check_choice(self.task, "task", NODE_TASKS)
        if not isinstance(self.graph, CSRGraph):
            raise TypeError(f"graph must be a gatfast.CSRGraph, got {type(self.graph).__name__}")
        n = self.graph.num_nodes
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise ValueError(f"x must have shape ({n}, num_features), got {self.x.shape}")
        if len(self.y) != n:
            raise ValueError(f"y must have one entry per node ({n}), got {len(self.y)}")
        self.edge_attr = _check_edge_attr(self.edge_attr, self.graph, "edge_attr")
        for name in ("train_mask", "val_mask", "test_mask"):
            mask = getattr(self, name)
            if mask.dtype != bool or mask.shape != (n,):
                raise ValueError(
                    f"{name} must be a bool array of shape ({n},), got {mask.dtype} {mask.shape}"
                )

    @property
    def num_nodes(self):
        """Number of nodes."""
        return self.graph.num_nodes

    @property
    def num_features(self):
        """Number of feature columns."""
        return int(self.x.shape[1])

    @property
    def edge_dim(self):
        """Number of edge features (None without)."""
        return None if self.edge_attr is None else int(self.edge_attr.shape[1])

    def __repr__(self):
        split = "/".join(str(int(m.sum())) for m in (self.train_mask, self.val_mask, self.test_mask))
        return (
            f"NodeDataset(name={self.name!r}, num_nodes={self.num_nodes}, nnz={self.graph.nnz}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}, "
            f"task={self.task!r}, train/val/test={split})"
        )


@dataclass(eq=False)
class GraphDataset:
    """Many small graphs, each with dense node features.

    Attributes
    ----------
    name : str
        Dataset name (``"mutag"``, ...).
    graphs : list of CSRGraph
        The graphs, square, CSR by target.
    xs : list of ndarray
        ``xs[g]`` has shape ``(graphs[g].num_nodes, num_features)``.
    y : ndarray or list of ndarray
        ``"graph_classification"``: int64 label per graph, shape (num_graphs,).
        ``"node_regression"``: a list with one float array per graph,
        ``y[g]`` of shape ``(graphs[g].num_nodes, num_targets)``.
    num_classes : int
        Number of graph classes; 0 for regression.
    task : {"graph_classification", "node_regression"}
    edge_attrs : list of ndarray, optional
        ``edge_attrs[g]`` of shape ``(graphs[g].nnz, D)``: edge features in
        each graph's CSR order (the same ``D`` for all graphs).
    preprocessing : dict or None
        As for :class:`NodeDataset`.
    """

    name: str
    graphs: list
    xs: list
    y: object
    num_classes: int
    task: str = "graph_classification"
    edge_attrs: list = None
    preprocessing: dict = None

    def __post_init__(self):
        V.check_choice(self.task, "task", GRAPH_TASKS)
        if len(self.graphs) != len(self.xs) or len(self.graphs) != len(self.y):
            raise ValueError(
                f"graphs, xs and y must have the same length, got "
                f"{len(self.graphs)}, {len(self.xs)} and {len(self.y)}"
            )
        for g, (graph, x) in enumerate(zip(self.graphs, self.xs)):
            if x.ndim != 2 or x.shape[0] != graph.num_nodes:
                raise ValueError(f"xs[{g}] must have shape ({graph.num_nodes}, num_features), got {x.shape}")
            if self.task == "node_regression" and len(self.y[g]) != graph.num_nodes:
                raise ValueError(
                    f"y[{g}] must have one row per node ({graph.num_nodes}), got {len(self.y[g])}"
                )
        if self.edge_attrs is not None:
            if len(self.edge_attrs) != len(self.graphs):
                raise ValueError(f"edge_attrs must have one array per graph ({len(self.graphs)}), "
                                 f"got {len(self.edge_attrs)}")
            self.edge_attrs = [_check_edge_attr(a, g, f"edge_attrs[{k}]")
                               for k, (a, g) in enumerate(zip(self.edge_attrs, self.graphs))]
            dims = {a.shape[1] for a in self.edge_attrs}
            if len(dims) > 1:
                raise ValueError(f"edge_attrs must have the same number of columns in every graph, got {sorted(dims)}")

    @property
    def edge_dim(self):
        """Number of edge features (None without)."""
        return None if not self.edge_attrs else int(self.edge_attrs[0].shape[1])

    def __len__(self):
        return len(self.graphs)

    def __getitem__(self, index):
        """Graph ``index`` as ``(graph, x)``, or ``(graph, x, edge_attr)`` with edge features (no label).

        This makes the dataset a sequence of the items the graph-level
        estimator takes as ``X`` (``clf.fit(ds, ds.y)``), which
        scikit-learn's splitters index one id at a time.
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__}")
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for {len(self)} graphs")
        if self.edge_attrs:
            return self.graphs[index], self.xs[index], self.edge_attrs[index]
        return self.graphs[index], self.xs[index]

    @property
    def num_features(self):
        """Number of node feature columns."""
        return int(self.xs[0].shape[1]) if self.xs else 0

    @property
    def num_targets(self):
        """Columns of the per-node targets (regression), else 0."""
        if self.task != "node_regression" or not self.y:
            return 0
        return int(self.y[0].shape[1])

    def _indices(self, indices):
        idx = np.asarray(indices)
        if idx.size == 0:
            raise ValueError("indices must hold at least one graph id, got none")
        if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"indices must be an integer array, got dtype {idx.dtype}")
        if idx.ndim != 1:
            raise ValueError(f"indices must be a 1-D array, got shape {idx.shape}")
        if idx.min() < 0 or idx.max() >= len(self):
            raise ValueError(f"indices must lie in [0, {len(self)}), got min {idx.min()} max {idx.max()}")
        return idx.astype(np.int64)

    def batch(self, indices):
        """Join the graphs ``indices`` into one block-diagonal graph.

        Parameters
        ----------
        indices : array_like of int
            Graph ids, in the order they appear in the batch.

        Returns
        -------
        Batch
            Unpacks as ``graph, x, graph_ptr, y``: the block-diagonal
            :class:`CSRGraph`; the features, shape (total_nodes,
            num_features); ``graph_ptr`` (len(indices) + 1,), the nodes of the
            ``b``-th graph being ``graph_ptr[b]:graph_ptr[b + 1]``; and the
            graph labels ``y[indices]`` (classification) or the stacked
            per-node targets, shape (total_nodes, num_targets) (regression).
            ``batch.edge_attr`` holds the edge features in the batched
            graph's CSR order (None without).
        """
        idx = self._indices(indices)
        graph, graph_ptr = batch_graphs([self.graphs[i] for i in idx])
        x = np.concatenate([self.xs[i] for i in idx], axis=0)
        if self.task == "node_regression":
            y = np.concatenate([self.y[i] for i in idx], axis=0)
        else:
            y = np.asarray(self.y)[idx]
        # batch_graphs stacks the rows graph after graph, so CSR orders concatenate
        edge_attr = None if not self.edge_attrs else np.concatenate([self.edge_attrs[i] for i in idx], axis=0)
        node_start, edge_start = self._offsets()
        node_ids = np.concatenate([np.arange(node_start[i], node_start[i + 1]) for i in idx])
        edge_ids = np.concatenate([np.arange(edge_start[i], edge_start[i + 1]) for i in idx])
        return Batch(graph, x, graph_ptr, y, edge_attr, idx.copy(), node_ids, edge_ids)

    def _offsets(self):
        """Where each graph's nodes and edges start in the whole dataset (for global ids)."""
        sizes = np.array([g.num_nodes for g in self.graphs], dtype=np.int64)
        nnzs = np.array([g.nnz for g in self.graphs], dtype=np.int64)
        return np.concatenate([[0], np.cumsum(sizes)]), np.concatenate([[0], np.cumsum(nnzs)])

    def folds(self, k=10, seed=0):
        """Split the graphs into ``k`` folds, stratified by class.

        Each class is shuffled and dealt round-robin over the folds, one class
        after the other, so class proportions and fold sizes differ by at most
        one graph. Regression datasets are shuffled without stratification.

        Parameters
        ----------
        k : int, default 10
            Number of folds, ``2 <= k <= len(self)``.
        seed : int, default 0
            Seed of the shuffles.

        Returns
        -------
        list of (train_idx, test_idx)
            Sorted int64 arrays; every graph is in exactly one ``test_idx``.
        """
        k = V.check_int(k, "k", minimum=2)
        if k > len(self):
            raise ValueError(f"k must be <= the number of graphs ({len(self)}), got {k}")
        rng = np.random.default_rng(seed)
        if self.task == "node_regression":
            order = rng.permutation(len(self))
        else:
            labels = np.asarray(self.y)
            order = np.concatenate([rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)])
        fold_of = np.empty(len(self), dtype=np.int64)
        fold_of[order] = np.arange(len(self)) % k
        return [(np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)) for f in range(k)]

    def __repr__(self):
        n = sum(g.num_nodes for g in self.graphs)
        return (
            f"GraphDataset(name={self.name!r}, num_graphs={len(self)}, total_nodes={n}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}, task={self.task!r})"
        )


def row_normalize(x):
    """Row-normalise non-negative features exactly as PyG's ``NormalizeFeatures``.

    PyG shifts by the global minimum (0 for sparse non-negative data) and
    divides each row by ``max(row_sum, 1)``: rows summing to 0 stay 0, and
    rows summing to less than 1 are left unscaled. Binary bag-of-words
    features (Cora, CiteSeer) therefore become rows summing to one.

    Parameters
    ----------
    x : ndarray or scipy.sparse matrix, shape (n, F)
        The features; sparse ones must be non-negative (a shift would densify them).

    Returns
    -------
    ndarray or scipy.sparse.csr_array
        A new array; ``x`` is not modified.
    """
    if sp.issparse(x):
        x = sp.csr_array(x, copy=True)
        full = x.nnz == x.shape[0] * x.shape[1]
        lo = x.data.min() if x.nnz else 0
        lo = lo if full else min(lo, 0)
        if lo < 0:
            raise ValueError("x must be non-negative to normalise sparse features (a shift would densify)")
        x.data -= lo
        sums = np.asarray(x.sum(axis=1)).ravel()
        x.data /= np.repeat(np.maximum(sums, 1), np.diff(x.indptr)).astype(x.dtype)
        return x
    x = np.asarray(x)
    x = x - x.min() if x.size else x.copy()
    return x / np.maximum(x.sum(axis=1, keepdims=True), 1)


def without_edge_features(ds):
    """Drop a dataset's edge features (``gatfast train --no-edge-features``).

    Parameters
    ----------
    ds : NodeDataset or GraphDataset
        The dataset; it is not modified.

    Returns
    -------
    NodeDataset or GraphDataset
        A copy without edge features.
    """
    if isinstance(ds, NodeDataset):
        return dataclasses.replace(ds, edge_attr=None)
    return dataclasses.replace(ds, edge_attrs=None)


def normalized(ds):
    """A copy of ``ds`` with row-normalised features (per graph for GraphDataset)."""
    done = {**(ds.preprocessing or {}), "normalize_features": True}
    if isinstance(ds, NodeDataset):
        return dataclasses.replace(ds, x=row_normalize(ds.x), preprocessing=done)
    return dataclasses.replace(ds, xs=[row_normalize(x) for x in ds.xs], preprocessing=done)
