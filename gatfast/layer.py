"""One GATv2 layer with closed-form gradients (no autograd).

Semantics and parameter names follow PyTorch Geometric's ``GATv2Conv``;
the math is in ``docs/MATH.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _validate as V
from .graph import CSRGraph
from .kernels import ACTIVATIONS, gatv2_backward_source, gatv2_backward_target, gatv2_forward
from .params import ParamDict

__all__ = ["GATv2Layer", "LayerCache", "glorot"]

THETA_R_FORMS = ("linear", "pairwise")
ROOT_WEIGHTS = (None, "theta_r", "theta_n")


def glorot(rng, shape, dtype):
    """PyG's glorot: uniform in ±sqrt(6 / (fan_in + fan_out)) over the last two dims."""
    bound = np.sqrt(6.0 / (shape[-2] + shape[-1]))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


@dataclass
class LayerCache:
    """What ``forward`` keeps for ``backward``.

    Attributes
    ----------
    graph : CSRGraph
        The graph actually used (self loops added or removed as configured).
    alpha : ndarray, shape (graph.nnz, heads)
        Attention weights in the CSR order of ``graph`` (before dropout).
    edge_scale : ndarray, shape (graph.nnz, heads) or (0, heads)
        Attention-dropout multipliers ``m_ij / (1 - p)``; empty without dropout.
    """

    graph: CSRGraph
    x: object
    xl: np.ndarray
    xr: np.ndarray
    alpha: np.ndarray
    edge_scale: np.ndarray
    params: dict


