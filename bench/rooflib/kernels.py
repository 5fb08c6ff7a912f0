"""One function per kernel of a layer step: its byte/flop model (from ``Dims``) and its call.

Each ``k_*(d, s=None)`` returns a :class:`~rooflib.model.Kernel`; with the
prepared arrays ``s`` (``rooflib.state.State``) it also holds a no-argument
call of the real kernel, made as ``gatfast/layers`` makes it. When a
kernel's signature changes, only its own function changes.

Edge features (``d.edge_dim = D > 0``) add, per edge and channel, the
``2 D`` flops of ``z_ij += W_E u_ij`` wherever a pass forms ``z_ij``, the
stream of ``u`` (CSR order) in the forward and target passes and its gather
in the source pass, and in the target pass ``∂L/∂u_ij`` and the ``W_E``
partial sums. Bipartite input (``d.bipartite``) projects and differentiates
``x_src`` and ``x_dst`` separately.
"""

from __future__ import annotations

import numpy as np

from gatfast import _validate as V
from gatfast._runtime import blas_single_thread
from gatfast.layers.dense import dense_backward, dense_projections, sparse_matmul2
from gatfast.layers.inputs import resolve_inputs

from .model import Gather, Kernel, Model, bound, step_footprint


def k_check_x(d, s=None):
    """Forward input checks: features, edge attributes and parameters finite (``resolve_inputs``, ``check_finite``)."""
    x_bytes = d.x_nnz * d.f if d.x_sparse else d.ns * d.in_features * d.f
    reads = {"x": x_bytes}
    if d.bipartite:
        reads["x_dst"] = d.n * d.fd * d.f
    if d.edge_dim:
        reads["u"] = d.nnz * d.edge_dim * d.f
    reads["W"] = d.hc * (d.in_features + d.fd + d.edge_dim) * d.f
    # a finiteness check must look at every element once: one compare each is its arithmetic
    model = Model(reads=reads, flops=sum(reads.values()) // d.f)

    def run():
        resolve_inputs(s.layer, s.graph, s.x_in, s.edge_attr)
        s.layer.params.check_finite()

    return Kernel("check_x", "checks: x, edge_attr, params finite", model, run if s else None)


def k_projections(d, s=None):
    """``xl = x_src @ W_l.T + b_l`` and ``xr = x_dst @ W_r.T + b_r``: the tile (or BLAS) by row chunks, or the sparse kernel."""
    out = {"xl": d.ns * d.hc * d.f, "xr": d.n * d.hc * d.f}
    if d.x_sparse:
        w_bytes = d.in_features * d.hc * d.f
        # W.T made contiguous (read + write), then one pass over x with rows of W_l.T, W_r.T gathered
        model = Model(
            reads={"x_indptr": (d.n + 1) * d.xi, "x_indices": d.x_nnz * d.xi, "x": d.x_nnz * d.f, "W": 2 * w_bytes},
            writes={**out, "W_T": 2 * w_bytes},
            gathers=[Gather("W_l_T", d.x_nnz, d.hc * d.f, w_bytes), Gather("W_r_T", d.x_nnz, d.hc * d.f, w_bytes)],
            flops=2 * 2 * d.x_nnz * d.hc + 2 * d.n * d.hc,
        )

        def run():
            n = d.n
            sparse_matmul2(s.x, s.W_l.T, s.W_r.T, s.b_l, s.b_r, s.xl.reshape(n, d.hc), s.xr.reshape(n, d.hc))

        return Kernel("projections", "sparse x @ W_l.T, x @ W_r.T (csr_dense_matmul2_rows)", model, run if s else None)
    reads = {"x": d.ns * d.in_features * d.f}
    if d.bipartite:
        reads["x_dst"] = d.n * d.fd * d.f
    reads["W"] = d.hc * (d.in_features + d.fd) * d.f
    model = Model(reads=reads, writes=out, blas=True,
                  flops=2 * d.ns * d.in_features * d.hc + d.ns * d.hc + 2 * d.n * d.fd * d.hc + d.n * d.hc)

    def run():
        with blas_single_thread():
            xl, xr = s.xl.reshape(d.ns, d.hc), s.xr.reshape(d.n, d.hc)
            if d.bipartite:  # as the layer: one product per side
                dense_projections(s.x_src, [(s.W_l, s.b_l_opt, xl)])
                dense_projections(s.x_dst, [(s.W_r, s.b_r_opt, xr)])
            else:
                dense_projections(s.x_src, [(s.W_l, s.b_l_opt, xl), (s.W_r, s.b_r_opt, xr)])

    label = "x_src @ W_l.T, x_dst @ W_r.T (tile, FMA)" if d.bipartite else "x @ W_l.T, x @ W_r.T (tile, FMA)"
    return Kernel("projections", label, model, run if s else None)


def _edge_reads(d):
    """The edge attributes (CSR order) and the edge weights, read in order by a pass."""
    if not d.edge_dim:
        return {}
    return {"u": d.nnz * d.edge_dim * d.f, "weT": d.hc * d.edge_dim * d.f}


def k_forward(d, s=None):
    """Fused forward ``gatv2_forward_rows``: scores, row softmax, aggregation, and the output bias and its
    finiteness check as each row is written; one ``xl[j]`` gather per edge."""
    row = d.hc * d.f
    D = d.edge_dim
    model = Model(
        reads={"indptr": (d.n + 1) * d.i, "indices": d.nnz * d.i, "xr": d.n * row, "att": row, **_edge_reads(d)},
        writes={"alpha": d.nnz * d.heads * d.f, "out": d.n * row},
        gathers=[Gather("xl", d.nnz, row, d.ns * row)],
        # per edge and channel: z add (+ D mul + add with edge features), slope mul, att mul, score add;
        # aggregation mul + add. Per edge and head: subtract max, exp, add to denominator, normalise;
        # per node and head: 1 / denom; per output value: the bias add and the finiteness mark (v - v, +)
        flops=(6 + 2 * D) * d.nnz * d.hc + 4 * d.nnz * d.heads + d.n * d.heads + 3 * d.n * d.hc,
    )

    def run():
        s.run_forward()

    return Kernel("forward", "fused forward (gatv2_forward_rows)", model, run if s else None, edge=True)


def k_check_grad(d, s=None):
    """Backward input check (``grad_out`` finite), for a layer without a bias: one read is the minimum.

    With a bias, the target pass sums ``grad_out`` per block of rows for the bias
    gradient, and the sums check it (see :func:`k_target`): no pass of its own.
    """
    model = Model(reads={"grad": d.n * d.hc * d.f}, flops=d.n * d.hc)  # a compare per element

    def run():
        V.check_dense(s.grad_out, "grad_out", (d.n, d.hc), s.dtype)

    return Kernel("check_grad", "checks: grad_out finite", model, run if s else None)


def k_target(d, s=None):
    """Backward target pass ``gatv2_backward_target_blocks``: ``A_ij``, ``δ_ij``, ``P_i``, ∂a partials (and ∂u, ∂W_E
    partials); one ``xl[j]`` gather per edge. On a batch of small graphs it also sums ``Q_j`` (the source
    pass, then only for the graphs its chunks cut: timed with it)."""
    row = d.hc * d.f
    edge = d.nnz * d.heads * d.f
    ehc = d.nnz * d.hc
    D = d.edge_dim
    z = 1 + 2 * D  # forming z_ij per edge and channel
    # dot A_ij (mul + add), z, ∂a (slope mul, δ mul, add)
    per_edge_channel = 2 + z + 3
    if D:  # q_ij = δ a s (2 mul), ∂u_ij = W_Eᵀ q_ij (mul + add per d), ∂W_E += q_ij u_ij (mul + add per d)
        per_edge_channel += 2 + 4 * D
    if d.theta_r == "pairwise":
        # the row's slopes (z again), then per pair and head: α α (A - A) (2 mul + sub),
        # per pair and channel: (s - s), mul, add
        flops = (per_edge_channel + z) * ehc + 3 * d.pairs * d.heads + 3 * d.pairs * d.hc
    else:
        flops = (per_edge_channel + 2) * ehc  # P (δ mul, add)
    flops += 4 * d.nnz * d.heads + d.n * d.hc  # Ā_i and δ_ij per edge and head; P_i *= a per node
    writes = {"upstream": edge, "delta": edge, "p_term": d.n * row, "att_part": d.att_blocks * row}
    if d.bias:  # the bias gradient's block sums of grad (an add per element), which also check it
        flops += d.n * d.hc
        writes["bias_part"] = d.att_blocks * row
    if D:
        writes.update(grad_u=d.nnz * D * d.f, we_part=d.att_blocks * row * D)
    if d.source_records:
        writes["records"] = d.nnz * d.record  # weight, δ and the signs as bits, per edge
    if d.source_sums:  # and the source pass: each edge's term of Q_j (as k_source's, z already formed)
        flops += 5 * ehc
        writes["q_term"] = d.ns * row
    model = Model(
        reads={"indptr": (d.n + 1) * d.i, "indices": d.nnz * d.i, "xr": d.n * row, "grad": d.n * row,
               "alpha": edge, "att": row, **_edge_reads(d)},
        writes=writes,
        gathers=[Gather("xl", d.nnz, row, d.ns * row)],
        flops=flops,
    )

    def run():
        s.run_target()

    return Kernel("target", "backward target pass", model, run if s else None, edge=True)


def k_source(d, s=None):
    """Backward source pass ``gatv2_backward_source_rows``: ``Q_j`` in source-major order; gathers ``xr[i]``,
    ``grad[i]``, ``alpha[e]``, ``delta[e]`` (and ``u[e]``) per edge, reads ``xl[j]`` in order; on big graphs
    (``records.gatv2_backward_source_record_rows``) ``grad[i]`` and the edge's record instead."""
    row = d.hc * d.f
    erow = d.heads * d.f
    D = d.edge_dim
    gathers = [Gather("grad", d.nnz, row, d.n * row)]
    reads = {"src_indptr": (d.ns + 1) * d.i, "src_edges": d.nnz * d.i, "src_targets": d.nnz * d.i, "att": row}
    # per edge and channel: δ·a mul, ·s mul, α·g mul, add, accumulate; forming z: add (+ D mul + add)
    flops = 5 * d.nnz * d.hc
    if d.source_records:  # weight, δ and z > 0 read per edge (the target pass wrote them) instead of forming z
        gathers.append(Gather("records", d.nnz, d.record, d.nnz * d.record))
    else:
        gathers += [Gather("alpha", d.nnz, erow, d.nnz * erow), Gather("delta", d.nnz, erow, d.nnz * erow)]
        gathers.insert(0, Gather("xr", d.nnz, row, d.n * row))
        reads["xl"] = d.ns * row
        flops += (1 + 2 * D) * d.nnz * d.hc
        if D:
            gathers.append(Gather("u", d.nnz, D * d.f, d.nnz * D * d.f))
            reads["weT"] = d.hc * D * d.f
    model = Model(reads=reads, writes={"q_term": d.ns * row}, gathers=gathers, flops=flops)

    def run():
        s.run_source()

    return Kernel("source", "backward source pass", model, run if s else None, edge=True)


def k_edge_weight_grad(d, s=None):
    """``∂L/∂W_E``: the target pass's per-block partial sums added in block order, laid out as ``W_E``."""
    part = d.att_blocks * d.hc * d.edge_dim * d.f
    model = Model(reads={"we_part": part}, writes={"gW_e": d.hc * d.edge_dim * d.f},
                  flops=d.att_blocks * d.hc * d.edge_dim)

    def run():
        we = s.we_part.sum(axis=0)
        np.ascontiguousarray(we.transpose(0, 2, 1).reshape(d.hc, d.edge_dim))

    return Kernel("edge_weight_grad", "∂W_E: sum of the block partials", model, run if s else None)


def k_dense_backward(d, s=None):
    """``gradᵀ x`` for both weights, their bias sums and the input gradients ``grad @ W`` (the tile with FMA, or BLAS)."""
    gl, gr = d.ns * d.hc * d.f, d.n * d.hc * d.f
    xs, xd = d.ns * d.in_features * d.f, d.n * d.fd * d.f
    w = d.hc * (d.in_features + d.fd) * d.f
    flops = 4 * d.ns * d.hc * d.in_features + 4 * d.n * d.hc * d.fd + d.ns * d.hc + d.n * d.hc
    if d.bipartite:
        model = Model(reads={"x": xs, "x_dst": xd, "q_term": gl, "p_term": gr, "W": w},
                      writes={"grad_x": xs, "grad_x_dst": xd, "gW": w}, flops=flops, blas=True)
    else:  # one grad_x: grad_l @ W_l, then + grad_r @ W_r (one add per element)
        model = Model(reads={"x": xs, "q_term": gl, "p_term": gr, "W": w},
                      writes={"grad_x": xs, "gW": w}, flops=flops + d.n * d.in_features, blas=True)

    def run():
        with blas_single_thread():
            if d.bipartite:  # as the layer: one side at a time
                dense_backward(s.x_src, s.grad_xl, None, s.W_l, None, s.grad_x_src, d.bias)
                dense_backward(s.x_dst, s.grad_xr, None, s.W_r, None, s.grad_x_dst, d.bias)
            else:
                dense_backward(s.x_src, s.grad_xl, s.grad_xr, s.W_l, s.W_r, s.grad_x_src, d.bias)

    return Kernel("dense_backward", "gradᵀ x, grad @ W (tile, FMA)", model, run if s else None)


def k_sparse_transpose(d, s=None):
    """``x.T.tocsr()`` (scipy), which the layer needs for the sparse weight gradients."""
    nz = d.x_nnz * (d.xi + d.f)
    model = Model(reads={"x_indptr": (d.n + 1) * d.xi, "x": nz},
                  writes={"x_t_indptr": (d.in_features + 1) * d.xi, "x_t": nz})

    def run():
        s.x_src.T.tocsr()

    return Kernel("sparse_transpose", "x.T.tocsr() (scipy)", model, run if s else None)


def k_sparse_weight_grads(d, s=None):
    """``(x_t @ grad_l).T``, ``(x_t @ grad_r).T`` (``csr_dense_matmul2_rows``), made contiguous, and the bias sums."""
    gb = d.n * d.hc * d.f
    wb = d.in_features * d.hc * d.f
    model = Model(
        reads={"x_t_indptr": (d.in_features + 1) * d.xi, "x_t": d.x_nnz * (d.xi + d.f),
               "q_term": gb, "p_term": gb, "gW_T": 2 * wb},
        writes={"gW_T": 2 * wb, "gW": 2 * wb},
        gathers=[Gather("q_term", d.x_nnz, d.hc * d.f, gb), Gather("p_term", d.x_nnz, d.hc * d.f, gb)],
        flops=2 * 2 * d.x_nnz * d.hc + 2 * d.n * d.hc,
    )

    def run():
        x_t = s.x_t
        g_l = np.empty((x_t.shape[0], d.hc), s.dtype)
        g_r = np.empty((x_t.shape[0], d.hc), s.dtype)
        empty = np.zeros(0, s.dtype)
        sparse_matmul2(x_t, s.grad_xl, s.grad_xr, empty, empty, g_l, g_r)
        np.ascontiguousarray(g_l.T)
        np.ascontiguousarray(g_r.T)
        s.grad_xl.sum(axis=0)
        s.grad_xr.sum(axis=0)

    return Kernel("sparse_weight_grads", "sparse x_tᵀ grad (csr_dense_matmul2_rows) + bias sums", model,
                  run if s else None)


def kernels_for(d, s=None):
    """The kernels of one forward + backward, in the order the layer runs them."""
    ks = [k_check_x, k_projections, k_forward] + ([] if d.bias else [k_check_grad]) + [k_target]
    ks += [] if d.source_sums else [k_source]
    if d.edge_dim:
        ks.append(k_edge_weight_grad)
    ks += [k_sparse_transpose, k_sparse_weight_grads] if d.x_sparse else [k_dense_backward]
    return [k(d, s) for k in ks]


def step_bound(d, rates, cache_bytes=None):
    """The bound of one whole forward + backward step from the model alone (no per-pass gather probe).

    Returns the step bound in seconds, whether the step counts as
    cache-resident (its footprint at most ``cache_bytes``, default the
    rates' cache size), the footprint and each kernel's bound.
    """
    kernels = kernels_for(d)
    footprint = step_footprint(kernels)
    cache = rates.cache_bytes if cache_bytes is None else cache_bytes
    in_cache = footprint <= cache
    per = {k.name: bound(k.model, rates, in_cache)["bound_s"] for k in kernels}
    return {"bound_s": float(sum(per.values())), "in_cache": in_cache, "footprint_bytes": footprint,
            "kernels": per}
