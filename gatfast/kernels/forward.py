"""GATv2 forward pass: scores, row softmax and aggregation, fused per row.

Arrays (one layer, ``H`` heads of ``C`` channels, ``n_dst`` target rows,
``n_src`` sources, ``E`` edges, ``D`` edge features):

* ``indptr`` (n_dst+1,), ``indices`` (E,): CSR by target, sources in ``[0, n_src)``.
* ``xl`` (n_src, H, C): source projections ``Θ_L h̃_j``; ``xr`` (n_dst, H, C):
  target projections ``Θ_R h̃_i``.
* ``att`` (H, C); ``slope``: LeakyReLU negative slope in the arrays' dtype.
* ``u`` (E, D) edge attributes in CSR order and ``weT`` (H, D, C) the edge
  weights (see ``edge.py``): only the ``*_edge_*`` kernels take them.
* ``edge_scale`` (E, H) or (0, H): attention-dropout multipliers
  (``m_ij / (1 - p)``); an empty array means no dropout.
* outputs: ``alpha`` (E, H) softmax weights, ``out`` (n_dst, H, C) per head.

:func:`gatv2_forward_rows` (and :func:`gatv2_forward_edge_rows`, with edge
features) computes the rows ``[r0, r1)`` and releases the GIL: ``gatfast._runtime.run_rows`` runs it once over all rows for small
work, or over chunks of rows on a thread pool. Each row writes only its own
outputs and every sum runs in a fixed order, so the result is the same bits
for any thread count. The two kernels are separate functions (sharing the
softmax and ``combine_rows``) so that a run compiles only the one it uses.
Nothing of size E x C is ever allocated: ``z_ij`` is recomputed per edge.
``ahead`` picks the prefetch of the gathered rows ``xl[j]``: those of the
edge ``ahead`` positions on, or with ``prefetch.WINDOW`` (batches of small
graphs, whose sources lie a few rows from their targets) the row a few
rows past each target.
All arithmetic stays in the arrays' dtype.

With ``finish`` the kernels also finish the layer's output where it is the
aggregation itself (heads concatenated or one head, no root weight or
residual): each row gets the output bias added as it is written, and the
kernels return whether the rows are finite, so the layer makes no separate
pass over its output to add the bias and check it (``rowwise.add_bias_finite``,
the same operations and bits). On ``small-batch`` that pass had cost 0.2-0.3 ms
of a 6-8 ms step.

The aggregation finds the rows ``xl[j]`` of a target still in cache from
its scores. With several heads of whole 8-lane vectors it sums every head
in one walk over the row's edges (``combine_rows`` with ``ALL_HEADS``): on
Cora's 8 heads x 8 channels the kernel took 1.33 ms instead of 1.46 (one
thread, Intel Xeon). A dropped edge is added as ``0 * xl[j]`` rather than skipped:
the same bits for finite ``xl`` (``out`` starts at +0, and a sum that starts
at +0 never becomes -0, so adding +-0 changes nothing), and a branch taken
at random (p = 0.6) cost more than the work it saved. An overflowed
``xl[j]`` gives NaN, with dropout as without, and the layer's output check
refuses it.

With several heads whose channels fill whole vectors, the kernel without
edge features forms an edge's scores of every head at once
(``head_sums.py``) in a loop of its own: with that call in the per-head
loop, the one-head kernel took 1.03x the time. Both kernels run the softmax
of several float32 heads as vector code (``softmax.py``, with its own
exponential) and every other as :func:`_row_softmax`, and write the
aggregation loop in their own bodies. A helper inlined by Numba
(``inline="always"``) copies the arrays it takes into new variables, with a
reference-count increment and decrement each (atomic calls into Numba's
runtime); Numba prunes most of them, but not always: the edge kernel, whose
softmax and aggregation were one helper that called two others, kept 14 of
those calls per row (``_row_softmax`` alone keeps none). Written out, it
took 0.70x the time on batches of small graphs with edge features (1 x 32
channels, 2 threads, Intel Xeon, old and new kernels alternating in one
process). ``tests/test_kernel_refcounts.py`` checks that no edge kernel
calls them inside a loop.
"""

