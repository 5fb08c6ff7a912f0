"""The layer's gradients on the input side of the attention: weights, biases and ``x``.

Given ``∂L/∂x_l`` (``Q``, one row per source) and ``∂L/∂x_r`` (``P``, one
row per target) from the kernels' two passes, the projection weight
gradients are ``Qᵀ x_src`` and ``Pᵀ x_dst`` and the input gradients
``Q W_l`` and ``P W_r`` (plus the root and residual terms on the targets).
For one feature matrix shared by sources and targets both land in one
array; for a block (targets = the first rows) the target part is added to
those rows; a bipartite layer gets the pair.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..kernels import transpose
from .dense import dense_backward, is_small, matmul_add, small_projection_grads, sparse_matmul2, weight_grad
from .rowwise import bias_gradient

__all__ = ["input_side_grads"]


def _transposed(x, ws, key):
    """``x.T`` in CSR (features by node) for sparse ``x``, by ``ws.transposed`` under ``key``; None if dense."""
    return ws.transposed(x, key) if sp.issparse(x) else None


def _one_side(x, x_t, grad, W, with_bias, ws, key, need_x=True):
    """``(∂W, ∂b, ∂x)`` of ``y = x @ W.T + b`` given ``grad = ∂L/∂y`` (``∂x`` None for sparse x or not needed)."""
    if x_t is None:
        grad_x = ws.empty(key, x.shape, grad.dtype) if need_x else None
        gW, gb, _, _ = dense_backward(x, grad, None, W, None, grad_x, with_bias)
        return gW, gb, grad_x
    return weight_grad(grad, x, x_t), (bias_gradient(grad) if with_bias else None), None


def _same_input(layer, x, grad_xl, grad_xr, params, ws, need_x=True):
    """Both projections of one feature matrix: ``(grads, grad_x)``."""
    grads = {}
    bias = layer.bias
    H, C = layer.heads, layer.out_features
    if not sp.issparse(x) and is_small(x.shape[0], x.shape[1], H * C):  # one Numba call for all of it
        W_l = params["W_l"]
        gW_l, gb_l, gW_r, gb_r, grad_x = small_projection_grads(
            x, grad_xl, grad_xr, W_l, W_l if layer.share_weights else params["W_r"], bias, True)
        if layer.share_weights:
            grads["W_l"], grads["b_l"] = gW_l + gW_r, (gb_l + gb_r) if bias else None
        else:
            grads.update(W_l=gW_l, b_l=gb_l, W_r=gW_r, b_r=gb_r)
        return grads, grad_x
    if not sp.issparse(x):  # both weight gradients, biases and grad_x by row chunks in parallel
        grad_x = ws.empty("grad_x", x.shape, x.dtype) if need_x else None
        if layer.share_weights:
            grad_xl += grad_xr
            gW_l, gb_l, _, _ = dense_backward(x, grad_xl, None, params["W_l"], None, grad_x, bias)
        else:
            gW_l, gb_l, gW_r, gb_r = dense_backward(x, grad_xl, grad_xr, params["W_l"], params["W_r"], grad_x, bias)
            grads["W_r"], grads["b_r"] = gW_r, gb_r
        grads["W_l"], grads["b_l"] = gW_l, gb_l
        return grads, grad_x
    x_t = _transposed(x, ws, "x")
    if layer.share_weights:
        grad_xl += grad_xr
        grads["W_l"] = weight_grad(grad_xl, x, x_t)
        grads["b_l"] = bias_gradient(grad_xl) if bias else None
        return grads, None
    # sparse x: both weight gradients in one pass over its transpose
    g_l = np.empty((x_t.shape[0], H * C), x.dtype)
    g_r = np.empty((x_t.shape[0], H * C), x.dtype)
    empty = np.zeros(0, x.dtype)
    sparse_matmul2(x_t, grad_xl, grad_xr, empty, empty, g_l, g_r)
    grads["W_l"], grads["W_r"] = transpose(g_l), transpose(g_r)
    grads["b_l"] = bias_gradient(grad_xl) if bias else None
    grads["b_r"] = bias_gradient(grad_xr) if bias else None
    return grads, None


def input_side_grads(layer, cache, grad_xl, grad_xr, g_heads, grad_out, ws, input_grad=True):
    """Gradients of the projection weights and biases, the root and residual weights, and ``x``.

    Parameters
    ----------
    layer : GATv2Layer
    cache : LayerCache
    grad_xl : ndarray, shape (num_src, H*C)
        ``∂L/∂x_l``; scratch owned by the call (updated in place).
    grad_xr : ndarray, shape (num_dst, H*C)
        ``∂L/∂x_r``; scratch owned by the call (updated in place).
    g_heads : ndarray, shape (num_dst, H, C)
        The upstream gradient per head.
    grad_out : ndarray, shape (num_dst, out_dim)
        The upstream gradient of the layer output.
    ws : Workspace
    input_grad : bool, default True
        False: skip the products that only ``"x"`` needs (it may come back
        None, or computed anyway where that is free).

    Returns
    -------
    dict
        Parameter name -> gradient, and ``"x"``: an array (None for sparse
        ``x``), or ``(grad_x_src, grad_x_dst)`` for a bipartite layer.
    """
    params = cache.params
    inputs = cache.inputs
    x_src, x_dst, relation = inputs.x_src, inputs.x_dst, inputs.relation
    n_dst = x_dst.shape[0]
    H, C = layer.heads, layer.out_features
    if relation == "same":
        grads, grad_x_src = _same_input(layer, x_src, grad_xl, grad_xr, params, ws, input_grad)
        grad_x_dst = grad_x_src
    else:
        W_l = params["W_l"]
        W_r = W_l if layer.share_weights else params["W_r"]
        gW_l, gb_l, grad_x_src = _one_side(
            x_src, _transposed(x_src, ws, "x_src"), grad_xl, W_l, layer.bias, ws, "grad_x_src", input_grad)
        gW_r, gb_r, grad_x_dst = _one_side(
            x_dst, _transposed(x_dst, ws, "x_dst"), grad_xr, W_r, layer.bias, ws, "grad_x_dst", input_grad)
        if layer.share_weights:
            grads = {"W_l": gW_l + gW_r, "b_l": gb_l + gb_r if layer.bias else None}
        else:
            grads = {"W_l": gW_l, "b_l": gb_l, "W_r": gW_r, "b_r": gb_r}
    # only the root and residual weights need it (a transpose costs as much as a product); one matrix for
    # sources and targets ("same") has one kept transpose
    need_t = layer.root_weight == "theta_n" or layer.residual
    x_dst_t = _transposed(x_dst, ws, "x" if relation == "same" else "x_dst") if need_t else None
    if layer.root_weight == "theta_n":
        gn = g_heads.reshape(n_dst, H * C)
        grads["W_n"] = weight_grad(gn, x_dst, x_dst_t)
        if layer.bias:
            grads["b_n"] = bias_gradient(gn)
        if grad_x_dst is not None:
            matmul_add(gn, params["W_n"], grad_x_dst)
    if layer.residual:
        grads["W_res"] = weight_grad(grad_out, x_dst, x_dst_t)
        if grad_x_dst is not None:
            matmul_add(grad_out, params["W_res"], grad_x_dst)
    grads = {k: v for k, v in grads.items() if v is not None}
    if relation == "pair":
        grads["x"] = (grad_x_src, grad_x_dst)
    elif relation == "prefix":  # the targets are the first rows of the one matrix
        if grad_x_src is not None and grad_x_dst is not None:
            grad_x_src[:n_dst] += grad_x_dst
        grads["x"] = grad_x_src
    else:
        grads["x"] = grad_x_src
    return grads
