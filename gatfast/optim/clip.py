"""Gradient clipping by global norm, as ``torch.nn.utils.clip_grad_norm_``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from .. import _validate as V

__all__ = ["clip_grad_norm"]


def clip_grad_norm(grads, max_norm, norm_type=2.0, error_if_nonfinite=True):
    """Scale gradients in place so their total norm is at most ``max_norm``.

    Same rule as ``torch.nn.utils.clip_grad_norm_``: the total norm is the
    norm of the per-array norms; every gradient is multiplied by
    ``min(1, max_norm / (total_norm + 1e-6))``. The norms are computed in
    float64 with scaling, so large finite float32 gradients give a finite
    norm (torch computes in the gradients' dtype and may overflow to inf).

    A non-finite total norm (a gradient holds NaN or inf) cannot be clipped:
    torch's default scales every gradient by ``max_norm / inf = 0``, turning
    inf entries into NaN and the rest into zeros. Here, as torch does with
    ``error_if_nonfinite=True``, the default is to raise (NonFiniteError, a
    ValueError, where torch raises RuntimeError); with
    ``error_if_nonfinite=False`` the gradients are left unchanged and the
    non-finite norm is returned, so the caller can skip the step.

    Parameters
    ----------
    grads : mapping name -> ndarray
        Entries that are None and the key ``"x"`` (the input gradient) are ignored.
    max_norm : float > 0
        The largest total norm allowed.
    norm_type : float > 0 or inf, default 2
        Order of the norm (``inf``: the largest absolute entry).
    error_if_nonfinite : bool, default True
        Raise NonFiniteError if the total norm is NaN or inf; otherwise
        leave the gradients unchanged and return that norm.

    Returns
    -------
    total_norm : float
        The norm before clipping.
    """
    if not isinstance(grads, Mapping):
        raise TypeError(f"grads must be a mapping of name -> array, got {type(grads).__name__}")
    max_norm = V.check_float(max_norm, "max_norm", 0.0, low_open=True)
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real) or not norm_type > 0:
        raise ValueError(f"norm_type must be a positive number or inf, got {norm_type!r}")
    norm_type = float(norm_type)
    arrays = []
    for name, g in grads.items():
        if name == "x" or g is None:
            continue
        if not isinstance(g, np.ndarray) or not np.issubdtype(g.dtype, np.floating):
            raise TypeError(f"grads[{name!r}] must be a floating-point numpy array, got {type(g).__name__}")
        if not g.flags.writeable:
            raise ValueError(f"grads[{name!r}] must be writeable (it is scaled in place)")
        arrays.append(g)
    if not arrays:
        return 0.0
    if math.isinf(norm_type):
        norms = np.array([np.max(np.abs(g)) if g.size else 0.0 for g in arrays], dtype=np.float64)
        total = float(norms.max())
    else:
        norms = np.array([_norm(g.ravel(), norm_type) for g in arrays], dtype=np.float64)
        total = _norm(norms, norm_type)
    if not math.isfinite(total):
        if error_if_nonfinite:
            raise V.NonFiniteError(
                f"the total norm of order {norm_type:g} of the gradients is {total}, so they cannot be "
                "clipped (a gradient holds NaN or inf); pass error_if_nonfinite=False to leave them unchanged"
            )
        return total
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in arrays:
        g *= g.dtype.type(coef)
    return total


def _norm(values, norm_type):
    """The ``norm_type``-norm of a 1-D array in float64, scaled by its largest entry against overflow."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return 0.0
    scale = float(np.max(np.abs(values)))
    if scale == 0.0 or not math.isfinite(scale):
        return scale if not np.isnan(values).any() else math.nan
    return scale * float(np.linalg.norm(values / scale, norm_type))