import math

import numpy as np
from numba import njit

from .activations import LEAKY_RELU, act
from .combine import combine_rows
from .edge import edge_z
from .head_sums import leaky_scores
from .ir_parts import ALL_HEADS, heads_at_once, typed_contiguous
from .prefetch import WINDOW, prefetch_row, window_rows
from .simd import leaky_dot, leaky_edge_score, leaky_score
from .softmax import softmax_row


@njit(nogil=True, cache=True)
def gatv2_forward_rows(
    r0, r1, indptr, indices, xl, xr, att, slope, kind, ahead, edge_scale, bias, finish, alpha, out
):
    """Forward pass of the target rows ``[r0, r1)``, without edge features (see the module docstring).

    ``ahead``: what the edge loop prefetches (``prefetch.WINDOW``: the row ``xl`` a few rows past each
    target, for batches of small graphs; else the rows of the edge ``ahead`` positions on).
    ``finish``: ``out`` is the layer's output; ``bias`` (``H*C`` values, or none) is added to its rows and
    the return value says whether they are all finite (True without ``finish``).
    """
    nnz = indices.size
    heads = att.shape[0]
    channels = att.shape[1]
    row_bytes = heads * channels * xl.itemsize
    window = window_rows(row_bytes)
    by_edge = nnz if ahead == WINDOW else ahead  # nnz: no edge is that far ahead
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    marks = np.zeros(heads * channels if finish else 0, xl.dtype)  # see _finish_marks
    with_bias = bias.size > 0
    if with_bias and bias.size != heads * channels:  # read without bounds checks
        raise ValueError("bias must have heads * channels values")
    # the SIMD score needs contiguous channels (always true for the layer's buffers)
    simd = kind == LEAKY_RELU and xl.strides[2] == xl.itemsize and xr.strides[2] == xr.itemsize \
        and att.strides[1] == att.itemsize
    # every head's score at once (head_sums.py)
    together = simd and heads_at_once(heads, channels) and typed_contiguous(att, xr, xl, alpha)
    for i in range(r0, r1):
        start = indptr[i]
        end = indptr[i + 1]
        if ahead == WINDOW and i + window < xl.shape[0]:
            prefetch_row(xl, i + window, row_bytes)
        # scores e_ij of all heads, kept in alpha until normalised; one gather
        # of xl[j] per edge, the rows of later edges (or of the window above) prefetched
        # every head at once (head_sums.py); `together` implies what leaky_scores needs to write
        # (heads_at_once: whole vectors; typed_contiguous: its arrays), so it always writes
        for e in range(start, end if together else start):
            if e + by_edge < nnz:
                prefetch_row(xl, indices[e + by_edge], row_bytes)
            leaky_scores(att, xr, i, xl, indices[e], slope, alpha, e)
        for e in range(start, start if together else end):
            if e + by_edge < nnz:
                prefetch_row(xl, indices[e + by_edge], row_bytes)
            j = indices[e]
            for h in range(heads):
                if simd:
                    alpha[e, h] = leaky_score(att, xr, i, xl, j, h, slope)
                else:
                    score = zero
                    for c in range(channels):
                        score += att[h, c] * act(xr[i, h, c] + xl[j, h, c], kind, slope)
                    alpha[e, h] = score
        if not softmax_row(alpha, start, end):  # float32: vector code (softmax.py)
            _row_softmax(alpha, start, end, heads, zero, one)
        # out[i, h] = sum_e a_ij (* m_ij) xl[j, h] for every head, the sums in registers (combine.py)
        combine_rows(out, i, ALL_HEADS, xl, indices, alpha, edge_scale, start, end)
        if finish:  # written here, not in a helper (see the module docstring)
            for h in range(heads):
                for c in range(channels):
                    v = out[i, h, c] + bias[h * channels + c] if with_bias else out[i, h, c]
                    out[i, h, c] = v
                    marks[h * channels + c] += v - v
    return _finish_marks(marks)


