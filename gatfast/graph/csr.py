"""Sparse graphs stored as CSR arrays **by target**.

Row ``i`` of the CSR structure lists the sources ``j`` whose messages node
``i`` aggregates, i.e. the edges ``j -> i``. This is the transpose of PyG's
``edge_index = [source; target]`` read row-wise, and it matches the paper's
convention that ``(i, j) in E`` is an edge from ``j`` to ``i``.

A graph may be **bipartite** (a block): ``num_dst`` target rows whose column
indices point into ``num_src`` sources, as a scipy matrix of shape
``(num_dst, num_src)``. A square graph has ``num_src == num_dst``.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from ..kernels.structure import SPAN_SAMPLE_EDGES, edge_span_mean
from . import convert
from .loops import LoopLayout, loop_layout, without_loops

__all__ = ["MAX_NODES", "CSRGraph"]

#: The largest node count a graph may have (int64 CSR arrays; a row pointer
#: of this many entries takes 16 GiB).
MAX_NODES = 2**31 - 1
_NO_LOOPS = "no loops"  # cached by without_self_loops for a graph that has none


class CSRGraph:
    """A directed graph in CSR order by target; square, or bipartite (a block).

    Parameters
    ----------
    indptr : array_like of int, shape (num_dst + 1,)
        Row pointer: the sources of target ``i`` are
        ``indices[indptr[i]:indptr[i + 1]]``. Must start at 0, be
        non-decreasing and end at ``len(indices)``.
    indices : array_like of int, shape (nnz,)
        Source node of every edge, in ``[0, num_src)``.
    num_nodes : int, optional
        Number of target nodes (rows); defaults to ``len(indptr) - 1`` and
        must agree with it.
    num_src : int, optional
        Number of source nodes, for a bipartite graph; defaults to the
        number of rows (a square graph).

    Notes
    -----
    The graph is immutable: its arrays are copies marked read-only and its
    attributes cannot be reassigned, so derived orders (self loops, the
    source-major order used by the backward pass) are computed once and
    reused, and kernels can trust the arrays.

    Examples
    --------
    Node 0 aggregates from nodes 1 and 2 (edges ``1 -> 0`` and ``2 -> 0``):

    >>> g = CSRGraph([0, 2, 2, 2], [1, 2])
    >>> g.in_degree().tolist()
    [2, 0, 0]

    A block of 2 targets reading from 4 sources:

    >>> b = CSRGraph([0, 3, 4], [0, 2, 3, 1], num_src=4)
    >>> b.shape
    (2, 4)
    """

    __slots__ = ("_indptr", "_indices", "_num_dst", "_num_src", "_cache")

    def __init__(self, indptr, indices, num_nodes=None, num_src=None):
        indptr = convert.as_index_array(indptr, "indptr")
        indices = convert.as_index_array(indices, "indices")
        if indptr.size == 0:
            raise ValueError("indptr must have length num_nodes + 1 >= 1, got an empty array")
        n = indptr.size - 1
        if num_nodes is not None and convert.check_count(num_nodes, "num_nodes", MAX_NODES) != n:
            raise ValueError(f"indptr must have length num_nodes + 1 = {int(num_nodes) + 1}, got {indptr.size}")
        n = convert.check_count(n, "num_nodes", MAX_NODES)
        m = n if num_src is None else convert.check_count(num_src, "num_src", MAX_NODES)
        if indptr[0] != 0:
            raise ValueError(f"indptr must start at 0, got indptr[0] = {indptr[0]}")
        steps = np.diff(indptr)
        if steps.size and steps.min() < 0:
            bad = int(np.flatnonzero(steps < 0)[0])
            raise ValueError(f"indptr must be non-decreasing, but indptr[{bad + 1}] < indptr[{bad}]")
        if indptr[-1] != indices.size:
            raise ValueError(f"indptr[-1] must equal len(indices) = {indices.size}, got {indptr[-1]}")
        if indices.size and (indices.min() < 0 or indices.max() >= m):
            bad = indices[(indices < 0) | (indices >= m)][0]
            what = "num_src" if num_src is not None else "num_nodes"
            raise ValueError(f"indices must lie in [0, {what}={m}), found {bad}")
        self._adopt(indptr.copy(), indices.copy(), n, m)

    @classmethod
    def _from_valid(cls, indptr, indices, num_dst, num_src):
        """Wrap int64 arrays one of gatfast's kernels has just built (valid, referenced nowhere else) without
        checks or copies: the sampler makes two graphs per batch, and those cost as much as sampling."""
        graph = object.__new__(cls)
        graph._adopt(indptr, indices, int(num_dst), int(num_src))
        return graph

    def _adopt(self, indptr, indices, num_dst, num_src):
        indptr.flags.writeable = False
        indices.flags.writeable = False
        for name, value in zip(self.__slots__, (indptr, indices, num_dst, num_src, {})):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"CSRGraph is immutable: cannot set {name!r} (build a new graph instead)")

    def __delattr__(self, name):
        raise AttributeError(f"CSRGraph is immutable: cannot delete {name!r}")

    def __reduce__(self):
        return (CSRGraph, (self._indptr, self._indices, self._num_dst, self._num_src))

    def __copy__(self):
        return self  # immutable: a copy would be equal in every way, and lose the cached orders

    def __deepcopy__(self, memo):
        return self

    # ------------------------------------------------------------------ arrays and sizes
    @property
    def indptr(self):
        """Row pointer, int64, read-only, shape (num_dst + 1,)."""
        return self._indptr

    @property
    def indices(self):
        """Source of every edge, int64, read-only, shape (nnz,)."""
        return self._indices

    @property
    def num_nodes(self):
        """Number of target nodes (rows); for a square graph, the number of nodes."""
        return self._num_dst

    @property
    def num_dst(self):
        """Number of target nodes (rows)."""
        return self._num_dst

    @property
    def num_src(self):
        """Number of source nodes (the range of ``indices``)."""
        return self._num_src

    @property
    def shape(self):
        """``(num_dst, num_src)``, the shape of the adjacency matrix."""
        return (self._num_dst, self._num_src)

    @property
    def nnz(self):
        """Number of stored edges."""
        return int(self._indices.size)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edge_index(cls, edge_index, num_nodes=None, *, size=None, edge_attr=None):
        """Build from PyG's ``edge_index`` (row 0 = sources, row 1 = targets).

        Parameters
        ----------
        edge_index : array_like of int, shape (2, E)
            Edge ``k`` goes from ``edge_index[0, k]`` (source) to ``edge_index[1, k]`` (target).
        num_nodes : int, optional
            Number of nodes of a square graph. Default: ``edge_index.max() + 1`` (0 for no edges),
            which must not exceed ``16 * E + 65536``: a larger inferred count would allocate far
            beyond what the edges justify (a stray id of 3·10⁹ asks for 24 GB), so pass
            ``num_nodes`` explicitly for graphs that really are that sparse.
        size : (int, int), optional
            ``(num_src, num_dst)`` of a bipartite graph, as PyG's ``size``.
            Exclusive with ``num_nodes``.
        edge_attr : array_like, shape (E, D) or (E,), optional
            Attributes of the edges in ``edge_index`` order.

        Returns
        -------
        graph : CSRGraph
        edge_attr : ndarray, shape (E, D)
            Only when ``edge_attr`` is given: the attributes permuted into
            the graph's CSR order (what ``GATv2Layer.forward`` expects).

        Notes
        -----
        Edges keep their relative order within each target row (a stable
        sort), and duplicates are kept, as PyG does.
        """
        indptr, indices, n_dst, n_src, order = convert.from_edge_index(edge_index, num_nodes, size, MAX_NODES)
        graph = cls(indptr, indices, n_dst, n_src if size is not None else None)
        if edge_attr is None:
            return graph
        return graph, convert.permute_edge_attr(edge_attr, order, len(order))

    @classmethod
    def from_scipy(cls, A, *, edge_attr=None, rows=None):
        """Build from a scipy.sparse matrix or array.

        Parameters
        ----------
        A : scipy.sparse matrix or array, shape (num_dst, num_src)
            With ``rows="targets"``, ``A[i, j] != 0`` means node ``i``
            aggregates from node ``j`` (the edge ``j -> i``). A rectangular
            matrix is a bipartite graph.
        edge_attr : array_like, shape (nnz, D) or (nnz,), optional
            Attributes of the stored entries of ``A``, in the order of
            ``A.tocoo()`` (for a COO matrix: ``A.row[k], A.col[k]``). With
            attributes every stored entry is one edge: duplicates stay
            separate edges and explicit zeros are kept.
        rows : {"targets", "sources"}, optional
            What the rows of ``A`` are. ``"targets"`` (what omitting it
            means) is gatfast's convention; ``"sources"`` is for matrices
            ``A[src, dst]`` such as PyG's ``to_scipy_sparse_matrix(edge_index)``
            (the matrix is then transposed), which the default would
            silently read as the reversed graph.

        Returns
        -------
        graph : CSRGraph
        edge_attr : ndarray, shape (nnz, D)
            Only when ``edge_attr`` is given: the attributes in CSR order.

        Warns
        -----
        UserWarning
            When ``rows`` is not given and ``A`` is square with a pattern that
            is not symmetric, where the direction matters (the check is
            O(nnz), ~0.3 s for 4 M edges; ``rows=`` skips it). Symmetric and
            rectangular matrices do not warn, nor does a matrix given to
            ``forward`` or ``fit`` (read as ``rows="targets"``, as documented).

        Notes
        -----
        Without attributes rows come out canonical: columns sorted,
        duplicate entries summed, and entries that are zero after summing
        dropped. The input is never modified.

        Examples
        --------
        >>> A = sp.csr_array(([1.0, 1.0], ([0, 0], [1, 2])), shape=(3, 3))  # A[0, 1], A[0, 2]
        >>> CSRGraph.from_scipy(A, rows="sources").in_degree().tolist()    # 0 -> 1, 0 -> 2
        [0, 1, 1]
        """
        if rows is None and convert.direction_is_ambiguous(A, keep_zeros=edge_attr is not None):
            warnings.warn(convert.ROWS_WARNING, UserWarning, stacklevel=2)
        indptr, indices, shape, order = convert.from_scipy(A, rows or "targets", keep_entries=edge_attr is not None)
        graph = cls(indptr, indices, shape[0], shape[1] if shape[0] != shape[1] else None)
        if edge_attr is None:
            return graph
        return graph, convert.permute_edge_attr(edge_attr, order, len(order))

    @classmethod
    def from_pyg(cls, data, *, edge_attr=None):
        """Build from a PyTorch Geometric ``Data`` object (torch is not imported).

        Parameters
        ----------
        data : torch_geometric.data.Data
            Or any object with ``edge_index`` ((2, E), row 0 = sources),
            ``num_nodes`` and optionally ``edge_attr`` ((E, D), edge order).
        edge_attr : bool, optional
            Also return the edge attributes (default: iff ``data.edge_attr``
            is not None; True without them is a ValueError).

        Returns
        -------
        graph : CSRGraph
            The square graph of ``data.num_nodes`` nodes.
        edge_attr : ndarray, shape (E, D)
            With attributes: ``data.edge_attr`` in the graph's CSR order.

        Notes
        -----
        Node features are not part of the graph: take ``x = data.x.numpy()``
        (after ``.detach().cpu()`` if needed); rows are node ids, so they
        need no permutation.
        """
        edge_index, num_nodes, attr = convert.from_pyg_data(data, edge_attr)
        return cls.from_edge_index(edge_index, num_nodes, edge_attr=attr)

    def to_scipy(self, dtype=np.float32):
        """Return the adjacency as a ``scipy.sparse.csr_array`` of ones, shape ``(num_dst, num_src)``.

        ``A[i, j] == 1`` for every edge ``j -> i``; duplicate edges add up.
        """
        data = np.ones(self.nnz, dtype=dtype)
        return sp.csr_array((data, self._indices.copy(), self._indptr.copy()), shape=self.shape)

    def to_edge_index(self):
        """Return PyG's ``edge_index`` (2, nnz) in this graph's CSR order."""
        return np.stack([self._indices, self.targets()]).astype(np.int64)

    # ------------------------------------------------------------------ derived data
    def in_degree(self):
        """Number of in-edges per target node (the row lengths)."""
        return np.diff(self._indptr)

    def targets(self):
        """Target (row) of every edge, shape (nnz,), in CSR order (read-only, cached)."""
        t = self._cache.get("targets")
        if t is None:
            t = np.repeat(np.arange(self._num_dst, dtype=np.int64), np.diff(self._indptr))
            t.flags.writeable = False
            self._cache["targets"] = t
        return t

    def source_order(self):
        """The source-major order of the edges, built once and cached.

        Returns
        -------
        src_indptr : ndarray of int64, shape (num_src + 1,)
            Edges leaving node ``j`` are ``src_edges[src_indptr[j]:src_indptr[j+1]]``.
        src_edges : ndarray of int64, shape (nnz,)
            Edge ids (positions in CSR order), sorted by source and, within
            a source, by edge id. This fixed order keeps the backward sums
            independent of the thread count.
        """
        cached = self._cache.get("source_order")
        if cached is None:
            cached = self._cache["source_order"] = convert.source_major(self._indices, self._num_src)
        return cached

    def mean_edge_span(self):
        """Mean ``|j - i|`` over the edges ``j -> i`` (cached; the kernels choose their prefetches by it).

        Returns
        -------
        float
            0.0 without edges; over every edge up to ``SPAN_SAMPLE_EDGES``, else that many spread evenly.
        """
        if "mean_edge_span" not in self._cache:
            self._cache["mean_edge_span"] = edge_span_mean(self._indptr, self._indices, SPAN_SAMPLE_EDGES)
        return self._cache["mean_edge_span"]

    def has_self_loops(self):
        """True if any edge joins a node to itself (source index == target index)."""
        return bool(np.any(self._indices == self.targets()))

    def loop_layout(self):
        """How :meth:`with_self_loops` maps this graph's edges (cached; see :class:`LoopLayout`)."""
        layout = self._cache.get("loops")
        if layout is None:
            layout = self._cache["loops"] = loop_layout(self)
        elif layout.graph is None:  # a graph with its loops already maps onto itself
            layout = LoopLayout(self, layout.kept, layout.loop_slots)
        return layout

    def with_self_loops(self):
        """Remove existing self loops and add one loop per node (PyG's rule).

        Same semantics as PyG's ``remove_self_loops`` followed by
        ``add_self_loops``: each row keeps its other edges in order and gets
        its loop appended at the end. In a bipartite graph target ``i`` is
        paired with source ``i`` for ``i < min(num_src, num_dst)`` (sampled
        blocks list their targets first among the sources, so every target
        gets its loop); targets beyond that get none. The result is cached.
        """
        layout = self._cache.get("loops")  # a graph with its loops in place is its own result
        return self if layout is not None and layout.graph is None else self.loop_layout().graph

    def without_self_loops(self):
        """Return the graph with every self loop removed (row order kept; cached)."""
        cached = self._cache.get("no_loops")
        if cached is None:
            keep = self._indices != self.targets()
            if keep.all():
                cached = _NO_LOOPS  # not self: a cycle would outlive the last reference to it
            else:
                indptr, indices = without_loops(self, keep)
                cached = CSRGraph(indptr, indices, self._num_dst, self._num_src if self.is_bipartite() else None)
            self._cache["no_loops"] = cached
        return self if cached is _NO_LOOPS else cached

    def is_bipartite(self):
        """True if sources and targets are counted separately (``num_src != num_dst``)."""
        return self._num_src != self._num_dst

    def __repr__(self):
        if self.is_bipartite():
            return f"CSRGraph(num_dst={self._num_dst}, num_src={self._num_src}, nnz={self.nnz})"
        return f"CSRGraph(num_nodes={self._num_dst}, nnz={self.nnz})"

    def __eq__(self, other):
        if not isinstance(other, CSRGraph):
            return NotImplemented
        return (
            self.shape == other.shape
            and np.array_equal(self._indptr, other._indptr)
            and np.array_equal(self._indices, other._indices)
        )

    __hash__ = None
