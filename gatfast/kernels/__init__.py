"""Numba kernels: pure functions on arrays, no classes, no I/O.

Callers validate and convert; kernels assume contiguous arrays of one float
dtype and int64 CSR arrays. Every parallel kernel has a ``*_serial`` twin
that runs the same per-row code on the calling thread (the same bits).
"""

from .activations import ACTIVATIONS, LEAKY_RELU, SOFTPLUS
from .backward import (
    gatv2_backward_source,
    gatv2_backward_source_serial,
    gatv2_backward_target,
    gatv2_backward_target_serial,
    num_att_blocks,
)
from .edge_fill import FILL_CONST, FILL_MODES, fill_loop_attr, fill_loop_attr_backward
from .forward import gatv2_forward, gatv2_forward_serial
from .sparse import csr_dense_matmul, csr_dense_matmul2

__all__ = [
    "ACTIVATIONS",
    "FILL_CONST",
    "FILL_MODES",
    "LEAKY_RELU",
    "SOFTPLUS",
    "csr_dense_matmul",
    "csr_dense_matmul2",
    "fill_loop_attr",
    "fill_loop_attr_backward",
    "gatv2_backward_source",
    "gatv2_backward_source_serial",
    "gatv2_backward_target",
    "gatv2_backward_target_serial",
    "gatv2_forward",
    "gatv2_forward_serial",
    "num_att_blocks",
]
