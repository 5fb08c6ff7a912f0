"""Where a graph falls apart: the rows between which no edge runs (a batch of small graphs, in order)."""

from __future__ import annotations

from ..kernels.structure import component_cuts as _cuts_kernel

__all__ = ["component_cuts"]


def component_cuts(graph):
    """``(cuts, longest)`` of a square ``CSRGraph`` (``kernels.structure.component_cuts``), cached with the
    graph; None for a bipartite one. ``cuts`` is read-only."""
    cache = graph._cache  # the graph's own cache of derived data (csr.py): the graph is immutable
    if "component_cuts" not in cache:
        found = None
        if not graph.is_bipartite():
            cuts, longest = _cuts_kernel(graph.indptr, graph.indices)
            cuts.flags.writeable = False
            found = (cuts, int(longest))
        cache["component_cuts"] = found
    return cache["component_cuts"]