@njit(nogil=True, cache=True)
def gatv2_forward_edge_rows(
    r0, r1, indptr, indices, xl, xr, att, slope, kind, ahead, u, weT, edge_scale, bias, finish, alpha, out
):
    """:func:`gatv2_forward_rows` with the edge-feature term in ``z_ij`` (see ``edge.py``)."""
    nnz = indices.size
    heads = att.shape[0]
    channels = att.shape[1]
    # read without bounds checks (the intrinsics), so checked once here
    if u.shape[0] != nnz or weT.shape[0] != heads or weT.shape[1] != u.shape[1] or weT.shape[2] != channels:
        raise ValueError("u must have one row per edge and weT shape (heads, attributes, channels)")
    row_bytes = heads * channels * xl.itemsize
    window = window_rows(row_bytes)
    by_edge = nnz if ahead == WINDOW else ahead  # as gatv2_forward_rows
    zero = xl.dtype.type(0.0)
    one = xl.dtype.type(1.0)
    marks = np.zeros(heads * channels if finish else 0, xl.dtype)
    with_bias = bias.size > 0
    if with_bias and bias.size != heads * channels:  # read without bounds checks
        raise ValueError("bias must have heads * channels values")
    simd = kind == LEAKY_RELU and att.strides[1] == att.itemsize
    # z formed in registers needs contiguous channels in the rows it reads (the layer's buffers)
    in_registers = simd and xl.strides[2] == xl.itemsize and xr.strides[2] == xr.itemsize \
        and weT.strides[2] == weT.itemsize
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    for i in range(r0, r1):
        start = indptr[i]
        end = indptr[i + 1]
        if ahead == WINDOW and i + window < xl.shape[0]:
            prefetch_row(xl, i + window, row_bytes)
        for e in range(start, end):
            if e + by_edge < nnz:
                prefetch_row(xl, indices[e + by_edge], row_bytes)
            if in_registers:  # the same operations as edge_z then leaky_dot, without the scratch row
                for h in range(heads):
                    alpha[e, h] = leaky_edge_score(att, xr, i, xl, indices[e], u, weT, e, h, slope)
                continue
            edge_z(zb, xr, i, xl, indices[e], u, weT, e)
            for h in range(heads):
                if simd:
                    alpha[e, h] = leaky_dot(att, zb, 0, h, slope)
                else:
                    score = zero
                    for c in range(channels):
                        score += att[h, c] * act(zb[0, h, c], kind, slope)
                    alpha[e, h] = score
        if not softmax_row(alpha, start, end):  # float32: vector code (softmax.py)
            _row_softmax(alpha, start, end, heads, zero, one)
        combine_rows(out, i, ALL_HEADS, xl, indices, alpha, edge_scale, start, end)
        if finish:
            for h in range(heads):
                for c in range(channels):
                    v = out[i, h, c] + bias[h * channels + c] if with_bias else out[i, h, c]
                    out[i, h, c] = v
                    marks[h * channels + c] += v - v
    return _finish_marks(marks)


@njit(inline="always", cache=True)
def _finish_marks(marks):
    """Whether every mark is zero. Each channel's mark sums ``v - v`` over the rows' output values: +0
    while they are finite, NaN from the first NaN or inf on (``inf - inf`` is NaN). One mark per channel,
    not one per row, so the loop over the channels vectorises (as ``reduce.add_bias_rows_finite``)."""
    for c in range(marks.size):
        if not marks[c] == 0:
            return False
    return True


@njit(inline="always", cache=True)
def _row_softmax(alpha, start, end, heads, zero, one):
    """The scores in ``alpha[start:end]`` become each head's softmax weights (none for a row without edges);
    the row's maximum is subtracted, so large logits cannot overflow."""
    for h in range(heads if end > start else 0):
        row_max = alpha[start, h]
        for e in range(start + 1, end):
            if alpha[e, h] > row_max:
                row_max = alpha[e, h]
        denom = zero
        for e in range(start, end):
            w = math.exp(alpha[e, h] - row_max)
            alpha[e, h] = w
            denom += w
        inv = one / denom
        for e in range(start, end):
            alpha[e, h] = alpha[e, h] * inv
