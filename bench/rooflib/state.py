"""The arrays the kernel calls of ``rooflib.kernels`` take, prepared as ``gatfast/layers`` prepares them."""

from __future__ import annotations

import numpy as np

from gatfast import _runtime
from gatfast import _validate as V
from gatfast.kernels import (
    ACTIVATIONS,
    column_sum,
    gatv2_backward_source_edge_rows,
    gatv2_backward_source_record_rows,
    gatv2_backward_source_rows,
    gatv2_backward_target_blocks,
    gatv2_backward_target_edge_blocks,
    gatv2_forward_edge_rows,
    gatv2_forward_rows,
    gatv2_pairwise_theta_r_rows,
    num_att_blocks,
    readonly,
    record_bytes,
)
from gatfast.layers.passes import (
    finishes_output,
    forward_prefetch,
    source_pass_left_over,
    source_prefetch_distance,
    source_sums_cuts,
    uses_source_records,
)


def edge_weights(layer, params):
    """``W_e`` as ``(H, D, C)``, or the ``(H, 1, C)`` dummy without edge features (as ``layers/passes.py``)."""
    H, C = layer.heads, layer.out_features
    if layer.edge_dim is None:
        return np.zeros((H, 1, C), layer.dtype)
    return np.ascontiguousarray(params["W_e"].reshape(H, C, layer.edge_dim).transpose(0, 2, 1))


