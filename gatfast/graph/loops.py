"""Self loops: PyG's remove-then-add rule, and where each edge goes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LoopLayout", "loop_layout", "without_loops"]


@dataclass(frozen=True)
class LoopLayout:
    """How a graph's edges map onto the same graph with self loops (PyG's rule).

    Attributes
    ----------
    graph : CSRGraph
        The graph with its loops removed and one loop per target ``i <
        min(num_src, num_dst)`` appended at the end of row ``i``.
    kept : ndarray of int64
        For every non-loop slot of ``graph`` in CSR order, the edge id it
        came from in the original graph (the original loops are dropped).
    loop_slots : ndarray of int64, shape (min(num_src, num_dst),)
        Position in ``graph`` of the loop of target ``i``.
    """

    graph: object
    kept: np.ndarray
    loop_slots: np.ndarray


def without_loops(graph, keep):
    """``(indptr, indices)`` of ``graph`` restricted to the edges where ``keep`` is True."""
    counts = np.bincount(graph.targets()[keep], minlength=graph.num_dst)
    indptr = np.zeros(graph.num_dst + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, graph.indices[keep]


def _read_only(arr):
    arr.flags.writeable = False
    return arr


def loop_layout(graph):
    """The :class:`LoopLayout` of ``graph`` (``CSRGraph.loop_layout`` caches it)."""
    from .csr import CSRGraph

    n_dst, n_src = graph.shape
    loops = min(n_src, n_dst)
    targets = graph.targets()
    keep = graph.indices != targets
    kept = np.flatnonzero(keep).astype(np.int64)
    per_row = np.bincount(targets[keep], minlength=n_dst)
    per_row[:loops] += 1
    indptr = np.zeros(n_dst + 1, dtype=np.int64)
    np.cumsum(per_row, out=indptr[1:])
    loop_slots = indptr[1 : loops + 1] - 1
    is_loop = np.zeros(indptr[-1], dtype=bool)
    is_loop[loop_slots] = True
    indices = np.empty(indptr[-1], dtype=np.int64)
    indices[~is_loop] = graph.indices[keep]
    indices[loop_slots] = np.arange(loops)
    looped = CSRGraph(indptr, indices, n_dst, n_src if graph.is_bipartite() else None)
    # on the looped graph, removing its loops and adding them again changes nothing
    looped._cache["loops"] = LoopLayout(looped, _read_only(np.flatnonzero(~is_loop).astype(np.int64)),
                                        _read_only(loop_slots.copy()))
    return LoopLayout(looped, _read_only(kept), _read_only(loop_slots))
