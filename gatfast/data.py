"""Datasets: the embedded karate club, Planetoid and TU ``.npz`` loaders, and
seeded synthetic generators.

Every graph is a :class:`~gatfast.CSRGraph` **by target** (row ``i`` lists
the sources ``j`` of the edges ``j -> i``); undirected data stores both
directions. The ``.npz`` formats are described in ``data/README.md``; files
are always read with ``np.load(path, allow_pickle=False)``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import _validate as V
from ._io import atomic_write
from .graph import CSRGraph, batch_graphs

__all__ = [
    "DATA_DIR",
    "GraphDataset",
    "NodeDataset",
    "load_dataset",
    "load_karate",
    "load_planetoid",
    "load_tu",
    "make_csbm",
    "make_traffic_scenes",
    "row_normalize",
    "traffic_target",
    "write_planetoid_npz",
]

#: The ``data/`` folder of a source checkout (``cora.npz``, ``mutag.npz``, ``karate.npz``).
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

NODE_TASKS = ("node_classification", "node_regression")
GRAPH_TASKS = ("graph_classification", "node_regression")
PLANETOID_KEYS = ("y", "edge_index", "train_mask", "val_mask", "test_mask")
PLANETOID_X_KEYS = ("x_data", "x_indices", "x_indptr", "x_shape")
TU_KEYS = ("edge_index", "graph_indicator", "graph_labels")


# ---------------------------------------------------------------------- containers
@dataclass(eq=False)
class NodeDataset:
    """One graph with per-node features, labels and a train/val/test split.

    Attributes
    ----------
    name : str
    graph : CSRGraph
        CSR by target; undirected data holds both directions.
    x : ndarray or scipy.sparse.csr_array, shape (num_nodes, num_features)
    y : ndarray, shape (num_nodes,)
        int64 class labels, or float targets when ``task == "node_regression"``.
    train_mask, val_mask, test_mask : ndarray of bool, shape (num_nodes,)
    num_classes : int
        Number of classes; 0 for regression.
    task : {"node_classification", "node_regression"}
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

    def __post_init__(self):
        V.check_choice(self.task, "task", NODE_TASKS)
        if not isinstance(self.graph, CSRGraph):
            raise TypeError(f"graph must be a gatfast.CSRGraph, got {type(self.graph).__name__}")
        n = self.graph.num_nodes
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise ValueError(f"x must have shape ({n}, num_features), got {self.x.shape}")
        if len(self.y) != n:
            raise ValueError(f"y must have one entry per node ({n}), got {len(self.y)}")
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
    graphs : list of CSRGraph
    xs : list of ndarray
        ``xs[g]`` has shape ``(graphs[g].num_nodes, num_features)``.
    y : ndarray or list of ndarray
        ``"graph_classification"``: int64 label per graph, shape (num_graphs,).
        ``"node_regression"``: a list with one float array per graph,
        ``y[g]`` of shape ``(graphs[g].num_nodes, num_targets)``.
    num_classes : int
        Number of graph classes; 0 for regression.
    task : {"graph_classification", "node_regression"}
    """

    name: str
    graphs: list
    xs: list
    y: object
    num_classes: int
    task: str = "graph_classification"

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

    def __len__(self):
        return len(self.graphs)

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
        graph : CSRGraph
        x : ndarray, shape (total_nodes, num_features)
        graph_ptr : ndarray of int64, shape (len(indices) + 1,)
            Nodes of the ``b``-th graph of the batch are ``graph_ptr[b]:graph_ptr[b + 1]``.
        y : ndarray
            Graph labels ``y[indices]`` (classification) or the stacked
            per-node targets, shape (total_nodes, num_targets) (regression).
        """
        idx = self._indices(indices)
        graph, graph_ptr = batch_graphs([self.graphs[i] for i in idx])
        x = np.concatenate([self.xs[i] for i in idx], axis=0)
        if self.task == "node_regression":
            y = np.concatenate([self.y[i] for i in idx], axis=0)
        else:
            y = np.asarray(self.y)[idx]
        return graph, x, graph_ptr, y

    def folds(self, k=10, seed=0):
        """Split the graphs into ``k`` folds, stratified by class.

        Each class is shuffled and dealt round-robin over the folds, one class
        after the other, so class proportions and fold sizes differ by at most
        one graph. Regression datasets are shuffled without stratification.

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


# ---------------------------------------------------------------------- karate club
# Zachary's karate club (W. W. Zachary, J. Anthropol. Res. 33(4):452-473, 1977):
# the 78 friendships, 0-based, as in networkx.karate_club_graph() and PyG's KarateClub.
KARATE_EDGES = (
    (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (0, 8), (0, 10), (0, 11),
    (0, 12), (0, 13), (0, 17), (0, 19), (0, 21), (0, 31), (1, 2), (1, 3), (1, 7), (1, 13),
    (1, 17), (1, 19), (1, 21), (1, 30), (2, 3), (2, 7), (2, 8), (2, 9), (2, 13), (2, 27),
    (2, 28), (2, 32), (3, 7), (3, 12), (3, 13), (4, 6), (4, 10), (5, 6), (5, 10), (5, 16),
    (6, 16), (8, 30), (8, 32), (8, 33), (9, 33), (13, 33), (14, 32), (14, 33), (15, 32), (15, 33),
    (18, 32), (18, 33), (19, 33), (20, 32), (20, 33), (22, 32), (22, 33), (23, 25), (23, 27), (23, 29),
    (23, 32), (23, 33), (24, 25), (24, 27), (24, 31), (25, 31), (26, 29), (26, 33), (27, 33), (28, 31),
    (28, 33), (29, 32), (29, 33), (30, 32), (30, 33), (31, 32), (31, 33), (32, 33),
)  # fmt: skip
# Faction after the split (networkx's "club" attribute): 0 = "Mr. Hi", 1 = "Officer".
KARATE_CLUB = (
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0,
    0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
)  # fmt: skip


def _symmetric_edge_index(pairs, num_nodes):
    """Both directions of undirected ``pairs``, coalesced (sorted by (src, dst))."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    ei = np.concatenate([pairs.T, pairs[:, ::-1].T], axis=1)
    keys = np.unique(ei[0] * num_nodes + ei[1])
    return np.stack([keys // num_nodes, keys % num_nodes])


def load_karate(dtype=np.float32, normalize_features=False):
    """Zachary's karate club: 34 members, 78 friendships, two factions.

    Features are the identity (one-hot node ids, as PyG's ``KarateClub``);
    labels are the two factions after the club split (``"club"`` in
    networkx: 0 = Mr. Hi, 1 = Officer; 17 members each). It is a
    smoke-test dataset: all three masks cover every node, so a demo trains
    and reports on all of them. ``normalize_features`` is accepted for a
    uniform interface; identity rows already sum to one.

    Returns
    -------
    NodeDataset
        ``graph`` has 156 directed edges (both directions of each friendship).
    """
    dtype = V.check_dtype(dtype)
    n = len(KARATE_CLUB)
    graph = CSRGraph.from_edge_index(_symmetric_edge_index(KARATE_EDGES, n), n)
    everything = np.ones(n, dtype=bool)
    ds = NodeDataset(
        name="karate",
        graph=graph,
        x=np.eye(n, dtype=dtype),
        y=np.array(KARATE_CLUB, dtype=np.int64),
        train_mask=everything.copy(),
        val_mask=everything.copy(),
        test_mask=everything.copy(),
        num_classes=2,
        task="node_classification",
    )
    return _normalized(ds) if normalize_features else ds


# ---------------------------------------------------------------------- npz reading
class _Npz:
    """Checked access to the arrays of one ``.npz`` file; errors name file and key."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"dataset file not found: {self.path}")
        try:
            with np.load(self.path, allow_pickle=False) as z:
                self.arrays = {k: z[k] for k in z.files}
        except ValueError as exc:  # object arrays need pickle: refuse them
            raise ValueError(f"{self.path}: cannot load without pickle ({exc})") from exc
        except (OSError, EOFError) as exc:
            raise ValueError(f"{self.path}: not a readable .npz file ({exc})") from exc

    def error(self, key, message):
        return ValueError(f"{self.path}: key {key!r} {message}")

    def has(self, key):
        return key in self.arrays

    def require(self, keys, fmt):
        missing = [k for k in keys if k not in self.arrays]
        if missing:
            raise ValueError(
                f"{self.path}: missing key(s) {missing} for the {fmt} format; found {sorted(self.arrays)}"
            )

    def ints(self, key, shape, low=None, high=None):
        """Integer array of ``shape`` (None = any size) with values in [low, high)."""
        arr = self.arrays[key]
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise self.error(key, f"must be an integer array, got dtype {arr.dtype}")
        self._shape(key, arr, shape)
        arr = arr.astype(np.int64)
        if arr.size and low is not None and arr.min() < low:
            raise self.error(key, f"must be >= {low}, found {arr.min()}")
        if arr.size and high is not None and arr.max() >= high:
            raise self.error(key, f"must be < {high}, found {arr.max()}")
        return arr

    def mask(self, key, n):
        arr = self.arrays[key]
        if arr.dtype != bool:
            raise self.error(key, f"must be a bool array, got dtype {arr.dtype}")
        self._shape(key, arr, (n,))
        return arr.copy()

    def _shape(self, key, arr, shape):
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise self.error(key, f"must have shape {want}, got {arr.shape}")


def _read_features(z, n, dtype):
    """The CSR feature matrix of a Planetoid file, fully validated."""
    z.require(PLANETOID_X_KEYS, "Planetoid feature")
    shape = z.ints("x_shape", (2,), low=0)
    if shape[0] != n:
        raise z.error("x_shape", f"must start with the number of nodes {n}, got {shape.tolist()}")
    f = int(shape[1])
    indptr = z.ints("x_indptr", (n + 1,), low=0)
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise z.error("x_indptr", "must start at 0 and be non-decreasing")
    nnz = int(indptr[-1])
    indices = z.ints("x_indices", (nnz,), low=0, high=f)
    data = z.arrays["x_data"]
    if not np.issubdtype(data.dtype, np.floating) and not np.issubdtype(data.dtype, np.integer):
        raise z.error("x_data", f"must be a numeric array, got dtype {data.dtype}")
    z._shape("x_data", data, (nnz,))
    if not np.all(np.isfinite(data)):
        raise z.error("x_data", "must be finite, but contains NaN or inf")
    x = sp.csr_array((data.astype(dtype), indices, indptr), shape=(n, f))
    x.sum_duplicates()  # canonical CSR: sorted column indices, no repeats
    return x


def row_normalize(x):
    """Row-normalise non-negative features exactly as PyG's ``NormalizeFeatures``.

    PyG shifts by the global minimum (0 for sparse non-negative data) and
    divides each row by ``max(row_sum, 1)``: rows summing to 0 stay 0, and
    rows summing to less than 1 are left unscaled. Binary bag-of-words
    features (Cora, CiteSeer) therefore become rows summing to one.
    Returns a new array; ``x`` is not modified.
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


def load_planetoid(path, dtype=np.float32, normalize_features=False, synthetic_features=None, seed=0):
    """Load a Planetoid citation graph (``cora.npz``, ``citeseer.npz``, ...).

    Parameters
    ----------
    path : str or path-like
        A ``.npz`` file in the Planetoid format of ``data/README.md``.
    dtype : numpy.float32 or numpy.float64, default float32
    normalize_features : bool, default False
        Row-normalise as PyG's ``NormalizeFeatures`` (see
        `row_normalize`); raw features are returned otherwise.
    synthetic_features : int, optional
        Replace the features by a dense ``(N, synthetic_features)`` standard
        normal matrix drawn with ``seed``. For **timing only** (e.g.
        ``pubmed_structure.npz``, which has no features); without it a file
        without features raises ValueError.
    seed : int, default 0
        Seed of the synthetic features.

    Returns
    -------
    NodeDataset
        ``x`` is a ``scipy.sparse.csr_array`` (dense for synthetic features),
        ``num_classes = y.max() + 1``.
    """
    dtype = V.check_dtype(dtype)
    z = _Npz(path)
    z.require(PLANETOID_KEYS, "Planetoid")
    # The node count comes from x_shape when the file has it, so a short y is
    # reported as such rather than as an out-of-range edge.
    n = int(z.ints("x_shape", (2,), low=0)[0]) if z.has("x_shape") else None
    y = z.ints("y", (n,), low=0)
    n = y.size
    if n == 0:
        raise z.error("y", "must hold at least one node, got an empty array")
    edge_index = z.ints("edge_index", (2, None), low=0, high=n)
    masks = [z.mask(k, n) for k in ("train_mask", "val_mask", "test_mask")]
    if synthetic_features is not None:
        f = V.check_int(synthetic_features, "synthetic_features", minimum=1)
        x = np.random.default_rng(seed).standard_normal((n, f)).astype(dtype)
    elif not z.has("x_data") and z.has("features_available"):
        raise ValueError(
            f"{z.path}: the file has no node features (features_available=False); "
            "pass synthetic_features=<int> to time it with random features"
        )
    else:
        x = _read_features(z, n, dtype)
    if normalize_features:
        x = row_normalize(x)
    name = Path(z.path).stem
    return NodeDataset(
        name=name,
        graph=CSRGraph.from_edge_index(edge_index, n),
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_classes=int(y.max()) + 1,
        task="node_classification",
    )


def load_tu(path, dtype=np.float32, normalize_features=False):
    """Load a TU Dortmund graph-classification dataset (``mutag.npz``).

    Node features are the one-hot ``node_labels`` (one column per label
    value ``0..node_labels.max()``); without ``node_labels`` every node gets
    a single constant feature 1. ``edge_labels`` are not used.
    ``normalize_features`` row-normalises each graph's features as PyG's
    ``NormalizeFeatures`` would (a no-op for one-hot rows).

    Returns
    -------
    GraphDataset
        ``task="graph_classification"``; ``num_classes`` is
        ``len(graph_label_values)`` when the file has it, else
        ``graph_labels.max() + 1``.
    """
    dtype = V.check_dtype(dtype)
    z = _Npz(path)
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
    node_ptr = np.searchsorted(gi, np.arange(num_graphs + 1))
    edge_graph = gi[ei[1]]
    order = np.argsort(edge_graph, kind="stable")
    edge_ptr = np.searchsorted(edge_graph[order], np.arange(num_graphs + 1))
    ei = ei[:, order]
    graphs, xs = [], []
    for g in range(num_graphs):
        lo, hi = node_ptr[g], node_ptr[g + 1]
        local = ei[:, edge_ptr[g] : edge_ptr[g + 1]] - lo
        graphs.append(CSRGraph.from_edge_index(local, int(hi - lo)))
        xs.append(x_all[lo:hi].copy())
    ds = GraphDataset(
        name=Path(z.path).stem,
        graphs=graphs,
        xs=xs,
        y=labels,
        num_classes=num_classes,
        task="graph_classification",
    )
    return _normalized(ds) if normalize_features else ds


def _normalized(ds):
    """A copy of ``ds`` with row-normalised features (per graph for GraphDataset)."""
    if isinstance(ds, NodeDataset):
        return dataclasses.replace(ds, x=row_normalize(ds.x))
    return dataclasses.replace(ds, xs=[row_normalize(x) for x in ds.xs])


def load_dataset(path_or_name, dtype=np.float32, normalize_features=False, **kwargs):
    """Load a dataset by name or path.

    Parameters
    ----------
    path_or_name : str or path-like
        ``"karate"``: the embedded karate club. ``"csbm"`` or
        ``"traffic_scenes"``: the generator with its defaults and
        ``seed=0`` (override through ``kwargs``). Another bare name
        (``"cora"``, ``"mutag"``) is looked up as ``DATA_DIR/<name>.npz``.
        A ``.npz`` file is read as Planetoid when it has ``y`` and the masks,
        as TU when it has ``graph_indicator``.
    dtype : numpy.float32 or numpy.float64, default float32
    normalize_features : bool, default False
        Row-normalise the features as PyG's ``NormalizeFeatures``.
    **kwargs
        Passed to the loader or generator.

    Returns
    -------
    NodeDataset or GraphDataset
    """
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"path_or_name must be a str or path, got {type(path_or_name).__name__}")
    text = os.fspath(path_or_name)
    if text == "karate":
        return load_karate(dtype=dtype, normalize_features=normalize_features, **kwargs)
    if text in ("csbm", "traffic_scenes"):
        make = make_csbm if text == "csbm" else make_traffic_scenes
        ds = make(dtype=dtype, **{"seed": 0, **kwargs})
        return _normalized(ds) if normalize_features else ds
    path = Path(text)
    if path.suffix != ".npz" and not path.exists():
        candidate = DATA_DIR / f"{text}.npz"
        if not candidate.is_file():
            raise ValueError(
                "path_or_name must be 'karate', 'csbm', 'traffic_scenes', a dataset name in "
                f"{DATA_DIR} or a .npz path, got {text!r}"
            )
        path = candidate
    keys = set(_Npz(path).arrays)
    opts = dict(dtype=dtype, normalize_features=normalize_features, **kwargs)
    if set(PLANETOID_KEYS) <= keys:
        return load_planetoid(path, **opts)
    if "graph_indicator" in keys:
        return load_tu(path, **opts)
    raise ValueError(
        f"{path}: unknown dataset format; expected Planetoid keys {list(PLANETOID_KEYS)} "
        f"(+ {list(PLANETOID_X_KEYS)}) or TU keys {list(TU_KEYS)}, found {sorted(keys)}"
    )


# ---------------------------------------------------------------------- writing
def write_planetoid_npz(path, dataset, source=""):
    """Write a NodeDataset in the Planetoid ``.npz`` format, atomically.

    Features are stored as CSR (dense features are converted), edges as the
    coalesced ``edge_index`` sorted by (src, dst). The file is written to a
    temporary file in the same folder and then moved into place.
    """
    if not isinstance(dataset, NodeDataset) or dataset.task != "node_classification":
        raise TypeError("dataset must be a node-classification NodeDataset")
    n = dataset.num_nodes
    x = sp.csr_array(dataset.x, dtype=np.float32)
    x.sort_indices()
    ei = dataset.graph.to_edge_index()
    keys = np.unique(ei[0] * n + ei[1])
    arrays = dict(
        x_data=x.data.astype(np.float32),
        x_indices=x.indices.astype(np.int64),
        x_indptr=x.indptr.astype(np.int64),
        x_shape=np.array(x.shape, dtype=np.int64),
        y=np.asarray(dataset.y, dtype=np.int64),
        edge_index=np.stack([keys // n, keys % n]).astype(np.int64),
        train_mask=dataset.train_mask,
        val_mask=dataset.val_mask,
        test_mask=dataset.test_mask,
        source=np.array(source),
    )
    atomic_write(path, lambda fh: np.savez_compressed(fh, **arrays))


# ---------------------------------------------------------------------- generators
def _random_split(rng, n, train_frac, val_frac):
    train_frac = V.check_float(train_frac, "train_frac", 0, 1, low_open=True)
    val_frac = V.check_float(val_frac, "val_frac", 0, 1)
    if train_frac + val_frac > 1:
        raise ValueError(f"train_frac + val_frac must be <= 1, got {train_frac + val_frac}")
    perm = rng.permutation(n)
    n_train, n_val = round(train_frac * n), round(val_frac * n)
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train : n_train + n_val]] = True
    masks[2][perm[n_train + n_val :]] = True
    return masks


def make_csbm(
    num_nodes=1000,
    num_classes=2,
    num_features=16,
    avg_degree=5.0,
    homophily=0.8,
    feature_signal=1.0,
    seed=None,
    train_frac=0.6,
    val_frac=0.2,
    dtype=np.float32,
):
    """Contextual stochastic block model: a random graph with class structure.

    Labels are balanced and random. ``round(num_nodes * avg_degree / 2)``
    distinct undirected edges are drawn: each picks a uniform endpoint ``i``
    and, with probability ``homophily``, a partner of the same class (else
    of another class), so ``homophily`` is the expected fraction of
    intra-class edges. Features are ``x_i = mu_{y_i} + N(0, I)`` where the
    class means ``mu_c`` are random directions of norm ``feature_signal``
    (0 = features carry no label information). The split is random:
    ``train_frac`` / ``val_frac`` / the rest.

    Returns
    -------
    NodeDataset
        Named ``"csbm"``, dense features, both edge directions stored.
    """
    dtype = V.check_dtype(dtype)
    n = V.check_int(num_nodes, "num_nodes", minimum=2)
    k = V.check_int(num_classes, "num_classes", minimum=2)
    f = V.check_int(num_features, "num_features", minimum=1)
    deg = V.check_float(avg_degree, "avg_degree", 0)
    h = V.check_float(homophily, "homophily", 0, 1)
    signal = V.check_float(feature_signal, "feature_signal", 0)
    if 2 * k > n:
        raise ValueError(f"num_nodes must be >= 2 * num_classes = {2 * k}, got {n}")
    # Keep the graph sparse: rejection of duplicates must not stall.
    if deg > (n // k - 1) / 2:
        raise ValueError(
            f"avg_degree must be <= (num_nodes / num_classes - 1) / 2 = {(n // k - 1) / 2}, got {deg}"
        )
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % k).astype(np.int64)
    order = np.argsort(y, kind="stable")  # nodes grouped by class
    class_ptr = np.searchsorted(y[order], np.arange(k + 1))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n) - class_ptr[y[order]]  # rank of a node inside its class
    size = np.diff(class_ptr)
    num_edges = round(n * deg / 2)
    keys = np.empty(0, dtype=np.int64)
    while keys.size < num_edges:
        m = num_edges - keys.size
        i = rng.integers(0, n, m)
        c = y[i]
        intra = rng.random(m) < h
        # same class, skipping i itself
        r = (rng.random(m) * (size[c] - 1)).astype(np.int64)
        r += r >= pos[i]
        j_intra = order[class_ptr[c] + r]
        # another class: index the grouped order with class c's block cut out
        r = (rng.random(m) * (n - size[c])).astype(np.int64)
        r += np.where(r >= class_ptr[c], size[c], 0)
        j_inter = order[r]
        j = np.where(intra, j_intra, j_inter)
        keys = np.unique(np.concatenate([keys, np.minimum(i, j) * n + np.maximum(i, j)]))
    ei = _symmetric_edge_index(np.stack([keys // n, keys % n], axis=1), n)
    means = rng.standard_normal((k, f))
    means *= signal / np.linalg.norm(means, axis=1, keepdims=True)
    x = (means[y] + rng.standard_normal((n, f))).astype(dtype)
    masks = _random_split(rng, n, train_frac, val_frac)
    return NodeDataset(
        name="csbm",
        graph=CSRGraph.from_edge_index(ei, n),
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_classes=k,
        task="node_classification",
    )


def traffic_target(pos, vel, radius):
    """Per-node target of :func:`make_traffic_scenes` for one scene.

    The local flow velocity around each vehicle,
    ``t_i = sum_j w_ij v_j / sum_j w_ij`` over the vehicles ``j`` with
    ``d_ij = |p_i - p_j| < radius`` (``i`` itself included), where
    ``w_ij = 1 - d_ij / radius``: closer vehicles count more and the vehicle
    itself has weight 1, so a vehicle alone keeps its own velocity.

    Parameters
    ----------
    pos, vel : ndarray, shape (n, 2)
    radius : float

    Returns
    -------
    ndarray of float64, shape (n, 2)
    """
    d = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
    w = np.where(d < radius, 1.0 - d / radius, 0.0)
    return (w @ vel) / w.sum(axis=1, keepdims=True)


def make_traffic_scenes(
    num_graphs=500,
    min_nodes=3,
    max_nodes=12,
    num_features=4,
    radius=0.2,
    seed=None,
    dtype=np.float32,
):
    """Vehicles in road scenes: node regression on small, very sparse graphs.

    Each scene has a uniform number of vehicles in ``[min_nodes, max_nodes]``
    at uniform positions in the unit square with standard normal 2-D
    velocities. Vehicle ``i`` receives an edge ``j -> i`` from every other
    vehicle within ``radius`` (so edges come in both directions; no self
    loops are stored, the layer adds them). With the
    default radius most vehicles have 0 to 2 neighbours: the regime where
    GATv2's target weights get little or no gradient.

    Features are ``[px, py, vx, vy]`` followed by ``num_features - 4``
    standard normal distractor columns. The target (2 columns, in the units of
    the velocities) is the distance-weighted mean of
    the velocities of the vehicle and its neighbours, see
    :func:`traffic_target`: it needs the neighbours' features, and the
    weights need both endpoints' positions.

    Returns
    -------
    GraphDataset
        ``task="node_regression"``, ``num_classes=0``; ``y[g]`` has shape
        ``(num_nodes_g, 2)`` and :meth:`GraphDataset.batch` stacks them.
    """
    dtype = V.check_dtype(dtype)
    num_graphs = V.check_int(num_graphs, "num_graphs", minimum=1)
    lo = V.check_int(min_nodes, "min_nodes", minimum=1)
    hi = V.check_int(max_nodes, "max_nodes", minimum=lo)
    f = V.check_int(num_features, "num_features", minimum=4)
    radius = V.check_float(radius, "radius", 0, low_open=True)
    rng = np.random.default_rng(seed)
    graphs, xs, ys = [], [], []
    for _ in range(num_graphs):
        n = int(rng.integers(lo, hi + 1))
        pos = rng.random((n, 2))
        vel = rng.standard_normal((n, 2))
        noise = rng.standard_normal((n, f - 4))
        d = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
        near = d < radius
        np.fill_diagonal(near, False)
        tgt, src = np.nonzero(near)  # row-major: grouped by target, sources ascending
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(tgt, minlength=n), out=indptr[1:])
        graphs.append(CSRGraph(indptr, src, n))
        xs.append(np.concatenate([pos, vel, noise], axis=1).astype(dtype))
        ys.append(traffic_target(pos, vel, radius).astype(dtype))
    return GraphDataset(
        name="traffic_scenes", graphs=graphs, xs=xs, y=ys, num_classes=0, task="node_regression"
    )
