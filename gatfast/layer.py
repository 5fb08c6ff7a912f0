"""One GATv2 layer with closed-form gradients (no autograd).

Semantics and parameter names follow PyTorch Geometric's ``GATv2Conv``;
the math is in ``docs/MATH.md``.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from scipy.linalg import blas

from . import _validate as V
from ._blas import ONE_BLAS_THREAD
from .graph import CSRGraph
from .kernels import (
    ACTIVATIONS,
    csr_dense_matmul,
    csr_dense_matmul2,
    gatv2_backward_source,
    gatv2_backward_target,
    gatv2_forward,
    num_att_blocks,
)
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


class _Workspace:
    """Big arrays kept between calls, so a training loop does not pay for
    fresh memory (page faults and zeroing) at every step.

    An array is handed out again only when nothing outside the workspace
    refers to it any more (its CPython reference count: no caller still holds
    it, a view of it or a cache containing it), so results already returned
    are never overwritten. Two arrays per key, because a training loop still
    holds the previous step's cache and output while the next forward runs.
    Not meant for concurrent calls on one layer from several Python threads.
    """

    SLOTS = 2

    def __init__(self):
        self._arrays = {}
        self._source_targets = None

    def empty(self, key, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype``, reused when free."""
        shape = tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        slots = self._arrays.setdefault(key, [])
        for arr in slots:
            # references: the list, the loop variable and getrefcount's argument
            if sys.getrefcount(arr) == 3 and arr.shape == shape and arr.dtype == dtype:
                return arr
        arr = np.empty(shape, dtype)
        if len(slots) >= self.SLOTS:
            slots.pop(0)  # the oldest; whoever still holds it keeps it alive
        slots.append(arr)
        return arr

    def source_targets(self, graph):
        """Targets of the edges in the graph's source-major order, built once per graph."""
        cached = self._source_targets
        if cached is None or cached[0] is not graph:
            _, src_edges = graph.source_order()
            targets = graph.targets()[src_edges]
            targets.flags.writeable = False
            self._source_targets = cached = (graph, targets)
        return cached[1]

    def clear(self):
        self._arrays.clear()
        self._source_targets = None


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
        self._workspace = _Workspace()

    def clear_workspace(self):
        """Free the arrays kept between calls for speed (they are rebuilt on the next call)."""
        self._workspace.clear()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_workspace"] = None  # scratch memory is not part of the layer
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._workspace = _Workspace()

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
        with ONE_BLAS_THREAD:
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
                _linear_into(x, W_l, b_l, xl.reshape(n, H * C))
            else:
                _dense_projections(x, [(W_l, b_l, xl.reshape(n, H * C))])
            xr = xl
        else:
            W_r, b_r = self._weights("r")
            xr = ws.empty("xr", (n, H, C), dtype)
            if sp.issparse(x):  # both projections in one pass over the sparse features
                csr_dense_matmul2(
                    x.indptr, x.indices, x.data, np.ascontiguousarray(W_l.T), np.ascontiguousarray(W_r.T),
                    _bias_or_empty(b_l, dtype), _bias_or_empty(b_r, dtype),
                    xl.reshape(n, H * C), xr.reshape(n, H * C),
                )
            else:
                _dense_projections(x, [(W_l, b_l, xl.reshape(n, H * C)), (W_r, b_r, xr.reshape(n, H * C))])

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
            g.indptr, g.indices, xl, xr, params["att"], dtype.type(self.negative_slope),
            ACTIVATIONS[self.attention_activation], edge_scale, alpha, per_head,
        )
        if self.root_weight == "theta_r":
            per_head += xr
        elif self.root_weight == "theta_n":
            per_head += _linear(x, params["W_n"], params.get("b_n")).reshape(n, H, C)

        # per_head belongs to this call: finish the output in place
        out = per_head.reshape(n, H * C) if self.concat else per_head.mean(axis=1)
        if self.residual:
            out += _linear(x, params["W_res"], None)
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
        with ONE_BLAS_THREAD:
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
            g.indptr, g.indices, cache.xl, cache.xr, params["att"], slope, kind,
            cache.edge_scale, cache.alpha, g_heads, theta_r == "pairwise",
            upstream, delta, p_term, att_part,
        )
        src_indptr, src_edges = g.source_order()
        q_term = ws.empty("q_term", (n, H, C), dtype)
        gatv2_backward_source(
            src_indptr, src_edges, ws.source_targets(g), cache.xl, cache.xr, params["att"], slope, kind,
            cache.edge_scale, cache.alpha, delta, g_heads, q_term,
        )
        grads["att"] = att_part.sum(axis=0)

        # p_term and q_term are this call's scratch: update them in place
        grad_xr = p_term.reshape(n, H * C)
        grad_xl = q_term.reshape(n, H * C)
        if self.root_weight == "theta_r":
            grad_xr += g_heads.reshape(n, H * C)

        x = cache.x
        x_t = x.T.tocsr() if sp.issparse(x) else None  # features by node, for the weight gradients
        grad_x = None
        if x_t is None:  # dense x: both weight gradients, biases and grad_x by row chunks in parallel
            grad_x = ws.empty("grad_x", x.shape, dtype)
            if self.share_weights:
                grad_xl += grad_xr
                gW_l, gb_l, _, _ = _dense_backward(x, grad_xl, None, params["W_l"], None, grad_x, self.bias)
            else:
                gW_l, gb_l, gW_r, gb_r = _dense_backward(
                    x, grad_xl, grad_xr, params["W_l"], params["W_r"], grad_x, self.bias
                )
                grads["W_r"] = gW_r
                if self.bias:
                    grads["b_r"] = gb_r
            grads["W_l"] = gW_l
            if self.bias:
                grads["b_l"] = gb_l
        elif self.share_weights:
            grad_xl += grad_xr
            grads["W_l"] = _weight_grad(grad_xl, x, x_t)
            if self.bias:
                grads["b_l"] = grad_xl.sum(axis=0)
        else:  # sparse x: both weight gradients in one pass over its transpose
            g_l = np.empty((x_t.shape[0], H * C), dtype)
            g_r = np.empty((x_t.shape[0], H * C), dtype)
            empty = np.zeros(0, dtype)
            csr_dense_matmul2(x_t.indptr, x_t.indices, x_t.data, grad_xl, grad_xr, empty, empty, g_l, g_r)
            grads["W_l"] = np.ascontiguousarray(g_l.T)
            grads["W_r"] = np.ascontiguousarray(g_r.T)
            if self.bias:
                grads["b_l"] = grad_xl.sum(axis=0)
                grads["b_r"] = grad_xr.sum(axis=0)
        if self.root_weight == "theta_n":
            gn = g_heads.reshape(n, H * C)
            grads["W_n"] = _weight_grad(gn, x, x_t)
            if self.bias:
                grads["b_n"] = gn.sum(axis=0)
            if grad_x is not None:
                _matmul_add(gn, params["W_n"], grad_x)
        if self.residual:
            grads["W_res"] = _weight_grad(grad_out, x, x_t)
            if grad_x is not None:
                _matmul_add(grad_out, params["W_res"], grad_x)
        grads["x"] = grad_x
        return {k: grads[k] for k in list(self.params) + ["x"]}


