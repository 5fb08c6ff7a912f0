"""GATv2 backward pass in closed form (see docs/MATH.md).

Two passes over the edges:

1. **target pass** (parallel over targets ``i``): ``A_ij = g_i · x_j``,
   ``δ_ij = α_ij (A_ij - Ā_i)``, the Θ_R term ``P_i`` and the per-row
   partial sums of ``∂L/∂a``. ``P_i`` comes in two forms that agree to
   rounding: the O(N) one, ``a ⊙ Σ_k s_ik δ_ik``, and the paper's pairwise
   O(N²) one, ``a ⊙ Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij - s_ik)``.
2. **source pass** (parallel over sources ``j``, in the graph's cached
   source-major order): ``Q_j = Σ_i (δ_ij a ⊙ s_ij + α̃_ij g_i)``.

Each ``prange`` iteration writes only its own row; the cross-row sums
(``∂L/∂a``, weight gradients) are done afterwards by the caller in a fixed
order, so results are the same bits for any thread count.
"""

from numba import njit, prange

from .activations import act, act_slope


@njit(parallel=True, cache=True)
def gatv2_backward_target(
    indptr, indices, xl, xr, att, slope, kind, edge_scale, alpha, grad, pairwise,
    upstream, delta, p_out, att_rows,
):
    """Target pass.

    ``grad`` (n, H, C) is the upstream gradient per head. Writes
    ``upstream`` (E, H) = ``A_ij`` (scaled by the dropout mask),
    ``delta`` (E, H) = ``∂L/∂e_ij``, ``p_out`` (n, H, C) = ``P_i`` and
    ``att_rows`` (n, H, C) = ``Σ_k δ_ik act(z_ik)`` per row.
    """
    n = indptr.size - 1
    heads = att.shape[0]
    channels = att.shape[1]
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    for i in prange(n):
        start = indptr[i]
        end = indptr[i + 1]
        for h in range(heads):
            for c in range(channels):
                p_out[i, h, c] = zero
                att_rows[i, h, c] = zero
            if start == end:
                continue
            mean_a = zero
            for e in range(start, end):
                j = indices[e]
                a_ij = zero
                for c in range(channels):
                    a_ij += grad[i, h, c] * xl[j, h, c]
                if dropout:
                    a_ij = a_ij * edge_scale[e, h]
                upstream[e, h] = a_ij
                mean_a += alpha[e, h] * a_ij
            for e in range(start, end):
                j = indices[e]
                d = alpha[e, h] * (upstream[e, h] - mean_a)
                delta[e, h] = d
                for c in range(channels):
                    z = xr[i, h, c] + xl[j, h, c]
                    att_rows[i, h, c] += d * act(z, kind, slope)
                    if not pairwise:
                        p_out[i, h, c] += d * act_slope(z, kind, slope)
            if pairwise:
                # The paper's form: sum over unordered pairs of in-edges.
                for e1 in range(start, end):
                    j1 = indices[e1]
                    for e2 in range(e1 + 1, end):
                        w = alpha[e1, h] * alpha[e2, h] * (upstream[e1, h] - upstream[e2, h])
                        j2 = indices[e2]
                        for c in range(channels):
                            s1 = act_slope(xr[i, h, c] + xl[j1, h, c], kind, slope)
                            s2 = act_slope(xr[i, h, c] + xl[j2, h, c], kind, slope)
                            p_out[i, h, c] += w * (s1 - s2)
            for c in range(channels):
                p_out[i, h, c] *= att[h, c]


@njit(parallel=True, cache=True)
def gatv2_backward_source(
    src_indptr, src_edges, targets, xl, xr, att, slope, kind, edge_scale, alpha,
    delta, grad, q_out,
):
    """Source pass: ``q_out`` (n, H, C) = ``Q_j``, the gradient of ``xl[j]``."""
    n = src_indptr.size - 1
    heads = att.shape[0]
    channels = att.shape[1]
    dropout = edge_scale.shape[0] > 0
    zero = xl.dtype.type(0.0)
    for j in prange(n):
        for h in range(heads):
            for c in range(channels):
                q_out[j, h, c] = zero
        for p in range(src_indptr[j], src_indptr[j + 1]):
            e = src_edges[p]
            i = targets[e]
            for h in range(heads):
                d = delta[e, h]
                w = alpha[e, h]
                if dropout:
                    w = w * edge_scale[e, h]
                for c in range(channels):
                    z = xr[i, h, c] + xl[j, h, c]
                    q_out[j, h, c] += d * att[h, c] * act_slope(z, kind, slope) + w * grad[i, h, c]
