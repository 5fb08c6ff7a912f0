"""Parameter initialisation, as PyG initialises ``GATv2Conv``."""

from __future__ import annotations

import numpy as np

__all__ = ["glorot", "uniform_bias"]


def glorot(rng, shape, dtype):
    """PyG's glorot: uniform in ±sqrt(6 / (fan_in + fan_out)) over the last two dims."""
    bound = np.sqrt(6.0 / (shape[-2] + shape[-1]))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


def uniform_bias(rng, shape, fan_in, dtype):
    """PyG's ``Linear`` bias default: uniform in ±1/sqrt(fan_in)."""
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(dtype)
