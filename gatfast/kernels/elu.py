"""ELU between layers (``alpha = 1``) and its gradient, by rows, in one pass each.

The numpy form (``where``, ``minimum``, ``expm1``/``exp``, casts) made four
or five passes over the hidden activations of every training step; these
make one, and run on row chunks in parallel (``gatfast._runtime.run_rows``).
NaN propagates as in the numpy form: ``v > 0`` is false for NaN, and
``expm1``/``exp`` of NaN is NaN.
"""

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def elu_rows(r0, r1, x, y):
    """``y = x`` where ``x > 0``, else ``expm1(x)``, for rows ``[r0, r1)``."""
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            y[r, c] = v if v > 0 else np.expm1(v)


@njit(nogil=True, cache=True)
def elu_backward_rows(r0, r1, x, grad_y, grad_x):
    """``grad_x = grad_y`` where ``x > 0``, else ``grad_y * exp(x)``, for rows ``[r0, r1)``."""
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            g = grad_y[r, c]
            grad_x[r, c] = g if v > 0 else g * np.exp(v)
