"""Numba kernels: pure functions on arrays, no classes, no I/O.

Callers validate and convert; kernels assume contiguous arrays of one float
dtype and int64 CSR arrays. The heavy kernels work on a range of rows (or
row blocks) and release the GIL; ``gatfast._runtime.run_rows`` calls them
once over everything for small work, or over chunks on a thread pool. One
compiled function serves both, so the bits are the same either way, and no
OpenMP runtime is involved (``fork`` is safe, BLAS's threads are not starved).
"""

import importlib
import os
import pkgutil

import numpy as np

from . import cache_stamp
from .activations import ACTIVATIONS, LEAKY_RELU, SOFTPLUS
from .backward import (
    gatv2_backward_source_ranges,
    gatv2_backward_source_rows,
    gatv2_backward_target_blocks,
    num_att_blocks,
)
from .backward_edge import (
    gatv2_backward_source_edge_rows,
    gatv2_backward_target_edge_blocks,
)
from .edge_fill import FILL_CONST, FILL_MODES, fill_loop_attr, fill_loop_attr_backward
from .forward import gatv2_forward_edge_rows, gatv2_forward_rows
from .pairwise import gatv2_pairwise_theta_r_rows
from .records import gatv2_backward_source_record_rows, record_bytes
from .reduce import column_sums
from .sparse import csr_dense_matmul2_rows, csr_dense_matmul_rows
from .transpose import transpose_into

__all__ = [
    "readonly",
    "ACTIVATIONS",
    "FILL_CONST",
    "FILL_MODES",
    "LEAKY_RELU",
    "SOFTPLUS",
    "column_sum",
    "csr_dense_matmul2_rows",
    "csr_dense_matmul_rows",
    "fill_loop_attr",
    "fill_loop_attr_backward",
    "gatv2_backward_source_edge_rows",
    "gatv2_backward_source_record_rows",
    "gatv2_backward_source_ranges",
    "gatv2_backward_source_rows",
    "gatv2_backward_target_blocks",
    "gatv2_backward_target_edge_blocks",
    "gatv2_forward_edge_rows",
    "gatv2_forward_rows",
    "gatv2_pairwise_theta_r_rows",
    "num_att_blocks",
    "record_bytes",
    "transpose",
]


def readonly(arr):
    """``arr`` as read-only (a view if it is writable).

    Numba compiles a kernel once per combination of argument types, and a
    read-only array is another type: arrays that may arrive either way (a
    user's edge attributes, an upstream gradient) are always passed
    read-only, so each kernel is compiled once per dtype, not once per
    combination of flags (compilation dominates a first run).
    """
    if not arr.flags.writeable:
        return arr
    view = arr.view()
    view.setflags(write=False)
    return view


#: the dtypes the helpers below hand to their kernels (native byte order; others go to NumPy)
_KERNEL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def column_sum(a):
    """``a.sum(axis=0)`` for a 2-D float array: the same bits as numpy's, several times faster.

    One column (where numpy sums pairwise, more accurately), non-contiguous
    arrays and other dtypes take numpy's path; either way a new 1-D array of
    ``a.shape[1]`` values.
    """
    if a.ndim != 2 or a.shape[1] < 2 or not a.flags.c_contiguous or a.dtype not in _KERNEL_FLOATS:
        return a.sum(axis=0)
    return sum_in_order(a)


def sum_in_order(parts):
    """``parts[0] + parts[1] + ...`` elementwise, from +0, left to right, for a C-contiguous float array.

    A fixed order of chunk partials (the same bits for any thread count) in
    one kernel call at any width, where :func:`column_sum` hands a single
    column to NumPy, which sums it pairwise from 8 values on.
    """
    flat = parts.reshape(parts.shape[0], int(np.prod(parts.shape[1:])))  # no rows: still the columns
    out = np.empty(flat.shape[1], parts.dtype)
    column_sums(readonly(flat), out)
    return out.reshape(parts.shape[1:])


def transpose(a):
    """``a.T`` as a new C-contiguous array (the same values), in tiles (``transpose.py``).

    A C-contiguous 2-D float32 or float64 array goes to the kernel; any
    other array is copied by NumPy. Never a view of ``a``.
    """
    if a.ndim == 2 and a.dtype in _KERNEL_FLOATS and a.size > 0 and a.flags.c_contiguous:
        out = np.empty(a.shape[::-1], a.dtype)
        transpose_into(readonly(a), out)
        return out
    return np.array(a.T, order="C")  # a copy, also where a.T is already C-contiguous


# Every kernel module, imported before any kernel loads from Numba's cache, so that entries compiled
# from other sources of any of them never load (cache_stamp.py)
cache_stamp.refresh(
    os.path.dirname(__file__),
    [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)],
    gatv2_forward_rows,
)
