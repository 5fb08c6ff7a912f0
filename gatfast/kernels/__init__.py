"""Numba kernels: pure functions on arrays, no classes, no I/O.

Callers validate and convert; kernels assume contiguous arrays of one float
dtype and int64 CSR arrays.
"""

from .activations import ACTIVATIONS, LEAKY_RELU, SOFTPLUS
from .backward import gatv2_backward_source, gatv2_backward_target, num_att_blocks
from .forward import gatv2_forward
from .sparse import csr_dense_matmul, csr_dense_matmul2

__all__ = [
    "ACTIVATIONS",
    "LEAKY_RELU",
    "SOFTPLUS",
    "csr_dense_matmul",
    "csr_dense_matmul2",
    "gatv2_backward_source",
    "gatv2_backward_target",
    "gatv2_forward",
    "num_att_blocks",
]
