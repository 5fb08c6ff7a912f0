"""One GATv2 layer with closed-form gradients (no autograd).

Semantics and parameter names follow PyTorch Geometric's ``GATv2Conv``;
the math is in ``docs/MATH.md``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import _runtime
from .. import _validate as V
from ..kernels import (
    ACTIVATIONS,
    csr_dense_matmul2,
    gatv2_backward_source,
    gatv2_backward_target,
    gatv2_forward,
    num_att_blocks,
)
from .cache import LayerCache
from .dense import bias_or_empty, dense_projections, linear, linear_into
from .gradients import input_side_grads
from .init import glorot
from .params import ParamDict
from .workspace import Workspace

__all__ = ["GATv2Layer", "THETA_R_FORMS", "ROOT_WEIGHTS"]

THETA_R_FORMS = ("linear", "pairwise")
ROOT_WEIGHTS = (None, "theta_r", "theta_n")


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
        self._workspace = Workspace()

    def clear_workspace(self):
        """Free the arrays kept between calls for speed (they are rebuilt on the next call)."""
        self._workspace.clear()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_workspace"] = None  # scratch memory is not part of the layer
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._workspace = Workspace()

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
            f"GATv2Layer({self.in_features}, {self.out_features}, heads={self.heads}, concat={self.concat})"
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
        _runtime.ensure_initialised()
        with _runtime.blas_single_thread(), _runtime.compile_notice(("forward", self.dtype.char)):
            return self._forward(graph, x, training, rng)

    def _forward(self, graph, x, training, rng):
        g = self.attention_graph(graph)
        x = V.check_features(x, "x", g.num_nodes, self.in_features, self.dtype)
        self.params.check_finite()
        n, H, C = g.num_nodes, self.heads, self.out_features
        params = dict(self.params)
        ws = self._workspace
        dtype = self.dtype

        # projections straight into their own contiguous buffers (no concatenation, no copies)
        W_l, b_l = self._weights("l")
        xl = ws.empty("xl", (n, H, C), dtype)
        if self.share_weights:
            if sp.issparse(x):
                linear_into(x, W_l, b_l, xl.reshape(n, H * C))
            else:
                dense_projections(x, [(W_l, b_l, xl.reshape(n, H * C))])
            xr = xl
        else:
            W_r, b_r = self._weights("r")
            xr = ws.empty("xr", (n, H, C), dtype)
            if sp.issparse(x):  # both projections in one pass over the sparse features
                csr_dense_matmul2(
                    x.indptr,
                    x.indices,
                    x.data,
                    np.ascontiguousarray(W_l.T),
                    np.ascontiguousarray(W_r.T),
                    bias_or_empty(b_l, dtype),
                    bias_or_empty(b_r, dtype),
                    xl.reshape(n, H * C),
                    xr.reshape(n, H * C),
                )
            else:
                dense_projections(x, [(W_l, b_l, xl.reshape(n, H * C)), (W_r, b_r, xr.reshape(n, H * C))])

        if training and self.dropout > 0.0:
            gen = self._rng if rng is None else rng
            draw = ws.empty("dropout_draw", (g.nnz, H), np.float64)
            gen.random(out=draw)  # the same stream as gen.random((nnz, H))
            edge_scale = ws.empty("edge_scale", (g.nnz, H), dtype)
            np.multiply(draw >= self.dropout, dtype.type(1.0 / (1.0 - self.dropout)), out=edge_scale)
        else:
            edge_scale = np.zeros((0, H), dtype)

        alpha = ws.empty("alpha", (g.nnz, H), dtype)
        per_head = ws.empty("out", (n, H, C), dtype)
        gatv2_forward(
            g.indptr,
            g.indices,
            xl,
            xr,
            params["att"],
            dtype.type(self.negative_slope),
            ACTIVATIONS[self.attention_activation],
            edge_scale,
            alpha,
            per_head,
        )
        if self.root_weight == "theta_r":
            per_head += xr
        elif self.root_weight == "theta_n":
            per_head += linear(x, params["W_n"], params.get("b_n")).reshape(n, H, C)

        # per_head belongs to this call: finish the output in place
        out = per_head.reshape(n, H * C) if self.concat else per_head.mean(axis=1)
        if self.residual:
            out += linear(x, params["W_res"], None)
        if self.bias:
            out += params["bias"]
        cache = LayerCache(g, x, xl, xr, alpha, edge_scale, params)
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
        _runtime.ensure_initialised()
        with _runtime.blas_single_thread(), _runtime.compile_notice(("backward", self.dtype.char)):
            return self._backward(cache, grad_out, theta_r)

    def _backward(self, cache, grad_out, theta_r):
        if not isinstance(cache, LayerCache):
            raise TypeError(f"cache must be the LayerCache returned by forward, got {type(cache).__name__}")
        V.check_choice(theta_r, "theta_r", set(THETA_R_FORMS))
        g = cache.graph
        n, H, C = g.num_nodes, self.heads, self.out_features
        grad_out = V.check_dense(grad_out, "grad_out", (n, self.out_dim), self.dtype)
        params = cache.params
        ws = self._workspace
        dtype = self.dtype
        grads = {}

        if self.concat:
            g_heads = grad_out.reshape(n, H, C)
        else:
            g_heads = ws.empty("g_heads", (n, H, C), dtype)
            np.divide(grad_out[:, None, :], dtype.type(H), out=g_heads)
        if self.bias:
            grads["bias"] = grad_out.sum(axis=0)

        kind = ACTIVATIONS[self.attention_activation]
        slope = dtype.type(self.negative_slope)
        upstream = ws.empty("upstream", (g.nnz, H), dtype)
        delta = ws.empty("delta", (g.nnz, H), dtype)
        p_term = ws.empty("p_term", (n, H, C), dtype)
        att_part = ws.empty("att_part", (num_att_blocks(n), H, C), dtype)
        gatv2_backward_target(
            g.indptr,
            g.indices,
            cache.xl,
            cache.xr,
            params["att"],
            slope,
            kind,
            cache.edge_scale,
            cache.alpha,
            g_heads,
            theta_r == "pairwise",
            upstream,
            delta,
            p_term,
            att_part,
        )
        src_indptr, src_edges = g.source_order()
        q_term = ws.empty("q_term", (n, H, C), dtype)
        gatv2_backward_source(
            src_indptr,
            src_edges,
            ws.source_targets(g),
            cache.xl,
            cache.xr,
            params["att"],
            slope,
            kind,
            cache.edge_scale,
            cache.alpha,
            delta,
            g_heads,
            q_term,
        )
        grads["att"] = att_part.sum(axis=0)

        # p_term and q_term are this call's scratch: update them in place
        grad_xr = p_term.reshape(n, H * C)
        grad_xl = q_term.reshape(n, H * C)
        if self.root_weight == "theta_r":
            grad_xr += g_heads.reshape(n, H * C)

        grads.update(input_side_grads(self, cache, grad_xl, grad_xr, g_heads, grad_out, ws))
        return {k: grads[k] for k in list(self.params) + ["x"]}
