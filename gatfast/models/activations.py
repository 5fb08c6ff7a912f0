"""Elementwise activations between layers, with their gradients."""

from __future__ import annotations

import numpy as np

from .. import _runtime
from .. import _validate as V
from ..kernels.elu import elu_backward_rows, elu_backward_rows_f32, elu_rows, elu_rows_f32, elu_slope_rows_f32

__all__ = ["ACTIVATIONS", "activation_backward", "activation_forward"]


ACTIVATIONS = ("elu", "relu", "identity")

# ELU's cost per element in run_rows' work units (what an edge-channel of the forward kernel
# costs: 1-2 ns, with the machine's speed): the float32 kernels took 3 ns an element (523 x 64,
# one thread, a slow hour); libm's float64 expm1 is a scalar call. At 523 x 64 (a 64-scene
# batch) splitting float32 ELU over 2 threads made the training step 10 % slower than one call.
_ELU_WORK = {np.dtype(np.float32): 2, np.dtype(np.float64): 16}


def activation_forward(name, x, check_finite=True):
    """Apply an elementwise activation.

    Parameters
    ----------
    name : {"elu", "relu", "identity"}
        ELU uses ``alpha = 1`` (the PyTorch/PyG default).
    x : ndarray of float
        The input.
    check_finite : bool, default True
        Refuse NaN or inf in ``x``. False skips that pass over the data,
        for a caller that checked it (as ``GATv2Network`` does with its
        layers' outputs).

    Returns
    -------
    y : ndarray, same shape and dtype as ``x``
        A new array; ``x`` is untouched.
    """
    V.check_choice(name, "name", set(ACTIVATIONS))
    x = V.float_array(x, "x", check_finite)
    if name == "identity":
        return x.copy()
    if name == "relu":
        return np.maximum(x, x.dtype.type(0))
    kernel = _elu_kernel(x, elu_rows_f32, elu_rows)
    if kernel is not None:  # one pass, rows on threads when worth it
        x2 = _as_rows(x)
        y = np.empty(x2.shape, x.dtype)
        _runtime.run_rows(kernel, x2.shape[0], (x2, y), x2.size * _ELU_WORK[x2.dtype])
        return y.reshape(x.shape)
    # min(x, 0) keeps expm1 from overflowing on large positive inputs
    return np.where(x > 0, x, np.expm1(np.minimum(x, x.dtype.type(0))))


def activation_forward_slope(name, x):
    """``(y, slope)``: :func:`activation_forward` of a checked ``x`` and, for float32 ELU, its
    derivative at ``x`` (else None), from the same evaluation of ``exp``.

    For a training step: :func:`multiply_slope` then gives the gradient with one multiplication,
    the same bits as :func:`activation_backward` (which evaluates ``exp`` again).
    """
    if name != "elu" or not isinstance(x, np.ndarray) or x.dtype != np.float32:
        return activation_forward(name, x, check_finite=False), None
    x2 = _as_rows(x)
    y = np.empty(x2.shape, x.dtype)
    slope = np.empty(x2.shape, x.dtype)
    _runtime.run_rows(elu_slope_rows_f32, x2.shape[0], (x2, y, slope), x2.size * _ELU_WORK[x2.dtype])
    return y.reshape(x.shape), slope.reshape(x.shape)


def multiply_slope(slope, grad_y):
    """``grad_y * slope`` (the gradient through the activation) where ``grad_y`` has the slope's
    shape and dtype (the kernels' case); None otherwise, for :func:`activation_backward` to handle."""
    if not isinstance(grad_y, np.ndarray) or grad_y.shape != slope.shape or grad_y.dtype != slope.dtype:
        return None
    return np.multiply(grad_y, slope)


def _elu_kernel(x, for_float32, for_float64):
    """The row kernel for ``x``: float32 of any shape (its bits must not depend on the shape), 2-D
    float64; None for anything else (the numpy form)."""
    if x.dtype == np.float32:
        return for_float32
    return for_float64 if x.ndim == 2 and x.dtype == np.float64 else None


def _as_rows(x):
    """``x`` as a C-contiguous 2-D array (a view where possible): float32 of any shape takes the
    float32 kernels, so its bits do not depend on the shape."""
    x = np.ascontiguousarray(x)
    if x.ndim == 2:
        return x
    return x.reshape(-1, x.shape[-1]) if x.ndim > 2 and x.shape[-1] else x.reshape(1, -1)


def activation_backward(name, x, y, grad_y, check_finite=True):
    """Gradient of an activation: ``grad_x = grad_y * f'(x)``.

    Parameters
    ----------
    name : {"elu", "relu", "identity"}
        The activation.
    x, y : ndarray
        Input and output of :func:`activation_forward` (``y`` is validated
        but only used for its shape; the ELU slope ``exp(x)`` is computed
        from ``x`` so it keeps full relative precision for very negative x).
    grad_y : ndarray, same shape
        Upstream gradient.
    check_finite : bool, default True
        Refuse NaN or inf in the three arrays; False skips those passes
        (see :func:`activation_forward`).

    Returns
    -------
    grad_x : ndarray, same shape and dtype as ``grad_y``
        The gradient with respect to ``x``.
    """
    V.check_choice(name, "name", set(ACTIVATIONS))
    x = V.float_array(x, "x", check_finite)
    y = V.float_array(y, "y", check_finite)
    grad_y = V.float_array(grad_y, "grad_y", check_finite)
    V.same_shape(y, "y", x.shape, "x")
    V.same_shape(grad_y, "grad_y", x.shape, "x")
    if name == "identity":
        return grad_y.copy()
    zero = grad_y.dtype.type(0)
    if name == "relu":
        return np.where(x > 0, grad_y, zero)
    kernel = _elu_kernel(x, elu_backward_rows_f32, elu_backward_rows) if x.dtype == grad_y.dtype else None
    if kernel is not None:
        x2, g2 = _as_rows(x), _as_rows(grad_y)
        grad_x = np.empty(x2.shape, x.dtype)
        _runtime.run_rows(kernel, x2.shape[0], (x2, g2, grad_x), x2.size * _ELU_WORK[x2.dtype])
        return grad_x.reshape(x.shape)
    slope = np.exp(np.minimum(x, x.dtype.type(0)))
    return np.where(x > 0, grad_y, grad_y * slope.astype(grad_y.dtype, copy=False))