class GATv2Layer:
    """GATv2 attention layer (Brody et al., 2022) on CSR-by-target graphs.

    Parameters
    ----------
    in_features, out_features : int
        Input feature size ``F`` and channels per head ``C``.
    heads : int, default 1
        Number of attention heads ``H``.
    concat : bool, default True
        Concatenate the heads (output ``H*C``) or average them (output ``C``).
    negative_slope : float, default 0.2
        LeakyReLU slope inside the attention.
    add_self_loops : bool, default True
        Replace existing self loops by one loop per node (PyG semantics).
    bias : bool, default True
        Learn ``b_l``, ``b_r`` and the output ``bias``.
    share_weights : bool, default False
        Use one projection for sources and targets (``W_r = W_l``); the
        params and grads then hold only ``W_l``/``b_l``.
    dtype : numpy.float32 or numpy.float64, default float32
    seed : int or numpy.random.Generator, optional
        Seed of the glorot initialisation and of attention dropout.
    dropout : float, default 0.0
        Attention dropout rate (training only), as PyG's ``dropout``.
    residual : bool, default False
        Add a linear skip connection ``x @ W_res.T`` (PyG's ``residual``).
    attention_activation : {"leaky_relu", "softplus"}, default "leaky_relu"
        Activation inside the score. ``"softplus"`` is smooth, so the Θ_R
        gradient never vanishes structurally (GAT+).
    root_weight : {None, "theta_r", "theta_n"}, default None
        GAT+ root weight: add ``Θ_R h̃_i`` (``"theta_r"``) or a separate
        ``Θ_n h̃_i`` (``"theta_n"``) to each head's output. Self loops are
        then left out of the attention and ``add_self_loops`` is ignored.

    Attributes
    ----------
    params : ParamDict
        ``W_l`` (H*C, F), ``b_l`` (H*C), ``W_r``, ``b_r`` (same), ``att``
        (H, C), ``bias`` (H*C if concat else C); ``W_res`` (out, F) with
        ``residual``; ``W_n``, ``b_n`` with ``root_weight="theta_n"``.
    """

    def __init__(
        self,
        in_features,
        out_features,
        heads=1,
        concat=True,
        negative_slope=0.2,
        add_self_loops=True,
        bias=True,
        share_weights=False,
        dtype=np.float32,
        seed=None,
        dropout=0.0,
        residual=False,
        attention_activation="leaky_relu",
        root_weight=None,
    ):
        self.in_features = V.check_int(in_features, "in_features", 1)
        self.out_features = V.check_int(out_features, "out_features", 1)
        self.heads = V.check_int(heads, "heads", 1)
        self.concat = bool(concat)
        self.negative_slope = V.check_float(negative_slope, "negative_slope")
        self.add_self_loops = bool(add_self_loops)
        self.bias = bool(bias)
        self.share_weights = bool(share_weights)
        self.dtype = V.check_dtype(dtype)
        self.dropout = V.check_float(dropout, "dropout", 0.0, 1.0, high_open=True)
        self.residual = bool(residual)
        self.attention_activation = V.check_choice(
            attention_activation, "attention_activation", set(ACTIVATIONS)
        )
        if root_weight not in ROOT_WEIGHTS:
            raise ValueError(f"root_weight must be None, 'theta_r' or 'theta_n', got {root_weight!r}")
        self.root_weight = root_weight
        self._rng = np.random.default_rng(seed)

        hc = self.heads * self.out_features
        shapes = {"W_l": (hc, self.in_features)}
        if self.bias:
            shapes["b_l"] = (hc,)
        if not self.share_weights:
            shapes["W_r"] = (hc, self.in_features)
            if self.bias:
                shapes["b_r"] = (hc,)
        shapes["att"] = (self.heads, self.out_features)
        if self.root_weight == "theta_n":
            shapes["W_n"] = (hc, self.in_features)
            if self.bias:
                shapes["b_n"] = (hc,)
        if self.residual:
            shapes["W_res"] = (self.out_dim, self.in_features)
        if self.bias:
            shapes["bias"] = (self.out_dim,)
        self.params = ParamDict(shapes, self.dtype)
        self.reset_parameters()

    # ------------------------------------------------------------------ setup
    @property
    def out_dim(self):
        """Width of the layer output: ``heads * out_features`` if concat else ``out_features``."""
        return self.heads * self.out_features if self.concat else self.out_features

    def reset_parameters(self):
        """Glorot weights and attention vector, zero biases (as PyG)."""
        for name, shape in self.params.shapes.items():
            if name.startswith("W_"):
                self.params[name] = glorot(self._rng, shape, self.dtype)
            elif name == "att":
                self.params[name] = glorot(self._rng, shape, self.dtype)
            else:
                self.params[name] = np.zeros(shape, self.dtype)

    def __repr__(self):
        return (
            f"GATv2Layer({self.in_features}, {self.out_features}, heads={self.heads}, "
            f"concat={self.concat})"
        )

    def get_config(self):
        """The constructor arguments (except ``seed``) as plain Python values."""
        return {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "heads": self.heads,
            "concat": self.concat,
            "negative_slope": self.negative_slope,
            "add_self_loops": self.add_self_loops,
            "bias": self.bias,
            "share_weights": self.share_weights,
            "dtype": self.dtype.name,
            "dropout": self.dropout,
            "residual": self.residual,
            "attention_activation": self.attention_activation,
            "root_weight": self.root_weight,
        }

    def attention_graph(self, graph):
        """The graph the attention runs on, self loops handled as configured."""
        graph = V.as_graph(graph)
        if self.root_weight is not None:
            return graph.without_self_loops()
        if self.add_self_loops:
            return graph.with_self_loops()
        return graph

    # ------------------------------------------------------------------ forward
    def _weights(self, name):
        p = self.params
        if name == "r" and self.share_weights:
            name = "l"
        return p[f"W_{name}"], p.get(f"b_{name}")

    def forward(self, graph, x, training=False, rng=None):
        """Compute the layer output.

        Parameters
        ----------
        graph : CSRGraph or scipy.sparse matrix
            CSR by target (row ``i`` = sources of node ``i``).
        x : ndarray or scipy.sparse matrix, shape (num_nodes, in_features)
            Sparse features stay sparse (multiplied as sparse).
        training : bool, default False
            Apply attention dropout (when ``dropout > 0``).
        rng : numpy.random.Generator, optional
            Source of the dropout mask; defaults to the layer's own generator.

        Returns
        -------
        out : ndarray, shape (num_nodes, out_dim)
        cache : LayerCache
            Everything ``backward`` needs; ``cache.alpha`` holds the attention.
        """
        g = self.attention_graph(graph)
        x = V.check_features(x, "x", g.num_nodes, self.in_features, self.dtype)
        self.params.check_finite()
        n, H, C = g.num_nodes, self.heads, self.out_features
        params = dict(self.params)

        W_l, b_l = self._weights("l")
        if self.share_weights:
            xl = _linear(x, W_l, b_l)
            xr = xl
        else:
            W_r, b_r = self._weights("r")
            both = _linear(x, np.concatenate([W_l, W_r]), _cat(b_l, b_r, W_l.shape[0], self.dtype))
            xl = np.ascontiguousarray(both[:, : H * C])
            xr = np.ascontiguousarray(both[:, H * C :])
        xl3 = xl.reshape(n, H, C)
        xr3 = xr.reshape(n, H, C)

        if training and self.dropout > 0.0:
            gen = self._rng if rng is None else rng
            keep = gen.random((g.nnz, H)) >= self.dropout
            edge_scale = (keep / (1.0 - self.dropout)).astype(self.dtype)
        else:
            edge_scale = np.zeros((0, H), self.dtype)

        alpha = np.empty((g.nnz, H), self.dtype)
        per_head = np.empty((n, H, C), self.dtype)
        gatv2_forward(
            g.indptr, g.indices, xl3, xr3, params["att"], self.dtype.type(self.negative_slope),
            ACTIVATIONS[self.attention_activation], edge_scale, alpha, per_head,
        )
        if self.root_weight == "theta_r":
            per_head += xr3
        elif self.root_weight == "theta_n":
            per_head += _linear(x, params["W_n"], params.get("b_n")).reshape(n, H, C)

        out = per_head.reshape(n, H * C) if self.concat else per_head.mean(axis=1)
        if self.residual:
            out = out + _linear(x, params["W_res"], None)
        if self.bias:
            out = out + params["bias"]
        out = np.ascontiguousarray(out, dtype=self.dtype)
        cache = LayerCache(g, x, xl3, xr3, alpha, edge_scale, params)
        return out, cache

    __call__ = forward

    # ------------------------------------------------------------------ backward
    def backward(self, cache, grad_out, theta_r="linear"):
        """Gradients of a scalar loss given ``grad_out = dL/d out``.

        Parameters
        ----------
        cache : LayerCache
            From ``forward`` on this layer.
        grad_out : ndarray, shape (num_nodes, out_dim)
        theta_r : {"linear", "pairwise"}, default "linear"
            Form of the Θ_R term: the O(N)-per-node sum or the paper's
            pairwise O(N²)-per-node sum. Both agree to rounding.

        Returns
        -------
        grads : dict
            One entry per key of ``params`` plus ``"x"``, the input gradient
            (None when ``x`` was sparse).
        """
        if not isinstance(cache, LayerCache):
            raise TypeError(f"cache must be the LayerCache returned by forward, got {type(cache).__name__}")
        V.check_choice(theta_r, "theta_r", set(THETA_R_FORMS))
        g = cache.graph
        n, H, C = g.num_nodes, self.heads, self.out_features
        grad_out = V.check_dense(grad_out, "grad_out", (n, self.out_dim), self.dtype)
        params = cache.params
        grads = {}

        if self.concat:
            g_heads = grad_out.reshape(n, H, C)
        else:
            g_heads = np.ascontiguousarray(
                np.broadcast_to((grad_out / self.dtype.type(H))[:, None, :], (n, H, C))
            )
        if self.bias:
            grads["bias"] = grad_out.sum(axis=0)

        kind = ACTIVATIONS[self.attention_activation]
        slope = self.dtype.type(self.negative_slope)
        upstream = np.empty((g.nnz, H), self.dtype)
        delta = np.empty((g.nnz, H), self.dtype)
        p_term = np.empty((n, H, C), self.dtype)
        att_rows = np.empty((n, H, C), self.dtype)
        gatv2_backward_target(
            g.indptr, g.indices, cache.xl, cache.xr, params["att"], slope, kind,
            cache.edge_scale, cache.alpha, g_heads, theta_r == "pairwise",
            upstream, delta, p_term, att_rows,
        )
        src_indptr, src_edges = g.source_order()
        q_term = np.empty((n, H, C), self.dtype)
        gatv2_backward_source(
            src_indptr, src_edges, g.targets(), cache.xl, cache.xr, params["att"], slope, kind,
            cache.edge_scale, cache.alpha, delta, g_heads, q_term,
        )
        grads["att"] = att_rows.sum(axis=0)

        grad_xr = p_term.reshape(n, H * C)
        grad_xl = q_term.reshape(n, H * C)
        if self.root_weight == "theta_r":
            grad_xr = grad_xr + g_heads.reshape(n, H * C)

        x = cache.x
        if self.share_weights:
            grad_lin = grad_xl + grad_xr
            grads["W_l"] = _weight_grad(grad_lin, x)
            if self.bias:
                grads["b_l"] = grad_lin.sum(axis=0)
            grad_x = _input_grad(grad_lin, params["W_l"], x)
        else:
            stacked = np.concatenate([grad_xl, grad_xr], axis=1)
            w_both = _weight_grad(stacked, x)
            grads["W_l"] = np.ascontiguousarray(w_both[: H * C])
            grads["W_r"] = np.ascontiguousarray(w_both[H * C :])
            if self.bias:
                b_both = stacked.sum(axis=0)
                grads["b_l"] = b_both[: H * C].copy()
                grads["b_r"] = b_both[H * C :].copy()
            grad_x = _input_grad(stacked, np.concatenate([params["W_l"], params["W_r"]]), x)
        if self.root_weight == "theta_n":
            gn = g_heads.reshape(n, H * C)
            grads["W_n"] = _weight_grad(gn, x)
            if self.bias:
                grads["b_n"] = gn.sum(axis=0)
            if grad_x is not None:
                grad_x += gn @ params["W_n"]
        if self.residual:
            grads["W_res"] = _weight_grad(grad_out, x)
            if grad_x is not None:
                grad_x += grad_out @ params["W_res"]
        grads["x"] = grad_x
        return {k: grads[k] for k in list(self.params) + ["x"]}


def _cat(b_l, b_r, size, dtype):
    if b_l is None:
        return None
    return np.concatenate([b_l, b_r])


def _linear(x, W, b):
    """``x @ W.T + b`` for dense or sparse ``x``, in ``W``'s dtype."""
    y = x @ W.T
    y = np.ascontiguousarray(y, dtype=W.dtype)
    if b is not None:
        y += b
    return y


def _weight_grad(grad, x):
    """``grad.T @ x`` (out, F); the sparse case as ``(x.T @ grad).T``."""
    if sp.issparse(x):
        return np.ascontiguousarray((x.T @ grad).T, dtype=grad.dtype)
    return grad.T @ x


def _input_grad(grad, W, x):
    """``grad @ W``, or None for sparse inputs (their gradient is never needed)."""
    if sp.issparse(x):
        return None
    return grad @ W
