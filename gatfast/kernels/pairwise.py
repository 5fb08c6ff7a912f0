"""The Θ_R term in the paper's pairwise form (see docs/MATH.md).

``P_i = a ⊙ Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij - s_ik)``, a sum over
unordered pairs of in-edges: O(deg²) per row, against the O(deg) form
``a ⊙ Σ_k s_ik δ_ik`` the target pass writes. The two agree to rounding;
this kernel overwrites the target pass's ``P_i`` when the pairwise form is
asked for (``theta_r="pairwise"``), so the fast passes carry no trace of it
and it is compiled only when used.
"""

import numpy as np
from numba import njit

from .activations import act_slope
from .edge import edge_z


@njit(nogil=True, cache=True)
def gatv2_pairwise_theta_r_rows(
    r0, r1, indptr, indices, xl, xr, att, slope, kind, u, weT, alpha, upstream, p_out
):
    """``p_out[i]`` = the pairwise ``P_i`` for rows ``[r0, r1)``.

    ``upstream`` (E, H) holds ``A_ij`` from the target pass. ``u`` (E, D)
    and ``weT`` (H, D, C) add the edge term to ``z_ij``; ``u`` of shape
    (0, D) means no edge features. The slopes ``s_ik`` of a row are
    computed once (scratch of the rows' largest in-degree x H x C, made once
    per call), then every pair costs one multiply-add per channel.
    """
    heads = p_out.shape[1]
    channels = p_out.shape[2]
    has_edge = u.shape[0] > 0
    zero = xl.dtype.type(0.0)
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    degree = 0
    for i in range(r0, r1):
        degree = max(degree, indptr[i + 1] - indptr[i])
    s = np.empty((degree, heads, channels), dtype=xl.dtype)
    for i in range(r0, r1):
        start = indptr[i]
        end = indptr[i + 1]
        for e in range(start, end):
            j = indices[e]
            if has_edge:
                edge_z(zb, xr, i, xl, j, u, weT, e)
            else:
                for h in range(heads):
                    for c in range(channels):
                        zb[0, h, c] = xr[i, h, c] + xl[j, h, c]
            for h in range(heads):
                for c in range(channels):
                    s[e - start, h, c] = act_slope(zb[0, h, c], kind, slope)
        for h in range(heads):
            for c in range(channels):
                p_out[i, h, c] = zero
            for e1 in range(start, end):
                for e2 in range(e1 + 1, end):
                    w = alpha[e1, h] * alpha[e2, h] * (upstream[e1, h] - upstream[e2, h])
                    for c in range(channels):
                        p_out[i, h, c] += w * (s[e1 - start, h, c] - s[e2 - start, h, c])
            for c in range(channels):
                p_out[i, h, c] *= att[h, c]