def _bias_or_empty(b, dtype):
    return np.zeros(0, dtype) if b is None else b


def _linear(x, W, b):
    """``x @ W.T + b`` for dense or sparse ``x``, in ``W``'s dtype (a new array)."""
    out = np.empty((x.shape[0], W.shape[0]), W.dtype)
    _linear_into(x, W, b, out)
    return out


# Dense products are split into chunks of rows run on up to numba.get_num_threads()
# Python threads, each a one-thread BLAS call (NumPy releases the GIL inside BLAS).
# The chunks are fixed by the row count alone, so sums over rows (weight gradients)
# run in the same order, to the bit, for any thread count.
MIN_ROW_CHUNK = 2048  # rows; at most 32 chunks above 65,536 rows
_POOLS = {}


def _row_chunks(n):
    size = max(MIN_ROW_CHUNK, -(-n // 32))
    return [(start, min(n, start + size)) for start in range(0, n, size)] or [(0, 0)]


def _run_chunks(task, chunks):
    """``[task(start, stop) for each chunk]``, the chunks spread over the Numba thread count."""
    workers = min(numba.get_num_threads(), len(chunks))
    if workers <= 1:
        return [task(*c) for c in chunks]
    key = (os.getpid(), workers)  # a forked child must not use its parent's (dead) threads
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="gatfast-blas")
    return list(pool.map(lambda c: task(*c), chunks))


def _dense_projections(x, pairs):
    """``out[...] = x @ W.T + b`` for every ``(W, b, out)`` in ``pairs``, by row chunks in parallel."""

    def task(start, stop):
        for W, b, out in pairs:
            np.matmul(x[start:stop], W.T, out=out[start:stop])
            if b is not None:
                out[start:stop] += b

    _run_chunks(task, _row_chunks(x.shape[0]))


def _dense_backward(x, grad_l, grad_r, W_l, W_r, grad_x, with_bias):
    """Weight (and bias) gradients ``grad.T @ x`` of both projections and ``grad_x = grad_l @ W_l + grad_r @ W_r``.

    ``grad_r`` / ``W_r`` may be None (shared weights). Per chunk of rows: the
    partial weight gradients and the rows of ``grad_x``; the partials are then
    added in chunk order. Returns ``(gW_l, gb_l, gW_r, gb_r)`` (None where absent).
    """
    chunks = _row_chunks(x.shape[0])

    def task(start, stop):
        xs = x[start:stop]
        parts = []
        for g in (grad_l, grad_r):
            if g is None:
                parts.append((None, None))
                continue
            gs = g[start:stop]
            parts.append((gs.T @ xs, gs.sum(axis=0) if with_bias else None))
        if grad_x is not None:
            np.matmul(grad_l[start:stop], W_l, out=grad_x[start:stop])
            if grad_r is not None:
                _matmul_add(grad_r[start:stop], W_r, grad_x[start:stop])
        return parts

    results = _run_chunks(task, chunks)
    out = []
    for side in range(2):
        for item in range(2):
            vals = [r[side][item] for r in results]
            if vals[0] is None:
                out.append(None)
                continue
            total = vals[0]
            for v in vals[1:]:
                total = total + v  # chunk order: fixed
            out.append(total)
    gW_l, gb_l, gW_r, gb_r = out
    return gW_l, gb_l, gW_r, gb_r


def _linear_into(x, W, b, out):
    """``out[...] = x @ W.T + b``: BLAS for dense ``x``, a parallel CSR kernel for sparse ``x``."""
    if sp.issparse(x):
        bias = np.zeros(0, W.dtype) if b is None else b
        csr_dense_matmul(x.indptr, x.indices, x.data, np.ascontiguousarray(W.T), bias, out)
        return out
    np.matmul(x, W.T, out=out)
    if b is not None:
        out += b
    return out


def _matmul_add(a, b, c):
    """``c += a @ b`` in place through BLAS gemm (beta = 1), with no temporary.

    Row-major ``c`` is column-major ``c.T``, and ``c.T += b.T @ a.T``.
    """
    if c.size == 0 or a.shape[1] == 0:
        return
    gemm = blas.sgemm if c.dtype == np.float32 else blas.dgemm
    res = gemm(1.0, b.T, a.T, beta=1.0, c=c.T, overwrite_c=True)
    if not np.shares_memory(res, c):  # BLAS had to copy: write the result back
        c[...] = res.T


def _weight_grad(grad, x, x_t=None):
    """``grad.T @ x`` (out, F); for sparse ``x`` as ``(x_t @ grad).T`` with ``x_t = x.T`` in CSR."""
    if x_t is not None:
        g = np.empty((x_t.shape[0], grad.shape[1]), grad.dtype)
        csr_dense_matmul(x_t.indptr, x_t.indices, x_t.data, np.ascontiguousarray(grad), np.zeros(0, grad.dtype), g)
        return np.ascontiguousarray(g.T)
    return grad.T @ x
