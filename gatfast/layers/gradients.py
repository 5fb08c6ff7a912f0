"""The layer's gradients on the input side of the attention: weights, biases and ``x``.

Given ``∂L/∂x_l`` and ``∂L/∂x_r`` (the source and target projections, from
the kernels' two passes), the projection weight gradients are products with
the input features and the input gradient is a product with the weights.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..kernels import csr_dense_matmul2
from .dense import dense_backward, matmul_add, weight_grad

__all__ = ["input_side_grads"]


def input_side_grads(layer, cache, grad_xl, grad_xr, g_heads, grad_out, ws):
    """Gradients of the projection weights and biases, the root and residual weights, and ``x``.

    Parameters
    ----------
    layer : GATv2Layer
    cache : LayerCache
    grad_xl, grad_xr : ndarray, shape (n, H*C)
        ``∂L/∂x_l`` and ``∂L/∂x_r``; scratch owned by the call (updated in place).
    g_heads : ndarray, shape (n, H, C)
        The upstream gradient per head.
    grad_out : ndarray, shape (n, out_dim)
        The upstream gradient of the layer output.
    ws : Workspace

    Returns
    -------
    dict
        Parameter name -> gradient, and ``"x"`` (None for sparse ``x``).
    """
    params = cache.params
    dtype = layer.dtype
    n, H, C = g_heads.shape
    grads = {}
    x = cache.x
    x_t = x.T.tocsr() if sp.issparse(x) else None  # features by node, for the weight gradients
    grad_x = None
    if x_t is None:  # dense x: both weight gradients, biases and grad_x by row chunks in parallel
        grad_x = ws.empty("grad_x", x.shape, dtype)
        if layer.share_weights:
            grad_xl += grad_xr
            gW_l, gb_l, _, _ = dense_backward(x, grad_xl, None, params["W_l"], None, grad_x, layer.bias)
        else:
            gW_l, gb_l, gW_r, gb_r = dense_backward(
                x, grad_xl, grad_xr, params["W_l"], params["W_r"], grad_x, layer.bias
            )
            grads["W_r"] = gW_r
            if layer.bias:
                grads["b_r"] = gb_r
        grads["W_l"] = gW_l
        if layer.bias:
            grads["b_l"] = gb_l
    elif layer.share_weights:
        grad_xl += grad_xr
        grads["W_l"] = weight_grad(grad_xl, x, x_t)
        if layer.bias:
            grads["b_l"] = grad_xl.sum(axis=0)
    else:  # sparse x: both weight gradients in one pass over its transpose
        g_l = np.empty((x_t.shape[0], H * C), dtype)
        g_r = np.empty((x_t.shape[0], H * C), dtype)
        empty = np.zeros(0, dtype)
        csr_dense_matmul2(x_t.indptr, x_t.indices, x_t.data, grad_xl, grad_xr, empty, empty, g_l, g_r)
        grads["W_l"] = np.ascontiguousarray(g_l.T)
        grads["W_r"] = np.ascontiguousarray(g_r.T)
        if layer.bias:
            grads["b_l"] = grad_xl.sum(axis=0)
            grads["b_r"] = grad_xr.sum(axis=0)
    if layer.root_weight == "theta_n":
        gn = g_heads.reshape(n, H * C)
        grads["W_n"] = weight_grad(gn, x, x_t)
        if layer.bias:
            grads["b_n"] = gn.sum(axis=0)
        if grad_x is not None:
            matmul_add(gn, params["W_n"], grad_x)
    if layer.residual:
        grads["W_res"] = weight_grad(grad_out, x, x_t)
        if grad_x is not None:
            matmul_add(grad_out, params["W_res"], grad_x)
    grads["x"] = grad_x
    return grads
