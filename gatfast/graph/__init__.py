"""Graphs as CSR arrays **by target**: row ``i`` lists the sources ``j`` of the edges ``j -> i``."""

from .batch import batch_graphs
from .csr import CSRGraph

__all__ = ["CSRGraph", "batch_graphs"]
