"""Sparse graphs stored as CSR arrays **by target**.

Row ``i`` of the CSR structure lists the sources ``j`` whose messages node
``i`` aggregates, i.e. the edges ``j -> i``. This is the transpose of PyG's
``edge_index = [source; target]`` read row-wise, and it matches the paper's
convention that ``(i, j) in E`` is an edge from ``j`` to ``i``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["CSRGraph"]


def _as_index_array(value, name):
    """Return ``value`` as a 1-D int64 array or raise a clear error."""
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


class CSRGraph:
    """A directed graph in CSR order by target.

    Parameters
    ----------
    indptr : array_like of int, shape (num_nodes + 1,)
        Row pointer: the sources of node ``i`` are
        ``indices[indptr[i]:indptr[i + 1]]``. Must start at 0, be
        non-decreasing and end at ``len(indices)``.
    indices : array_like of int, shape (nnz,)
        Source node of every edge, in ``[0, num_nodes)``.
    num_nodes : int, optional
        Number of nodes; defaults to ``len(indptr) - 1`` and must agree with it.

    Notes
    -----
    The graph is immutable: the arrays are copied and marked read-only, so
    derived orders (self loops, the source-major order used by the backward
    pass) are computed once and reused.

    Examples
    --------
    Node 0 aggregates from nodes 1 and 2 (edges ``1 -> 0`` and ``2 -> 0``):

    >>> g = CSRGraph([0, 2, 2, 2], [1, 2])
    >>> g.in_degree().tolist()
    [2, 0, 0]
    """

    __slots__ = ("indptr", "indices", "num_nodes", "_source_order", "_with_loops", "_targets")

    def __init__(self, indptr, indices, num_nodes=None):
        indptr = _as_index_array(indptr, "indptr")
        indices = _as_index_array(indices, "indices")
        if indptr.size == 0:
            raise ValueError("indptr must have length num_nodes + 1 >= 1, got an empty array")
        n = indptr.size - 1
        if num_nodes is not None:
            if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)):
                raise TypeError(f"num_nodes must be an int, got {type(num_nodes).__name__}")
            if int(num_nodes) != n:
                raise ValueError(
                    f"indptr must have length num_nodes + 1 = {int(num_nodes) + 1}, got {indptr.size}"
                )
        if indptr[0] != 0:
            raise ValueError(f"indptr must start at 0, got indptr[0] = {indptr[0]}")
        if np.any(np.diff(indptr) < 0):
            bad = int(np.flatnonzero(np.diff(indptr) < 0)[0])
            raise ValueError(f"indptr must be non-decreasing, but indptr[{bad + 1}] < indptr[{bad}]")
        if indptr[-1] != indices.size:
            raise ValueError(f"indptr[-1] must equal len(indices) = {indices.size}, got {indptr[-1]}")
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            bad = indices[(indices < 0) | (indices >= n)][0]
            raise ValueError(f"indices must lie in [0, num_nodes={n}), found {bad}")
        indptr = indptr.copy()
        indices = indices.copy()
        indptr.flags.writeable = False
        indices.flags.writeable = False
        self.indptr = indptr
        self.indices = indices
        self.num_nodes = n
        self._source_order = None
        self._with_loops = None
        self._targets = None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edge_index(cls, edge_index, num_nodes=None):
        """Build from PyG's ``edge_index`` (row 0 = sources, row 1 = targets).

        Parameters
        ----------
        edge_index : array_like of int, shape (2, E)
        num_nodes : int, optional
            Defaults to ``edge_index.max() + 1`` (0 for no edges).

        Edges keep their relative order within each target row (a stable
        sort), and duplicates are kept, as PyG does.
        """
        ei = np.asarray(edge_index)
        if ei.dtype == bool or not np.issubdtype(ei.dtype, np.integer):
            raise TypeError(f"edge_index must be an integer array, got dtype {ei.dtype}")
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {ei.shape}")
        ei = ei.astype(np.int64, copy=False)
        if ei.size and ei.min() < 0:
            raise ValueError(f"edge_index must be non-negative, found {ei.min()}")
        inferred = int(ei.max()) + 1 if ei.size else 0
        if num_nodes is None:
            num_nodes = inferred
        else:
            if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)):
                raise TypeError(f"num_nodes must be an int, got {type(num_nodes).__name__}")
            if num_nodes < 0:
                raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
            if inferred > num_nodes:
                raise ValueError(f"edge_index refers to node {inferred - 1} but num_nodes is {num_nodes}")
        src, dst = ei[0], ei[1]
        order = np.argsort(dst, kind="stable")
        indptr = np.zeros(int(num_nodes) + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=int(num_nodes)), out=indptr[1:])
        return cls(indptr, src[order], int(num_nodes))

    @classmethod
    def from_scipy(cls, A):
        """Build from a square scipy.sparse matrix or array.

        ``A[i, j] != 0`` means node ``i`` aggregates from node ``j`` (the
        edge ``j -> i``). Rows come out canonical: columns sorted, duplicate
        entries summed, and entries that are zero after summing dropped. The
        input is not modified.
        """
        if not sp.issparse(A):
            raise TypeError(f"A must be a scipy.sparse matrix or array, got {type(A).__name__}")
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"A must be square (num_nodes, num_nodes), got shape {A.shape}")
        # copy: sum_duplicates/eliminate_zeros work in place on shared arrays
        csr = sp.csr_array(A, copy=True)
        csr.sum_duplicates()
        csr.eliminate_zeros()
        return cls(csr.indptr, csr.indices, A.shape[0])

    def to_scipy(self, dtype=np.float32):
        """Return the adjacency as a ``scipy.sparse.csr_array`` of ones.

        ``A[i, j] == 1`` for every edge ``j -> i``; duplicate edges add up.
        """
        data = np.ones(self.nnz, dtype=dtype)
        return sp.csr_array(
            (data, self.indices.copy(), self.indptr.copy()), shape=(self.num_nodes, self.num_nodes)
        )

    def to_edge_index(self):
        """Return PyG's ``edge_index`` (2, nnz) in this graph's CSR order."""
        return np.stack([self.indices, self.targets()]).astype(np.int64)

    # ------------------------------------------------------------------ derived data
    @property
    def nnz(self):
        """Number of stored edges."""
        return int(self.indices.size)

    def in_degree(self):
        """Number of in-edges per node (the row lengths)."""
        return np.diff(self.indptr)

    def targets(self):
        """Target (row) of every edge, shape (nnz,), in CSR order."""
        if self._targets is None:
            t = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))
            t.flags.writeable = False
            self._targets = t
        return self._targets

    def source_order(self):
        """The source-major order of the edges, built once and cached.

        Returns
        -------
        src_indptr : ndarray of int64, shape (num_nodes + 1,)
            Edges leaving node ``j`` are ``src_edges[src_indptr[j]:src_indptr[j+1]]``.
        src_edges : ndarray of int64, shape (nnz,)
            Edge ids (positions in CSR order), sorted by source and, within
            a source, by edge id. This fixed order keeps the backward sums
            independent of the thread count.
        """
        if self._source_order is None:
            edges = np.argsort(self.indices, kind="stable").astype(np.int64)
            src_indptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.indices, minlength=self.num_nodes), out=src_indptr[1:])
            edges.flags.writeable = False
            src_indptr.flags.writeable = False
            self._source_order = (src_indptr, edges)
        return self._source_order

    def has_self_loops(self):
        """True if any edge is a self loop."""
        return bool(np.any(self.indices == self.targets()))

    def with_self_loops(self):
        """Remove existing self loops and add exactly one per node.

        Same semantics as PyG's ``remove_self_loops`` followed by
        ``add_self_loops``: each row keeps its other edges in order and gets
        its loop appended at the end. The result is cached.
        """
        if self._with_loops is None:
            n = self.num_nodes
            t = self.targets()
            keep = self.indices != t
            kept_per_row = np.bincount(t[keep], minlength=n)
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(kept_per_row + 1, out=indptr[1:])
            indices = np.empty(indptr[-1], dtype=np.int64)
            loop_pos = indptr[1:] - 1
            is_loop_slot = np.zeros(indptr[-1], dtype=bool)
            is_loop_slot[loop_pos] = True
            indices[~is_loop_slot] = self.indices[keep]
            indices[loop_pos] = np.arange(n)
            g = CSRGraph(indptr, indices, n)
            g._with_loops = g
            self._with_loops = g
        return self._with_loops

    def without_self_loops(self):
        """Return the graph with every self loop removed (row order kept)."""
        t = self.targets()
        keep = self.indices != t
        if keep.all():
            return self
        counts = np.bincount(t[keep], minlength=self.num_nodes)
        indptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return CSRGraph(indptr, self.indices[keep], self.num_nodes)

    def __repr__(self):
        return f"CSRGraph(num_nodes={self.num_nodes}, nnz={self.nnz})"

    def __eq__(self, other):
        if not isinstance(other, CSRGraph):
            return NotImplemented
        return (
            self.num_nodes == other.num_nodes
            and np.array_equal(self.indptr, other.indptr)
            and np.array_equal(self.indices, other.indices)
        )

    __hash__ = None
