"""Self loops: PyG's remove-then-add rule, and where each edge goes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.structure import loop_layout as _loop_layout

__all__ = ["LoopLayout", "loop_layout", "without_loops"]


@dataclass(frozen=True)
class LoopLayout:
    """How a graph's edges map onto the same graph with self loops (PyG's rule).

    Attributes
    ----------
    graph : CSRGraph
        The graph with its loops removed and one loop per target ``i <
        min(num_src, num_dst)`` appended at the end of row ``i``; None
        only in the layout a looped graph caches for itself.
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

    indptr, indices, kept, loop_slots, looped_kept = _loop_layout(graph.indptr, graph.indices, *graph.shape)
    looped = CSRGraph._from_valid(indptr, indices, graph.num_dst, graph.num_src)
    # on the looped graph, removing its loops and adding them again changes nothing; its layout
    # names no graph (CSRGraph.loop_layout fills in the graph itself): a reference to it would be
    # a cycle, which keeps every sampled block's arrays alive until the cyclic GC finds them
    looped._cache["loops"] = LoopLayout(None, _read_only(looped_kept), _read_only(loop_slots.copy()))
    return LoopLayout(looped, _read_only(kept), _read_only(loop_slots))
