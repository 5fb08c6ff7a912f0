"""Parameter initialisation, as PyG initialises ``GATv2Conv``."""

from __future__ import annotations

import numpy as np

__all__ = ["glorot", "uniform_bias"]


def glorot(rng, shape, dtype):
    """Draw PyG's glorot initialisation: uniform in ±sqrt(6 / (fan_in + fan_out)).

    Parameters
    ----------
    rng : numpy.random.Generator
        The random stream.
    shape : tuple of int
        Shape of the array; its last two dimensions are the fans.
    dtype : numpy.dtype
        Floating-point type of the result.

    Returns
    -------
    ndarray
        The initial values, of ``shape`` and ``dtype``.
    """
    bound = np.sqrt(6.0 / (shape[-2] + shape[-1]))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


def uniform_bias(rng, shape, fan_in, dtype):
    """PyG's ``Linear`` bias default: uniform in ±1/sqrt(fan_in)."""
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(dtype)
