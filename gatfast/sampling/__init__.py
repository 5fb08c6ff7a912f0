"""Neighbour sampling: mini-batches of bipartite blocks (Numba kernels, keyed randomness)."""

from .blocks import Block, SampledBatch, check_fanouts, sample_blocks
from .sampler import NeighborSampler

__all__ = ["Block", "NeighborSampler", "SampledBatch", "check_fanouts", "sample_blocks"]
