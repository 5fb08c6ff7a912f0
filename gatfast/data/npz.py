"""Checked reading of pickle-free ``.npz`` files, and atomic writing."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from .._io import atomic_write
from .._npz import NpzReader
from .datasets import NodeDataset

__all__ = ["NpzFile", "write_planetoid_npz"]


class NpzFile:
    """Checked access to the arrays of one ``.npz`` file; errors name file and key.

    Every member is read once, pickle-free and within the size limits of
    :class:`gatfast._io.NpzReader` (a damaged, truncated or hostile file is
    a ValueError naming it). Loaders accept an open ``NpzFile`` in place of
    a path, so :func:`gatfast.data.load_dataset` reads a file only once.
    """

    def __init__(self, path):
        if isinstance(path, NpzFile):
            self.path, self.arrays = path.path, path.arrays
            return
        self.path = os.fspath(path)
        with NpzReader(self.path, what="dataset file") as reader:
            self.arrays = reader.read_all()

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
        self.check_shape(key, arr, shape)
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
        self.check_shape(key, arr, (n,))
        return arr.copy()

    def check_shape(self, key, arr, shape):
        """Raise ValueError naming the file and key unless ``arr`` has ``shape`` (None = any size)."""
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise self.error(key, f"must have shape {want}, got {arr.shape}")


def write_planetoid_npz(path, dataset, source=""):
    """Write a NodeDataset in the Planetoid ``.npz`` format, atomically.

    Features are stored as CSR (dense features are converted), edges as the
    coalesced ``edge_index`` sorted by (src, dst). The file is written to a
    temporary file in the same folder and then moved into place.

    Parameters
    ----------
    path : str or path-like
        The file to write; its directory must exist.
    dataset : NodeDataset
        A node-classification dataset.
    source : str, default ""
        Where the data came from, stored as the ``source`` entry.
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
