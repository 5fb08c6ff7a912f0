"""The attention part of a layer: the kernels' forward and backward passes.

Runs each kernel over all rows at once or in chunks on threads (the same
bits; see ``gatfast._runtime.run_rows``), prepares the edge weights and
the scratch arrays, and adds up the kernels' per-block partial sums in a
fixed order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _runtime
from .._random import RandomKeys
from ..graph.components import component_cuts
from ..kernels import (
    ACTIVATIONS,
    LEAKY_RELU,
    column_sum,
    gatv2_backward_source_edge_rows,
    gatv2_backward_source_ranges,
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
from ..kernels.backward import ATT_BLOCK
from ..kernels.prefetch import WINDOW, gather_prefetch, source_pass_ahead
from ..kernels.records import RECORD_MIN_ROW_BYTES
from ..kernels.reduce import column_sums
from .gradients import input_side_grads
from .inputs import edge_attr_grad
from .keys import attention_keep
from .rowwise import bias_gradient, check_by_sums, checked_bias_gradient

__all__ = [
    "NO_CUTS",
    "KernelConstants",
    "attention_backward",
    "attention_dropout",
    "attention_forward",
    "finishes_output",
    "forward_prefetch",
    "kernel_constants",
    "source_pass_left_over",
    "source_prefetch_distance",
    "source_sums_cuts",
    "uses_source_records",
]


class KernelConstants(NamedTuple):
    """What every kernel call of a layer passes unchanged, made once (read-only arrays)."""

    slope: object  # the LeakyReLU slope as a scalar of the layer's dtype
    kind: int  # the attention activation's code
    no_edges: np.ndarray  # (0, D): no edge attributes
    no_dropout: np.ndarray  # (0, H): no dropout multipliers
    no_edge_weights: np.ndarray  # (H, 1, C) zeros, for layers without edge features
    no_bias: np.ndarray  # (0,): an absent bias (writable like the parameters, so kernels see one type)
    no_parts: np.ndarray  # (0, H, C): no bias partial sums from the target pass (writable, as its outputs)


def _read_only(arr):
    arr.flags.writeable = False
    return arr


#: The target pass's ``cuts`` where it does not do the source pass (read-only, as the graphs' cached cuts).
NO_CUTS = _read_only(np.zeros(0, np.uint8))

#: The longest run of rows between two cuts (``graph.components``) of a graph whose target pass also does
#: the source pass (``backward.gatv2_backward_target_blocks``, ``cuts``): a quarter of a block of rows, so a
#: chunk of blocks cuts through at most a small part of its rows' graphs, whose sources are left to a
#: source pass over them alone. Batches of small graphs (molecules, road scenes, ``small-batch``'s 8-32
#: nodes) are far below it; one big graph (Cora) is one run, and keeps the source pass.
SOURCE_SUMS_MAX_RUN = ATT_BLOCK // 4


def source_sums_cuts(g, edge_features, records):
    """The ``cuts`` the target pass gets: the graph's (``graph.components``) where the pass also does the
    source pass (no edge features, no source records, a square graph of small components), else none."""
    if edge_features or records:
        return NO_CUTS
    found = component_cuts(g)
    return NO_CUTS if found is None or found[1] > SOURCE_SUMS_MAX_RUN else found[0]


def source_pass_left_over(summed, count, source_args):
    """After a target pass with cuts: the source pass of the sources its chunks did not sum (their ``(c0,
    c1)`` in ``summed``, the pass's return values), in one call on this thread; ``source_args()`` gives the
    arguments ``gatv2_backward_source_rows`` takes after its range (called only if a source is left: a few
    small graphs where a chunk ended in one, none on one thread)."""
    left, start = [], 0
    for c0, c1 in sorted(r for r in summed if r[1] > r[0]):
        if c0 > start:
            left.append((start, c0))
        start = c1
    if start < count:
        left.append((start, count))
    if left:
        gatv2_backward_source_ranges(np.array(left, np.int64), *source_args())


def kernel_constants(layer):
    """The :class:`KernelConstants` of ``layer``."""
    H, C, dtype = layer.heads, layer.out_features, layer.dtype
    return KernelConstants(dtype.type(layer.negative_slope), ACTIVATIONS[layer.attention_activation],  # read-only,
                           # like every array of this kind the kernels get (see kernels.readonly)
                           _read_only(np.zeros((0, layer.edge_dim or 1), dtype)),
                           _read_only(np.zeros((0, H), dtype)), _read_only(np.zeros((H, 1, C), dtype)),
                           np.zeros(0, dtype), np.zeros((0, H, C), dtype))


def attention_dropout(layer, inputs, rng, ws):
    """The multipliers ``m_ij / (1 - p)`` (E_att, H) of attention dropout.

    From a numpy Generator the mask is ``rng.random((E, H)) >= p`` (call
    order); from :class:`RandomKeys` each edge's draws depend on its global id.
    """
    g, H, dtype = inputs.attention, layer.heads, layer.dtype
    edge_scale = ws.empty("edge_scale", (g.nnz, H), dtype)
    if isinstance(rng, RandomKeys):
        return attention_keep(rng, inputs, layer.dropout, edge_scale, layer.root_weight is not None)
    draw = ws.empty("dropout_draw", (g.nnz, H), np.float64)
    rng.random(out=draw)  # the same stream as rng.random((nnz, H))
    np.multiply(draw >= layer.dropout, dtype.type(1.0 / (1.0 - layer.dropout)), out=edge_scale)
    return edge_scale


def _edge_weights(layer, params):
    """``W_e`` (H*C, D) as ``(H, D, C)``, contiguous over channels; a (H, 1, C) dummy without edge features."""
    H, C = layer.heads, layer.out_features
    if layer.edge_dim is None:
        return layer.constants.no_edge_weights
    return np.ascontiguousarray(params["W_e"].reshape(H, C, layer.edge_dim).transpose(0, 2, 1))


def _work(graph, layer, u):
    return graph.nnz * layer.heads * layer.out_features * (1 + u.shape[1] if u.shape[0] else 1)


def finishes_output(layer):
    """Whether the forward kernel's aggregation is the layer's output, so the kernel adds the output bias
    and checks the output as it writes it (one head or concatenated heads, no root weight or residual)."""
    return (layer.concat or layer.heads == 1) and layer.root_weight is None and not layer.residual


def attention_forward(layer, g, xl, xr, u, edge_scale, params, ws):
    """``(alpha, per_head, finite)``: attention weights (E, H), per-head aggregation (n_dst, H, C) and,
    where :func:`finishes_output`, whether that output (its bias added) is finite; else None."""
    H, C, dtype = layer.heads, layer.out_features, layer.dtype
    alpha = ws.empty("alpha", (g.nnz, H), dtype)
    per_head = ws.empty("out", (g.num_dst, H, C), dtype)
    k = layer.constants
    finish = finishes_output(layer)
    bias = params["bias"] if finish and layer.bias else k.no_bias
    head = (g.indptr, g.indices, xl, xr, params["att"], k.slope, k.kind, forward_prefetch(g, xl))
    tail = (readonly(edge_scale), bias, finish, alpha, per_head)
    if layer.edge_dim is None:
        finite = _runtime.run_rows(gatv2_forward_rows, g.num_dst, head + tail, _work(g, layer, u))
    else:
        edge = (readonly(u), readonly(_edge_weights(layer, params)))
        finite = _runtime.run_rows(gatv2_forward_edge_rows, g.num_dst, head + edge + tail, _work(g, layer, u))
    return alpha, per_head, (all(finite) if finish else None)


def forward_prefetch(g, xl):
    """What the forward kernels and the target pass prefetch of ``xl`` on graph ``g``: ``prefetch.WINDOW``
    on batches of small graphs, else an edge distance (``kernels.prefetch.gather_prefetch``)."""
    row_bytes = xl[0].nbytes if xl.shape[0] else 0
    return gather_prefetch(g.mean_edge_span() * row_bytes)


def source_prefetch_distance(g, xr, g_heads, alpha, edge_scale, u):
    """What the backward source pass prefetches on graph ``g``: None (nothing), ``prefetch.WINDOW`` or an edge
    distance (``kernels.prefetch.source_pass_ahead``).

    From the bytes of the rows it gathers (``xr``, ``g_heads`` per target;
    ``alpha``, ``delta``, ``edge_scale``, ``u`` per edge) and how far apart an
    edge's rows lie on average.
    """
    row_bytes = xr[0].nbytes if xr.shape[0] else 0
    edge_bytes = alpha.itemsize * alpha.shape[1] * (3 if edge_scale.shape[0] else 2) + u[:1].nbytes
    gathered = xr.nbytes + g_heads.nbytes + g.nnz * edge_bytes
    return source_pass_ahead(gathered, lambda: g.mean_edge_span() * row_bytes)


def uses_source_records(kind, ahead, row_bytes):
    """Whether a LeakyReLU layer's target pass writes each edge's source record (``kernels/records.py``:
    its weight, ``δ`` and the signs ``z > 0`` as bits) for the source pass to read, instead of that pass
    gathering ``xr[i]`` (and ``u[e]``) to form ``z`` again, and ``alpha[e]`` and ``delta[e]``.

    Where the source pass prefetches by edge (``ahead`` an edge distance: its gathers miss
    the cache) and the target rows it would gather, ``xr`` and the upstream
    gradient (``row_bytes`` in all), are more than
    :data:`~gatfast.kernels.records.RECORD_MIN_ROW_BYTES`: the records save
    gathers of those rows, and cost writes.
    """
    return ahead is not None and ahead != WINDOW and kind == LEAKY_RELU and row_bytes > RECORD_MIN_ROW_BYTES


def _bias_from_parts(bias_part, grad_out, check):
    """The output bias's gradient from the target pass's block sums, added in block order; with ``check``,
    NonFiniteError if ``grad_out`` holds NaN or inf (a non-finite one makes a non-finite sum, and only a
    non-finite sum, which finite values can also make by overflowing, needs the element-wise check)."""
    # the blocks added one after another from zero, as the one-call path adds them (column_sum would take
    # numpy's pairwise sum for a single column)
    parts = bias_part.reshape(bias_part.shape[0], -1)
    total = np.empty(parts.shape[1], parts.dtype)
    column_sums(readonly(parts), total)
    return check_by_sums(total, grad_out, "grad_out") if check else total


def attention_backward(layer, cache, grad_out, pairwise, ws, input_grad=True, edge_grad=True, check_grad=False):
    """Every gradient of the layer (see ``GATv2Layer.backward``); ``edge_grad=False``: no ``"edge_attr"``
    (None), and the target pass skips ``W_Eᵀ q_ij``. ``check_grad``: ``grad_out`` is not known to be finite,
    and the output bias's gradient checks it (NonFiniteError naming it; the layer has a bias)."""
    g = cache.graph
    n_dst, n_src = g.shape
    H, C, dtype = layer.heads, layer.out_features, layer.dtype
    params = cache.params
    u = cache.inputs.u
    dims = u.shape[1]
    grads = {}
    if layer.concat or H == 1:  # dividing by one head would change no bit
        g_heads = grad_out.reshape(n_dst, H, C)
    else:
        g_heads = ws.empty("g_heads", (n_dst, H, C), dtype)
        np.divide(grad_out[:, None, :], dtype.type(H), out=g_heads)
    # the bias gradient: summed by the target pass where g_heads is grad_out (see backward.check_bias_part)
    in_target_pass = layer.bias and (layer.concat or H == 1)
    if layer.bias and not in_target_pass:
        grads["bias"] = checked_bias_gradient(grad_out, "grad_out") if check_grad else bias_gradient(grad_out)

    kind, slope = layer.constants.kind, layer.constants.slope
    weT = readonly(_edge_weights(layer, params))
    u = readonly(u)
    g_heads = readonly(g_heads)
    blocks = num_att_blocks(n_dst)
    upstream = ws.empty("upstream", (g.nnz, H), dtype)
    delta = ws.empty("delta", (g.nnz, H), dtype)
    p_term = ws.empty("p_term", (n_dst, H, C), dtype)
    att_part = ws.empty("att_part", (blocks, H, C), dtype)
    bias_part = ws.empty("bias_part", (blocks, H, C), dtype) if in_target_pass else layer.constants.no_parts
    work = _work(g, layer, u)
    q_term = ws.empty("q_term", (n_src, H, C), dtype)
    head = (g.indptr, g.indices, cache.xl, cache.xr, params["att"], slope, kind)
    ahead = source_prefetch_distance(g, cache.xr, g_heads, cache.alpha, cache.edge_scale, u)

    def source_head():  # the source-major order: built (once per graph) only where a source pass runs
        src_indptr, src_edges = g.source_order()
        return (src_indptr, src_edges, ws.source_targets(g), cache.xl, cache.xr, params["att"], slope, kind, ahead)

    records = uses_source_records(kind, ahead, cache.xr.nbytes + g_heads.nbytes)
    if records:  # the target pass writes them, the source pass reads them (kernels/records.py)
        rec_signs = ws.empty("source_records", (g.nnz, record_bytes(H, C, dtype.itemsize)), np.uint8)
        rec_w = rec_signs.view(dtype)
    else:
        rec_w = rec_signs = None
    xl_prefetch = (forward_prefetch(g, cache.xl),)  # the target pass gathers xl as the forward does
    cuts = source_sums_cuts(g, layer.edge_dim is not None, records)  # and the target pass does the source pass
    summed = []
    if layer.edge_dim is None:
        summed = _runtime.run_rows(gatv2_backward_target_blocks, blocks, head + xl_prefetch + (
            cache.edge_scale, cache.alpha, g_heads, upstream, delta, p_term, att_part, bias_part, rec_w, rec_signs,
            cuts, q_term), work)
    else:
        we_part = ws.empty("we_part", (blocks, H, dims, C), dtype)  # every block zeroes its own
        grad_u = ws.empty("grad_u", (g.nnz if edge_grad else 0, dims), dtype)
        _runtime.run_rows(gatv2_backward_target_edge_blocks, blocks, head + xl_prefetch + (
            u, weT, cache.edge_scale, cache.alpha, g_heads, upstream, delta, p_term, att_part, we_part, grad_u,
            rec_w, rec_signs, bias_part), work)
    if in_target_pass:  # a non-finite grad_out is refused before the source pass
        grads["bias"] = _bias_from_parts(bias_part, grad_out, check_grad)
    if records:
        _runtime.run_rows(gatv2_backward_source_record_rows, n_src, (
            *source_head()[:3], params["att"], slope, ahead, readonly(rec_w), readonly(rec_signs), g_heads, q_term),
            work)
    elif cuts.size:
        source_pass_left_over(summed, n_src, lambda: source_head() + (cache.edge_scale, cache.alpha, delta, g_heads,
                                                                      q_term))
    elif layer.edge_dim is None:
        _runtime.run_rows(gatv2_backward_source_rows, n_src, source_head() + (
            cache.edge_scale, cache.alpha, delta, g_heads, q_term), work)
    else:
        _runtime.run_rows(gatv2_backward_source_edge_rows, n_src, source_head() + (
            u, weT, cache.edge_scale, cache.alpha, delta, g_heads, q_term), work)
    if pairwise:  # the paper's form replaces the O(N) P_i the target pass wrote
        _runtime.run_rows(gatv2_pairwise_theta_r_rows, n_dst, head + (u, weT, cache.alpha, upstream, p_term), work)
    grads["att"] = column_sum(att_part.reshape(blocks, H * C)).reshape(H, C)
    if layer.edge_dim is not None:
        we = column_sum(we_part.reshape(blocks, H * dims * C)).reshape(H, dims, C)
        grads["W_e"] = np.ascontiguousarray(we.transpose(0, 2, 1).reshape(H * C, dims))
        grads["edge_attr"] = edge_attr_grad(layer, cache.inputs, grad_u) if edge_grad else None

    # p_term and q_term are this call's scratch: update them in place
    grad_xr = p_term.reshape(n_dst, H * C)
    grad_xl = q_term.reshape(n_src, H * C)
    if layer.root_weight == "theta_r":
        grad_xr += g_heads.reshape(n_dst, H * C)
    grads.update(input_side_grads(layer, cache, grad_xl, grad_xr, g_heads, grad_out, ws, input_grad))
    return grads
