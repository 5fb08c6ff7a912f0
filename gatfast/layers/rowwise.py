"""A layer's passes over its biggest arrays that are not products: the output bias and its finiteness check, and
the bias gradient's column sums, in fixed blocks of rows on the thread pool.

On one thread these streaming passes are cheap next to the kernels, but
they do not shrink with more threads: on a 16-core Intel Xeon they were 27
of the 95 ms of a 16-thread forward + backward of the 200,000-node ``large``
workload (``bench/threads.py``). The blocks are fixed by the array's shape
alone, so the results are the same bits for any thread count; arrays below
``_runtime.PARALLEL_ELEMENTS`` run as one call on the calling thread.
"""

from __future__ import annotations

import numpy as np

from .. import _runtime
from .._validate import NonFiniteError, all_finite
from ..kernels import column_sum, readonly
from ..kernels.reduce import add_bias_rows_finite
from .dense import add_bias, bias_rows_fit

__all__ = [
    "BIAS_CHUNK",
    "COLUMN_BLOCK_ROWS",
    "add_bias_finite",
    "bias_gradient",
    "check_by_sums",
    "checked_bias_gradient",
]

#: Elements per chunk of the bias-and-check pass on the thread pool (512 KiB of float32).
BIAS_CHUNK = 1 << 17

#: Rows per block of a bias gradient: each block is summed row after row, then the block sums are added in
#: block order. Up to this many rows that is one block, the plain row-by-row sum (numpy's ``sum(axis=0)`` bits).
COLUMN_BLOCK_ROWS = 8192

#: An empty read-only bias per dtype: calls without a bias then have the same argument types as calls with
#: one, so the kernel compiles once per dtype.
_NO_BIAS = {np.dtype(t).char: readonly(np.zeros(0, t)) for t in (np.float32, np.float64)}


def _run(task, chunks, arr):
    if arr.size < _runtime.PARALLEL_ELEMENTS:
        return [task(*c) for c in chunks]
    return _runtime.run_chunks(task, chunks, arr.nbytes // _runtime.STREAM_BYTES_PER_UNIT)


def add_bias_finite(out, bias):
    """``out += bias`` in place (None: no bias); True if ``out`` then holds no NaN or inf.

    ``out`` is 2-D and ``bias`` (if given) one value per column (ValueError otherwise).
    C-contiguous float rows take one pass that adds and checks (``add_bias_rows_finite``),
    in blocks of rows on the thread pool when large.
    """
    fast = out.ndim == 2 and (bias_rows_fit(out, bias) if bias is not None else out.flags.c_contiguous)
    if not fast or out.dtype not in (np.float32, np.float64):
        if bias is not None:
            add_bias(out, bias)
        return all_finite(out)
    b = readonly(bias) if bias is not None else _NO_BIAS[out.dtype.char]
    if out.size < _runtime.PARALLEL_ELEMENTS:
        return add_bias_rows_finite(out, b)
    rows = max(1, BIAS_CHUNK // max(out.shape[1], 1))
    n = out.shape[0]
    chunks = [(start, min(n, start + rows)) for start in range(0, n, rows)]
    return all(_run(lambda start, stop: add_bias_rows_finite(out[start:stop], b), chunks, out))


def bias_gradient(grad):
    """``grad.sum(axis=0)`` for a 2-D ``grad``: rows summed in order within blocks of :data:`COLUMN_BLOCK_ROWS`,
    the block sums added in block order (a new 1-D array)."""
    if grad.ndim != 2:
        raise ValueError(f"grad must be 2-D (rows x columns), got shape {grad.shape}")
    n = grad.shape[0]
    if n <= COLUMN_BLOCK_ROWS:
        return column_sum(grad)
    parts = _run(
        lambda start, stop: column_sum(grad[start:stop]),
        [(start, min(n, start + COLUMN_BLOCK_ROWS)) for start in range(0, n, COLUMN_BLOCK_ROWS)],
        grad,
    )
    total = parts[0]
    for part in parts[1:]:
        np.add(total, part, out=total)
    return total


def checked_bias_gradient(grad, name):
    """:func:`bias_gradient`, raising NonFiniteError (a ValueError) naming ``name`` if ``grad`` holds NaN or inf.

    A NaN or inf element makes its column's sum NaN or inf, and finite
    values can overflow a sum, so only a non-finite sum needs the
    element-wise check: the check costs nothing beside the sums it needs anyway.
    """
    return check_by_sums(bias_gradient(grad), grad, name)


def check_by_sums(total, grad, name):
    """``total`` (``grad``'s column sums, in whatever blocks), after NonFiniteError naming ``name`` if
    ``grad`` holds NaN or inf: only a non-finite sum needs the element-wise check."""
    if not all_finite(total) and not all_finite(grad):
        raise NonFiniteError(f"{name} must be finite, but contains NaN or inf")
    return total
