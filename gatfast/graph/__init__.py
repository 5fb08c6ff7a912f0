"""Graphs as CSR arrays **by target**: row ``i`` lists the sources ``j`` of the edges ``j -> i``."""

from .batch import batch_graphs
from .csr import MAX_NODES, CSRGraph
from .loops import LoopLayout

__all__ = ["MAX_NODES", "CSRGraph", "LoopLayout", "batch_graphs"]
