"""From PyG's ``edge_index`` and ``Data``, and from scipy matrices, to CSR-by-target arrays.

Pure functions returning arrays; :class:`~gatfast.graph.CSRGraph` wraps them.
Nothing here imports torch: tensors are read through their ``numpy()``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..kernels.structure import source_major as _source_major

__all__ = [
    "ROWS_WARNING", "as_index_array", "check_count", "direction_is_ambiguous", "from_edge_index", "from_pyg_data", "from_scipy", "permute_edge_attr",
    "source_major",
]


def as_index_array(value, name):
    """Return ``value`` as a 1-D int64 array or raise a clear error."""
    if sp.issparse(value):
        raise TypeError(f"{name} must be a 1-D integer array, got a scipy.sparse matrix")
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def check_count(value, name, limit):
    """``value`` as an int in ``[0, limit]``, or a TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < 0 or value > limit:
        raise ValueError(f"{name} must be in [0, {limit}], got {value}")
    return value


def from_edge_index(edge_index, num_nodes, size, limit):
    """``(indptr, indices, num_dst, num_src, order)``; ``order`` maps CSR positions to edge_index columns."""
    if sp.issparse(edge_index):
        raise TypeError("edge_index must be an integer array of shape (2, E), got a scipy.sparse matrix "
                        "(use CSRGraph.from_scipy)")
    ei = np.asarray(edge_index)
    if ei.dtype == bool or not np.issubdtype(ei.dtype, np.integer):
        if ei.size == 0 and ei.dtype.kind == "f":
            ei = ei.astype(np.int64)
        else:
            raise TypeError(f"edge_index must be an integer array, got dtype {ei.dtype}")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {ei.shape}")
    ei = ei.astype(np.int64, copy=False)
    num_edges = ei.shape[1]
    if num_edges and ei.min() < 0:
        raise ValueError(f"edge_index must be non-negative, found {ei.min()}")
    src, dst = ei[0], ei[1]
    if size is not None:
        if num_nodes is not None:
            raise ValueError("pass either num_nodes (a square graph) or size (a bipartite one), not both")
        if not isinstance(size, (tuple, list)) or len(size) != 2:
            raise TypeError(f"size must be a pair (num_src, num_dst), got {size!r}")
        n_src = check_count(size[0], "size[0] (num_src)", limit)
        n_dst = check_count(size[1], "size[1] (num_dst)", limit)
        if num_edges and src.max() >= n_src:
            raise ValueError(f"edge_index has source {src.max()} but size[0] (num_src) is {n_src}")
        if num_edges and dst.max() >= n_dst:
            raise ValueError(f"edge_index has target {dst.max()} but size[1] (num_dst) is {n_dst}")
    else:
        inferred = int(ei.max()) + 1 if num_edges else 0
        if num_nodes is None:
            bound = 16 * num_edges + 65536
            if inferred > bound:
                raise ValueError(
                    f"edge_index refers to node {inferred - 1} but has only {num_edges} edges: pass num_nodes "
                    f"explicitly if the graph really has {inferred} nodes (inferred counts above 16 x edges + "
                    "65536 are refused, since they would allocate far beyond what the edges need)"
                )
            num_nodes = inferred
        num_nodes = check_count(num_nodes, "num_nodes", limit)
        if inferred > num_nodes:
            raise ValueError(f"edge_index refers to node {inferred - 1} but num_nodes is {num_nodes}")
        n_src = n_dst = num_nodes
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n_dst), out=indptr[1:])
    return indptr, src[order], n_dst, n_src, order


#: The warning of ``CSRGraph.from_scipy`` for a square matrix that is not
#: symmetric, read without an explicit ``rows=``.
ROWS_WARNING = (
    "CSRGraph.from_scipy: A is not symmetric and rows= was not given, so A[i, j] != 0 is read as the edge "
    "j -> i (rows='targets'); a matrix from PyG's to_scipy_sparse_matrix(edge_index) is A[src, dst] and needs "
    "rows='sources'. Pass rows='targets' or rows='sources' to say which (and silence this warning)."
)


def direction_is_ambiguous(A, keep_zeros=False):
    """Whether reading ``A``'s rows as targets or as sources gives different graphs.

    Parameters
    ----------
    A : object
        Anything; only a square scipy.sparse matrix can be ambiguous.
    keep_zeros : bool, default False
        Count explicit zeros as entries (as ``from_scipy`` does with edge
        attributes); otherwise duplicates are summed and zeros dropped.

    Returns
    -------
    bool
        True iff ``A`` is a square scipy matrix whose sparsity pattern is
        not symmetric (values are ignored). O(nnz + n).
    """
    if not sp.issparse(A) or A.ndim != 2 or A.shape[0] != A.shape[1]:
        return False
    pattern = sp.csr_array(A, copy=True)
    if keep_zeros:
        pattern.data = np.ones_like(pattern.data)
    pattern.sum_duplicates()  # sorted columns, one entry per (row, column)
    pattern.eliminate_zeros()
    n = pattern.shape[0]
    if not np.array_equal(np.diff(pattern.indptr), np.bincount(pattern.indices, minlength=n)):
        return True  # in- and out-degrees differ: no need to compare the edges
    index = np.int32 if max(n, pattern.nnz) < 2**31 else np.int64  # the transpose runs 3x faster on int32/int8
    ones = sp.csr_array((np.ones(pattern.nnz, np.int8), pattern.indices.astype(index), pattern.indptr.astype(index)),
                        shape=pattern.shape)
    transposed = ones.T.tocsr()  # a counting sort: sorted columns, O(nnz + n)
    return not np.array_equal(transposed.indices, ones.indices)  # equal row lengths: the columns decide


