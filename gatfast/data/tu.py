"""TU Dortmund graph-classification datasets (MUTAG) in the ``.npz`` format of ``docs/DATA.md``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import _validate as V
from ..graph import CSRGraph
from .datasets import GraphDataset, normalized
from .npz import NpzFile

__all__ = ["TU_KEYS", "load_tu"]

TU_KEYS = ("edge_index", "graph_indicator", "graph_labels")


def load_tu(path, dtype=np.float32, normalize_features=False, edge_features=True):
    """Load a TU Dortmund graph-classification dataset (``mutag.npz``).

    Node features are the one-hot ``node_labels`` (one column per label
    value ``0..node_labels.max()``); without ``node_labels`` every node gets
    a single constant feature 1. With ``edge_features`` (the default) and an
    ``edge_labels`` entry in the file, every edge gets its label one-hot
    (MUTAG's bond types: aromatic, single, double, triple) as edge features,
    in each graph's CSR order (``GraphDataset.edge_attrs``).

    Parameters
    ----------
    path : str, path-like or NpzFile
        A ``.npz`` file in the TU format of ``docs/DATA.md`` (or one already
        opened with :class:`~gatfast.data.npz.NpzFile`).
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the node and edge features.
    normalize_features : bool, default False
        Row-normalise each graph's features as PyG's ``NormalizeFeatures``
        would (a no-op for one-hot rows).
    edge_features : bool, default True
        One-hot the file's ``edge_labels`` as edge features, when it has them.

    Returns
    -------
    GraphDataset
        ``task="graph_classification"``; ``num_classes`` is
        ``len(graph_label_values)`` when the file has it, else
        ``graph_labels.max() + 1``.
    """
    dtype = V.check_dtype(dtype)
    z = NpzFile(path)
    z.require(TU_KEYS, "TU")
    gi = z.ints("graph_indicator", (None,), low=0)
    if gi.size == 0:
        raise z.error("graph_indicator", "must hold at least one node, got an empty array")
    steps = np.diff(gi)
    if gi[0] != 0 or np.any((steps != 0) & (steps != 1)):
        raise z.error(
            "graph_indicator",
            "must start at 0 and be non-decreasing in steps of 0 or 1 (graphs stored in order)",
        )
    n, num_graphs = gi.size, int(gi[-1]) + 1
    if z.has("graph_label_values"):
        num_classes = z.ints("graph_label_values", (None,)).size
    else:
        num_classes = None
    labels = z.ints("graph_labels", (num_graphs,), low=0, high=num_classes)
    num_classes = num_classes or int(labels.max()) + 1
    ei = z.ints("edge_index", (2, None), low=0, high=n)
    crossing = gi[ei[0]] != gi[ei[1]]
    if np.any(crossing):
        e = int(np.flatnonzero(crossing)[0])
        raise z.error("edge_index", f"edge {e} ({ei[0, e]} -> {ei[1, e]}) connects two different graphs")
    if z.has("node_labels"):
        node_labels = z.ints("node_labels", (n,), low=0)
        x_all = np.zeros((n, int(node_labels.max()) + 1), dtype=dtype)
        x_all[np.arange(n), node_labels] = 1
    else:
        x_all = np.ones((n, 1), dtype=dtype)
    onehot = None
    if edge_features and z.has("edge_labels"):
        edge_labels = z.ints("edge_labels", (ei.shape[1],), low=0)
        onehot = np.zeros((ei.shape[1], int(edge_labels.max()) + 1 if edge_labels.size else 1), dtype=dtype)
        onehot[np.arange(ei.shape[1]), edge_labels] = 1
    node_ptr = np.searchsorted(gi, np.arange(num_graphs + 1))
    edge_graph = gi[ei[1]]
    order = np.argsort(edge_graph, kind="stable")
    edge_ptr = np.searchsorted(edge_graph[order], np.arange(num_graphs + 1))
    ei = ei[:, order]
    if onehot is not None:
        onehot = onehot[order]
    graphs, xs, attrs = [], [], []
    for g in range(num_graphs):
        lo, hi = node_ptr[g], node_ptr[g + 1]
        sl = slice(edge_ptr[g], edge_ptr[g + 1])
        local = ei[:, sl] - lo
        if onehot is None:
            graphs.append(CSRGraph.from_edge_index(local, int(hi - lo)))
        else:
            graph, attr = CSRGraph.from_edge_index(local, int(hi - lo), edge_attr=onehot[sl])
            graphs.append(graph)
            attrs.append(attr)
        xs.append(x_all[lo:hi].copy())
    ds = GraphDataset(
        name=Path(z.path).stem,
        graphs=graphs,
        xs=xs,
        y=labels,
        num_classes=num_classes,
        task="graph_classification",
        edge_attrs=attrs if onehot is not None else None,
        preprocessing={"normalize_features": False},
    )
    return normalized(ds) if normalize_features else ds
