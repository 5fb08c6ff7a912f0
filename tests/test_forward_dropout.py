"""The forward kernels' aggregation under attention dropout, bit for bit.

The kernels add a dropped edge as ``0 * xl[j]`` instead of skipping it (a
branch taken at random cost more than the work). That must leave every bit
of the output as skipping would: the reference below skips dropped edges and
adds the kept ones one by one in float scalars, in the kernel's order.
"""

import naive
import numpy as np
import pytest

from gatfast.kernels import ACTIVATIONS, gatv2_forward_edge_rows, gatv2_forward_rows
from gatfast.kernels.prefetch import PREFETCH_DISTANCE


def _skip_dropped(indptr, indices, xl, alpha, edge_scale):
    """``out[i, h] = sum of (alpha * scale) * xl[j, h]`` over the kept edges of row ``i``, in row order."""
    n_dst = indptr.size - 1
    _, heads, channels = xl.shape
    out = np.zeros((n_dst, heads, channels), xl.dtype)
    for i in range(n_dst):
        for e in range(indptr[i], indptr[i + 1]):
            for h in range(heads):
                w = alpha[e, h] * edge_scale[e, h]
                if w == 0:
                    continue
                for c in range(channels):
                    out[i, h, c] += w * xl[indices[e], h, c]
    return out


def _case(dtype, channels, heads, seed):
    rng = np.random.default_rng(seed)
    g = naive.random_graph(rng, 30, 9, self_loops=True, empty_rows=2)
    xl = rng.normal(size=(30, heads, channels)).astype(dtype)  # negative values: 0 * xl[j] is -0
    xr = rng.normal(size=(30, heads, channels)).astype(dtype)
    att = rng.normal(size=(heads, channels)).astype(dtype)
    keep = rng.random((g.nnz, heads)) >= 0.6
    dropped_row = int(np.flatnonzero(np.diff(g.indptr) >= 2)[0])
    keep[g.indptr[dropped_row] : g.indptr[dropped_row + 1]] = False  # a row whose every edge is dropped
    edge_scale = (keep / dtype(0.4)).astype(dtype)
    return g, xl, xr, att, edge_scale, dropped_row


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [1, 7, 8, 9, 16, 17, 33])
@pytest.mark.parametrize("edge_features", [False, True])
def test_dropped_edges_leave_the_aggregation_bits_as_skipping_them(dtype, channels, edge_features):
    heads = 2
    g, xl, xr, att, edge_scale, dropped_row = _case(dtype, channels, heads, channels)
    alpha = np.empty((g.nnz, heads), dtype)
    out = np.empty((g.num_dst, heads, channels), dtype)
    head = (g.indptr, g.indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], PREFETCH_DISTANCE)
    if edge_features:
        rng = np.random.default_rng(1)
        u = rng.normal(size=(g.nnz, 3)).astype(dtype)
        weT = rng.normal(size=(heads, 3, channels)).astype(dtype)
        gatv2_forward_edge_rows(
            0, g.num_dst, *head, u, weT, edge_scale, np.zeros(0, dtype), False, alpha, out
        )
    else:
        gatv2_forward_rows(0, g.num_dst, *head, edge_scale, np.zeros(0, dtype), False, alpha, out)
    expected = _skip_dropped(g.indptr, g.indices, xl, alpha, edge_scale)
    # bit for bit, the sign of zero included (a row with every edge dropped is +0, never -0)
    int_type = np.int32 if dtype == np.float32 else np.int64
    np.testing.assert_array_equal(out.view(int_type), expected.view(int_type))
    assert not np.signbit(out[dropped_row]).any()
    assert (edge_scale > 0).any() and (edge_scale == 0).any()