def from_scipy(A, rows, keep_entries):
    """``(indptr, indices, (num_dst, num_src), order)``; ``order`` maps CSR positions to ``A.tocoo()`` entries."""
    if not sp.issparse(A):
        raise TypeError(f"A must be a scipy.sparse matrix or array, got {type(A).__name__}")
    if A.ndim != 2:
        raise ValueError(f"A must be 2-D, got shape {A.shape}")
    if rows not in ("targets", "sources"):
        raise ValueError(f"rows must be 'targets' or 'sources', got {rows!r}")
    shape = A.shape if rows == "targets" else A.shape[::-1]
    if keep_entries:  # every stored entry is one edge (multi-edges and explicit zeros kept)
        coo = A.tocoo()
        tgt, src = (coo.row, coo.col) if rows == "targets" else (coo.col, coo.row)
        tgt = tgt.astype(np.int64)
        order = np.argsort(tgt, kind="stable")
        indptr = np.zeros(shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(tgt, minlength=shape[0]), out=indptr[1:])
        return indptr, src.astype(np.int64)[order], shape, order
    # canonical rows; copy: sum_duplicates/eliminate_zeros work in place on shared arrays
    csr = sp.csr_array(A if rows == "targets" else A.T, copy=True)
    csr.sum_duplicates()
    csr.eliminate_zeros()
    return csr.indptr, csr.indices, shape, None


def _as_numpy(value):
    """A torch tensor (any device) or array-like as a NumPy array, without importing torch."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def from_pyg_data(data, want_edge_attr=None):
    """The arrays of a PyG ``Data`` object, without importing torch.

    Parameters
    ----------
    data : object
        A ``torch_geometric.data.Data``, or any object with ``edge_index``,
        ``num_nodes`` and optionally ``edge_attr`` (tensors or arrays).
    want_edge_attr : bool, optional
        None: the attributes iff ``data`` has some; True: required; False:
        never.

    Returns
    -------
    edge_index : ndarray, shape (2, E)
    num_nodes : int or None
    edge_attr : ndarray, shape (E, D) or (E,), or None

    Raises
    ------
    TypeError
        No ``edge_index``, a sparse adjacency, or ``want_edge_attr`` not a bool.
    ValueError
        ``want_edge_attr=True`` without attributes.
    """
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None:
        raise TypeError(f"data must be a torch_geometric.data.Data with an edge_index, got {type(data).__name__}"
                        + ("" if hasattr(data, "edge_index") else " (no edge_index attribute)"))
    if type(edge_index).__name__ == "SparseTensor" or getattr(edge_index, "is_sparse", False):
        raise TypeError("data.edge_index must be a dense (2, E) index tensor, got a sparse adjacency "
                        "(convert it with torch_geometric.utils.to_edge_index first)")
    if want_edge_attr is not None and not isinstance(want_edge_attr, (bool, np.bool_)):
        raise TypeError(f"edge_attr must be None, True or False, got {type(want_edge_attr).__name__}")
    num_nodes = getattr(data, "num_nodes", None)
    edge_attr = getattr(data, "edge_attr", None)
    if want_edge_attr and edge_attr is None:
        raise ValueError("edge_attr=True but data.edge_attr is None")
    if edge_attr is not None and want_edge_attr is not False:
        edge_attr = _as_numpy(edge_attr)
    else:
        edge_attr = None
    return _as_numpy(edge_index), None if num_nodes is None else int(num_nodes), edge_attr


def permute_edge_attr(edge_attr, order, num_edges):
    """``edge_attr`` as a float array of shape (E, D), rows taken in ``order``."""
    if sp.issparse(edge_attr):
        raise TypeError("edge_attr must be a dense array of shape (E, D), got a scipy.sparse matrix")
    arr = np.asarray(edge_attr)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"edge_attr must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[0] != num_edges:
        raise ValueError(f"edge_attr must have shape ({num_edges}, D) (one row per edge), got {np.shape(edge_attr)}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    return np.ascontiguousarray(arr[order])


def source_major(indices, num_src):
    """``(src_indptr, src_edges)``: the edge ids grouped by source, stably (read-only arrays)."""
    src_indptr, edges = _source_major(indices, num_src)
    edges.flags.writeable = False
    src_indptr.flags.writeable = False
    return src_indptr, edges
