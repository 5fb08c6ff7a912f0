"""gatfast: GATv2 graph attention networks on sparse graphs, on the CPU,
with closed-form gradients in Numba kernels."""

from .graph import CSRGraph, batch_graphs
from .layer import GATv2Layer, LayerCache

__version__ = "0.1.0"

__all__ = ["CSRGraph", "GATv2Layer", "LayerCache", "batch_graphs", "__version__"]
