"""Planetoid citation graphs (Cora, CiteSeer, PubMed) in the ``.npz`` format of ``docs/DATA.md``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .. import _validate as V
from ..graph import CSRGraph
from .datasets import NodeDataset, row_normalize
from .npz import NpzFile

__all__ = ["PLANETOID_KEYS", "PLANETOID_X_KEYS", "load_planetoid"]

PLANETOID_KEYS = ("y", "edge_index", "train_mask", "val_mask", "test_mask")
PLANETOID_X_KEYS = ("x_data", "x_indices", "x_indptr", "x_shape")


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
    z.check_shape("x_data", data, (nnz,))
    if not np.all(np.isfinite(data)):
        raise z.error("x_data", "must be finite, but contains NaN or inf")
    x = sp.csr_array((data.astype(dtype), indices, indptr), shape=(n, f))
    x.sum_duplicates()  # canonical CSR: sorted column indices, no repeats
    return x


def load_planetoid(path, dtype=np.float32, normalize_features=False, synthetic_features=None, seed=0):
    """Load a Planetoid citation graph (``cora.npz``, ``citeseer.npz``, ...).

    Parameters
    ----------
    path : str, path-like or NpzFile
        A ``.npz`` file in the Planetoid format of ``docs/DATA.md`` (or one
        already opened with :class:`~gatfast.data.npz.NpzFile`).
    dtype : numpy.float32 or numpy.float64, default float32
        Floating-point type of the features.
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
    z = NpzFile(path)
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
        preprocessing={"normalize_features": bool(normalize_features)},
    )
