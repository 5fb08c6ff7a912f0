"""Attention activations and their slopes, as tiny inlined Numba functions.

``kind`` selects the activation applied to ``z_ij = r_i + x_j`` before the
dot product with ``a``:

* ``LEAKY_RELU`` (0): ``z if z > 0 else c z``; slope ``1 if z > 0 else c``.
* ``SOFTPLUS`` (1): ``log(1 + exp(z))``; slope ``sigmoid(z)``. It has no
  flat regimes, so the Θ_R term never vanishes structurally (GAT+).

All arithmetic stays in the dtype of ``z`` (the caller passes ``slope``
already cast to that dtype).
"""

import math

from numba import njit

LEAKY_RELU = 0
SOFTPLUS = 1

ACTIVATIONS = {"leaky_relu": LEAKY_RELU, "softplus": SOFTPLUS}


@njit(inline="always", cache=True)
def act(z, kind, slope):
    if kind == LEAKY_RELU:
        return z if z > 0 else slope * z
    # softplus, written so that exp never overflows
    return max(z, z * 0) + math.log1p(math.exp(-abs(z)))


@njit(inline="always", cache=True)
def act_slope(z, kind, slope):
    if kind == LEAKY_RELU:
        return z * 0 + 1 if z > 0 else slope + z * 0
    # sigmoid, stable for large |z|
    one = z * 0 + 1
    if z >= 0:
        return one / (one + math.exp(-z))
    ez = math.exp(z)
    return ez / (one + ez)
