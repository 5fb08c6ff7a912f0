"""The pairwise Θ_R kernel (``kernels/pairwise.py``) against its plain loop, bit for bit.

The kernel keeps each row's sums over its pairs of edges in registers
(``pairwise.pair_sums``); the loop it replaced added every pair's term to
the row of sums in memory, in the same order. The reference here is that
loop, written with NumPy's element-wise float operations (one IEEE
operation per element, in the arrays' dtype), so the bits must agree at
every width, head count and dtype, with and without edge features.
"""

import numpy as np
import pytest

from gatfast.kernels import ACTIVATIONS, LEAKY_RELU
from gatfast.kernels.pairwise import gatv2_pairwise_theta_r_rows


def _plain_pairwise(indptr, indices, xl, xr, att, slope, u, weT, alpha, upstream):
    """``P_i`` as the kernel's former loop formed it: z, the slopes, then the pairs in order from zero."""
    dtype = xl.dtype.type
    n, heads, channels = xr.shape
    out = np.empty((n, heads, channels), xl.dtype)
    for i in range(n):
        edges = range(indptr[i], indptr[i + 1])
        slopes = []
        for e in edges:
            z = xr[i] + xl[indices[e]]
            for d in range(u.shape[1] if u.shape[0] else 0):  # edge.edge_z: the attributes in order
                z = z + weT[:, d, :] * u[e, d]
            slopes.append(np.where(z > 0, dtype(1.0), slope).astype(xl.dtype))
        for h in range(heads):
            total = np.zeros(channels, xl.dtype)
            for a, e1 in enumerate(edges):
                for b, e2 in enumerate(edges[a + 1 :], start=a + 1):
                    w = alpha[e1, h] * alpha[e2, h] * (upstream[e1, h] - upstream[e2, h])
                    total = total + w * (slopes[a][h] - slopes[b][h])
            out[i, h] = total * att[h]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "heads, channels", [(1, 1), (1, 7), (1, 8), (2, 9), (1, 16), (3, 17), (1, 33), (1, 64)]
)
@pytest.mark.parametrize("dims", [0, 3])
def test_pairwise_kernel_gives_the_plain_loops_bits(dtype, heads, channels, dims):
    rng = np.random.default_rng(100 * channels + 10 * heads + dims)
    n = 24
    degrees = rng.integers(0, 9, n)  # rows without edges, with one, and with up to 8
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int64)
    edges = indices.size
    xl, xr = (rng.standard_normal((n, heads, channels)).astype(dtype) for _ in range(2))
    att = rng.standard_normal((heads, channels)).astype(dtype)
    u = rng.standard_normal((edges if dims else 0, max(dims, 1))).astype(dtype)
    weT = rng.standard_normal((heads, max(dims, 1), channels)).astype(dtype)
    alpha = rng.random((edges, heads)).astype(dtype)
    upstream = (rng.standard_normal((edges, heads)) * 1e3).astype(dtype)  # magnitudes that show the order
    slope = dtype(0.2)
    p = np.full((n, heads, channels), np.nan, dtype)
    gatv2_pairwise_theta_r_rows(
        0, n, indptr, indices, xl, xr, att, slope, LEAKY_RELU, u, weT, alpha, upstream, p
    )
    want = _plain_pairwise(indptr, indices, xl, xr, att, slope, u, weT, alpha, upstream)
    np.testing.assert_array_equal(p.view(f"u{p.itemsize}"), want.view(f"u{p.itemsize}"))


def test_pairwise_kernel_on_strided_rows_and_another_activation_matches_the_contiguous_one():
    """Rows that are not C-contiguous take the scalar sums: the same bits as the vector ones."""
    rng = np.random.default_rng(7)
    n, heads, channels = 20, 2, 17
    indptr = np.arange(n + 1, dtype=np.int64) * 5
    indices = rng.integers(0, n, indptr[-1]).astype(np.int64)
    xl, xr = (rng.standard_normal((n, heads, channels)).astype(np.float32) for _ in range(2))
    att = rng.standard_normal((heads, channels)).astype(np.float32)
    u, weT = np.empty((0, 1), np.float32), np.zeros((heads, 1, channels), np.float32)
    alpha = rng.random((indices.size, heads)).astype(np.float32)
    upstream = rng.standard_normal((indices.size, heads)).astype(np.float32)
    for kind in sorted(set(ACTIVATIONS.values())):
        outs = []
        for strided in (False, True):
            p = np.full((n, heads, 2 * channels if strided else channels), np.nan, np.float32)
            view = p[:, :, ::2] if strided else p
            gatv2_pairwise_theta_r_rows(
                0, n, indptr, indices, xl, xr, att, np.float32(0.2), kind, u, weT, alpha, upstream, view
            )
            outs.append(view.copy())
        np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
