"""Parameter initialisation, as PyG initialises ``GATv2Conv``."""

from __future__ import annotations

import numpy as np

__all__ = ["glorot"]


def glorot(rng, shape, dtype):
    """PyG's glorot: uniform in ±sqrt(6 / (fan_in + fan_out)) over the last two dims."""
    bound = np.sqrt(6.0 / (shape[-2] + shape[-1]))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)
