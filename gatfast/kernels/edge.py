"""The pre-activation ``z_ij`` of one edge, with the edge-feature term.

``z_ij = (r_i + x_j) + Σ_d W_E[:, d] u_ij[d]``, the sum over ``d`` taken in
order ``d = 0, 1, ...``. Every kernel (and ``gatfast.diagnostics``, in
NumPy) forms ``z`` with exactly these operations, so all of them see the
same bits, hence the same LeakyReLU regimes.

``weT`` holds the edge weights as ``(H, D, C)`` (``W_E`` of shape
``(H·C, D)``, as PyG's ``lin_edge.weight``, reshaped and transposed per
head), so the inner loops run over contiguous channels.
"""

from numba import njit


@njit(inline="always", cache=True)
def edge_z(zb, xr, i, xl, j, u, weT, e):
    """Write ``z_ij`` of every head into ``zb[0]`` (shape ``(1, H, C)``)."""
    heads = zb.shape[1]
    channels = zb.shape[2]
    dims = u.shape[1]
    for h in range(heads):
        for c in range(channels):
            zb[0, h, c] = xr[i, h, c] + xl[j, h, c]
        for d in range(dims):
            ud = u[e, d]
            for c in range(channels):
                zb[0, h, c] += weT[h, d, c] * ud
