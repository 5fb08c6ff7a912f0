"""``ir_parts.for_heads``: an intrinsic given ``ALL_HEADS`` writes what it writes given each head in turn.

The kernels always pass ``ALL_HEADS`` and the intrinsics choose between one
walk for every head (several heads of whole vectors) and head by head; the
kernel tests compare the result with the plain loops, these compare the two
ways of asking, including what the intrinsic leaves to the kernel's loops.
"""

import numba
import numpy as np
import pytest

from gatfast.kernels.edge_sums import target_row_sums
from gatfast.kernels.ir_parts import ALL_HEADS
from gatfast.kernels.source_sums import source_edge_row_sums, source_row_sums


@numba.njit
def _target(indptr, indices, xl, xr, att, delta, p_out, att_part, every):
    firsts = np.empty(indptr.size - 1, np.int64)
    for i in range(indptr.size - 1):
        if every:
            firsts[i] = target_row_sums(
                p_out, att_part, 0, i, ALL_HEADS, xl, xr, att, indices, delta, indptr[i], indptr[i + 1], xl.dtype.type(0.2)
            )  # fmt: skip
        else:
            for h in range(att.shape[0]):
                firsts[i] = target_row_sums(
                    p_out, att_part, 0, i, h, xl, xr, att, indices, delta, indptr[i], indptr[i + 1], xl.dtype.type(0.2)
                )  # fmt: skip
    return firsts


@numba.njit
def _source(indptr, edges, targets, xl, xr, att, grad, alpha, delta, scale, u, weT, q_out, every, with_edges):
    firsts = np.empty(indptr.size - 1, np.int64)
    slope = xl.dtype.type(0.2)
    for j in range(indptr.size - 1):
        lo, hi = indptr[j], indptr[j + 1]
        for h in range(ALL_HEADS, ALL_HEADS + 1) if every else range(att.shape[0]):
            if with_edges:
                firsts[j] = source_edge_row_sums(
                    q_out, j, h, xl, xr, att, grad, edges, targets, alpha, delta, scale, u, weT, lo, hi, slope
                )
            else:
                firsts[j] = source_row_sums(
                    q_out, j, h, xl, xr, att, grad, edges, targets, alpha, delta, scale, lo, hi, slope
                )
    return firsts


def _graph(rng, n):
    degree = rng.integers(0, 7, n)
    degree[::5] = 0
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    return indptr, rng.integers(0, n, indptr[-1]).astype(np.int64)


# one head (by its index either way), heads of whole vectors (one walk), heads with tails (head by head)
SHAPES = [(1, 32), (1, 9), (8, 8), (4, 16), (2, 24), (3, 17), (2, 7), (5, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), SHAPES)
def test_the_target_sums_of_all_heads_are_each_heads(dtype, heads, channels):
    rng = np.random.default_rng(heads * 100 + channels)
    n = 30
    indptr, indices = _graph(rng, n)
    xl, xr = (rng.standard_normal((n, heads, channels)).astype(dtype) for _ in range(2))
    att = rng.standard_normal((heads, channels)).astype(dtype)
    delta = rng.standard_normal((indices.size, heads)).astype(dtype)
    results = []
    for every in (True, False):
        p_out = np.full((n, heads, channels), np.nan, dtype)
        att_part = np.zeros((1, heads, channels), dtype)
        firsts = _target(indptr, indices, xl, xr, att, delta, p_out, att_part, every)
        results.append((firsts, p_out, att_part))
    (f_all, p_all, a_all), (f_each, p_each, a_each) = results
    assert np.array_equal(f_all, f_each) and (f_all == channels - channels % 8).all()
    assert np.array_equal(p_all, p_each, equal_nan=True)  # the tails (NaN) left alike
    assert np.array_equal(a_all, a_each)
    assert np.isfinite(p_all[:, :, : channels - channels % 8]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("heads", "channels"), SHAPES)
@pytest.mark.parametrize("with_edges", [False, True])
def test_the_source_sums_of_all_heads_are_each_heads(dtype, heads, channels, with_edges):
    rng = np.random.default_rng(heads * 100 + channels + 7)
    n = 30
    indptr, indices = _graph(rng, n)
    targets = np.repeat(np.arange(n), np.diff(indptr))
    order = np.argsort(indices, kind="stable").astype(np.int64)
    src_indptr = np.concatenate([[0], np.cumsum(np.bincount(indices, minlength=n))]).astype(np.int64)
    xl, xr, grad = (rng.standard_normal((n, heads, channels)).astype(dtype) for _ in range(3))
    att = rng.standard_normal((heads, channels)).astype(dtype)
    alpha, delta = (rng.standard_normal((indices.size, heads)).astype(dtype) for _ in range(2))
    scale = ((rng.random((indices.size, heads)) > 0.3) * 1.25).astype(dtype)
    u = rng.standard_normal((indices.size, 3)).astype(dtype)
    weT = rng.standard_normal((heads, 3, channels)).astype(dtype)
    results = []
    for every in (True, False):
        q_out = np.full((n, heads, channels), np.nan, dtype)
        firsts = _source(src_indptr, order, targets[order].astype(np.int64), xl, xr, att, grad, alpha, delta,
                         scale, u, weT, q_out, every, with_edges)  # fmt: skip
        results.append((firsts, q_out))
    (f_all, q_all), (f_each, q_each) = results
    assert np.array_equal(f_all, f_each) and (f_all == channels - channels % 8).all()
    assert np.array_equal(q_all, q_each, equal_nan=True)
    assert np.isfinite(q_all[:, :, : channels - channels % 8]).all()