class State:
    """Arrays from one forward + backward of a workload's layer, for calling each kernel on its own.

    Each edge kernel runs as the layer runs it: whole on the calling thread
    or in row chunks on the thread pool (``gatfast._runtime.run_rows`` on
    edges x heads x channels x (1 + D)).
    """

    def __init__(self, w, runner):
        layer = runner.layer
        self.layer = layer
        self.dtype = layer.dtype
        self.graph, self.x_in, self.edge_attr = w.graph, w.layer_x(), w.edge_attr
        _, cache = layer.forward(w.graph, self.x_in, w.edge_attr)
        layer.backward(cache, runner.grad, theta_r=w.theta_r)
        g = cache.graph
        inputs = cache.inputs
        n_dst, n_src = g.shape
        H, C = layer.heads, layer.out_features
        p = cache.params
        self.x_src, self.x_dst = inputs.x_src, inputs.x_dst
        self.bipartite = inputs.relation == "pair"
        self.W_l = p["W_l"]
        self.W_r = p.get("W_r", p["W_l"])
        self.b_l_opt, self.b_r_opt = p.get("b_l"), p.get("b_r")
        empty = np.zeros(0, self.dtype)
        self.b_l = empty if self.b_l_opt is None else self.b_l_opt
        self.b_r = empty if self.b_r_opt is None else self.b_r_opt
        self.bias = p.get("bias")  # None for a layer without one
        self.att = p["att"]
        self.slope = self.dtype.type(layer.negative_slope)
        self.kind = ACTIVATIONS[layer.attention_activation]
        self.u = inputs.u
        self.weT = edge_weights(layer, p)
        dims = self.u.shape[1]
        has_edge = self.u.shape[0] > 0
        work = g.nnz * H * C * (1 + dims if has_edge else 1)
        self.parallel = _runtime.use_parallel(work)
        self.work = work
        self.edge_features = layer.edge_dim is not None
        self.pairwise = w.theta_r == "pairwise"
        self.indptr, self.indices = g.indptr, g.indices
        self.src_indptr, self.src_edges = g.source_order()
        self.src_targets = g.targets()[self.src_edges]
        self.edge_scale = cache.edge_scale
        self.xl = np.array(cache.xl)  # own copies: the projections kernel overwrites xl and xr
        self.xr = np.array(cache.xr)
        self.alpha = np.array(cache.alpha)
        self.out = np.empty((n_dst, H, C), self.dtype)  # the forward kernel's output (it writes every row)
        self.grad_out = runner.grad
        self.g_heads = runner.grad.reshape(n_dst, H, C)
        self.ahead = source_prefetch_distance(g, self.xr, self.g_heads, self.alpha, self.edge_scale, self.u)
        self.xl_prefetch = forward_prefetch(g, self.xl)  # the forward's and the target pass's
        records = uses_source_records(self.kind, self.ahead, self.xr.nbytes + self.g_heads.nbytes)
        self.records = np.empty((g.nnz, record_bytes(H, C, self.dtype.itemsize)), np.uint8) if records else None
        self.rec_w = None if self.records is None else self.records.view(self.dtype)
        self.cuts = source_sums_cuts(g, layer.edge_dim is not None, records)
        nnz = g.nnz
        blocks = num_att_blocks(n_dst)
        self.upstream = np.empty((nnz, H), self.dtype)
        self.delta = np.empty((nnz, H), self.dtype)
        self.p_term = np.empty((n_dst, H, C), self.dtype)
        self.q_term = np.empty((n_src, H, C), self.dtype)
        self.att_part = np.empty((blocks, H, C), self.dtype)
        self.bias_part = np.empty((blocks if self.bias is not None else 0, H, C), self.dtype)
        self.we_part = np.empty((blocks, H, dims, C), self.dtype)
        self.grad_u = np.empty((nnz, dims), self.dtype)
        sparse = self.x_sparse
        self.grad_x_src = None if sparse else np.empty(self.x_src.shape, self.dtype)
        self.grad_x_dst = np.empty(self.x_dst.shape, self.dtype) if self.bipartite else None
        self.x_t = self.x_src.T.tocsr() if sparse else None
        # real gradients of the projections for the dense products
        self.run_target()
        self.run_source()
        self.grad_xl = self.q_term.reshape(n_src, H * C)
        self.grad_xr = self.p_term.reshape(n_dst, H * C)

    def _rows(self, kernel, count, *args):
        return _runtime.run_rows(kernel, count, args, self.work)

    def run_forward(self):
        """The forward kernel, as ``layers/passes.py`` runs it."""
        head = (self.indptr, self.indices, self.xl, self.xr, self.att, self.slope, self.kind, self.xl_prefetch)
        bias = self.layer.constants.no_bias if self.bias is None else self.bias
        tail = (self.edge_scale, bias, finishes_output(self.layer), self.alpha, self.out)
        if self.edge_features:
            self._rows(gatv2_forward_edge_rows, len(self.indptr) - 1, *head, self.u, self.weT, *tail)
        else:
            self._rows(gatv2_forward_rows, len(self.indptr) - 1, *head, *tail)

    def run_target(self):
        """The backward target pass (and the pairwise Θ_R kernel when the workload asks for it)."""
        n_dst = len(self.indptr) - 1
        head = (self.indptr, self.indices, self.xl, self.xr, self.att, self.slope, self.kind)
        common = (self.edge_scale, self.alpha, self.g_heads, self.upstream, self.delta, self.p_term, self.att_part)
        blocks = self.att_part.shape[0]
        if self.edge_features:
            self._rows(gatv2_backward_target_edge_blocks, blocks, *head, self.xl_prefetch, self.u, self.weT, *common,
                       self.we_part, self.grad_u, self.rec_w, self.records, self.bias_part)
        else:
            summed = self._rows(gatv2_backward_target_blocks, blocks, *head, self.xl_prefetch, *common, self.bias_part,
                                self.rec_w, self.records, self.cuts, self.q_term)
            if self.cuts.size:  # and the source pass of the graphs its chunks cut, as the layer
                source_pass_left_over(summed, len(self.src_indptr) - 1, lambda: self._source_head() + self._source_tail())
        if self.bias is not None:  # the layer's bias gradient from the blocks, which checks grad_out
            V.all_finite(column_sum(self.bias_part.reshape(blocks, -1)))
        if self.pairwise:
            self._rows(gatv2_pairwise_theta_r_rows, n_dst, *head, self.u, self.weT, self.alpha, self.upstream,
                       self.p_term)

    def _source_head(self):
        return (self.src_indptr, self.src_edges, self.src_targets, self.xl, self.xr, self.att, self.slope, self.kind,
                self.ahead)

    def _source_tail(self):
        return (self.edge_scale, self.alpha, self.delta, self.g_heads, self.q_term)

    def run_source(self):
        """The backward source pass (nothing where the target pass does it: ``cuts``)."""
        if self.cuts.size:
            return
        head, tail = self._source_head(), self._source_tail()
        n_src = len(self.src_indptr) - 1
        if self.records is not None:
            self._rows(gatv2_backward_source_record_rows, n_src, self.src_indptr, self.src_edges, self.src_targets,
                       self.att, self.slope, self.ahead, readonly(self.rec_w), readonly(self.records), self.g_heads,
                       self.q_term)
        elif self.edge_features:
            self._rows(gatv2_backward_source_edge_rows, n_src, *head, self.u, self.weT, *tail)
        else:
            self._rows(gatv2_backward_source_rows, n_src, *head, *tail)

    @property
    def x(self):
        return self.x_src

    @property
    def x_sparse(self):
        import scipy.sparse as sp

        return sp.issparse(self.x_src)
