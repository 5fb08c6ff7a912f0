"""``kernels.head_sums``: every head's score of an edge at once, and one head's ``A_ij`` of a row's edges
side by side, the bits of the per-head and per-edge intrinsics."""

import numpy as np
import pytest
from numba import njit

from gatfast.kernels import ACTIVATIONS, gatv2_forward_rows
from gatfast.kernels.head_sums import leaky_scores, row_dots
from gatfast.kernels.ir_parts import edges_at_once, heads_at_once, typed_contiguous
from gatfast.kernels.prefetch import WINDOW
from gatfast.kernels.simd import dot_rows, leaky_score


@njit
def _all_at_once(att, xr, xl, slope, out):
    done = True
    for e in range(out.shape[0]):
        done = leaky_scores(att, xr, e % xr.shape[0], xl, (7 * e) % xl.shape[0], slope, out, e) and done
    return done


@njit
def _head_by_head(att, xr, xl, slope, out):
    for e in range(out.shape[0]):
        for h in range(att.shape[0]):
            out[e, h] = leaky_score(att, xr, e % xr.shape[0], xl, (7 * e) % xl.shape[0], h, slope)


def _case(heads, channels, dtype, seed=0):
    rng = np.random.default_rng(seed)
    # magnitudes over eight orders, so any other summation order shows in the last bits
    xr, xl = (
        (rng.standard_normal((30, heads, channels)) * 10.0 ** rng.uniform(-4, 4, (30, heads, 1))).astype(
            dtype
        )
        for _ in range(2)
    )
    xl[::3, :, ::2] = -xr[::3, :, ::2]  # z = +0 exactly
    att = rng.standard_normal((heads, channels)).astype(dtype)
    return att, xr, xl


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# groups of 8 heads, then 1-7 more (one code path per count), at one to three vectors per head
@pytest.mark.parametrize("heads", [2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17])
@pytest.mark.parametrize("channels", [8, 16, 24])
def test_all_heads_at_once_give_each_heads_bits(dtype, heads, channels):
    att, xr, xl = _case(heads, channels, dtype, heads * channels)
    slope = dtype(0.2)
    fast = np.full((50, heads), np.nan, dtype)
    want = np.full((50, heads), np.nan, dtype)
    assert _all_at_once(att, xr, xl, slope, fast)
    _head_by_head(att, xr, xl, slope, want)
    assert not np.isnan(fast).any()
    assert fast.tobytes() == want.tobytes()


@pytest.mark.parametrize("channels", [1, 7, 9, 17])
def test_channels_in_part_vectors_are_left_to_the_caller(channels):
    att, xr, xl = _case(3, channels, np.float32)
    out = np.full((50, 3), np.nan, np.float32)
    assert not _all_at_once(att, xr, xl, np.float32(0.2), out)
    assert np.isnan(out).all()


@njit
def _fits(att, xr, xl, out):
    return typed_contiguous(att, xr, xl, out)


def test_strided_arrays_are_left_to_the_caller():
    att, xr, xl = _case(3, 8, np.float32)
    strided = np.repeat(xl, 2, axis=2)[:, :, ::2]
    out = np.full((50, 3), np.nan, np.float32)
    assert _fits(att, xr, xl, out) and not _fits(att, xr, strided, out)
    assert not _all_at_once(att, xr, strided, np.float32(0.2), out)
    assert np.isnan(out).all()


@pytest.mark.parametrize("heads", [3, 8])
def test_the_forward_kernel_scores_rows_it_cannot_read_as_vectors_head_by_head(heads):
    """``xl`` whose channels are contiguous but whose layout Numba cannot call C-contiguous (a slice of
    wider rows) takes the per-head scores: the same bits as the C-contiguous copy, every score written."""
    att, xr, xl = _case(heads, 8, np.float32, 5)
    rng = np.random.default_rng(6)
    degree = rng.integers(0, 9, 30)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    indices = rng.integers(0, 30, indptr[-1]).astype(np.int64)
    wide = np.zeros((30, heads, 16), np.float32)
    wide[:, :, :8] = xl
    results = []
    for rows in (xl, wide[:, :, :8]):
        alpha = np.full((indices.size, heads), np.nan, np.float32)
        out = np.full((30, heads, 8), np.nan, np.float32)
        gatv2_forward_rows(
            0, 30, indptr, indices, rows, xr, att, np.float32(0.2), ACTIVATIONS["leaky_relu"], WINDOW,
            np.zeros((0, heads), np.float32), np.zeros(0, np.float32), False, alpha, out,
        )  # fmt: skip
        results.append((alpha, out))
    (alpha, out), (alpha_s, out_s) = results
    assert not np.isnan(alpha).any() and not np.isnan(out).any()
    assert alpha.tobytes() == alpha_s.tobytes() and out.tobytes() == out_s.tobytes()


def _rows(seed):
    """Rows of every length from 0 to 26: none, a part group, whole groups of 8, whole groups and a part."""
    rng = np.random.default_rng(seed)
    degree = rng.permutation(np.arange(30) % 27)  # 30 rows, as _case's
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    return indptr, rng.integers(0, 30, indptr[-1]).astype(np.int64)


@njit
def _dots_by_rows(grad, xl, indptr, indices, out):
    done = True
    for i in range(indptr.size - 2, -1, -1):  # last row first: a store past a row's end shows
        done = row_dots(grad, i, xl, indices, out, indptr[i], indptr[i + 1]) and done
    return done


@njit
def _dots_edge_by_edge(grad, xl, indptr, indices, out):
    for i in range(indptr.size - 1):
        for e in range(indptr[i], indptr[i + 1]):
            out[e, 0] = dot_rows(grad, i, xl, indices[e], 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [8, 16, 24, 32, 64])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_a_rows_dots_side_by_side_give_each_edges_bits(dtype, channels, index_dtype):
    """The target pass's ``A_ij`` of one head: ``row_dots`` against ``dot_rows`` edge by edge."""
    _, grad, xl = _case(1, channels, dtype, channels + 1)
    indptr, indices = _rows(channels + 1)
    indices = indices.astype(index_dtype)
    fast = np.full((indices.size, 1), np.nan, dtype)
    want = np.full((indices.size, 1), np.nan, dtype)
    assert _dots_by_rows(grad, xl, indptr, indices, fast)
    _dots_edge_by_edge(grad, xl, indptr, indices, want)
    assert not np.isnan(fast).any()
    assert fast.tobytes() == want.tobytes()


@pytest.mark.parametrize(("heads", "channels"), [(1, 7), (1, 9), (2, 8)])
def test_row_dots_leave_other_shapes_to_the_caller(heads, channels):
    _, grad, xl = _case(heads, channels, np.float64)
    indptr, indices = _rows(3)
    out = np.full((indices.size, heads), np.nan)
    assert not _dots_by_rows(grad, xl, indptr, indices, out)
    assert np.isnan(out).all()


def test_row_dots_leave_strided_rows_to_the_caller():
    _, grad, xl = _case(1, 16, np.float64)
    indptr, indices = _rows(4)
    out = np.full((indices.size, 1), np.nan)
    strided = np.repeat(xl, 2, axis=2)[:, :, ::2]
    assert not _dots_by_rows(grad, strided, indptr, indices, out)
    assert np.isnan(out).all()
    assert _dots_by_rows(grad, np.ascontiguousarray(strided), indptr, indices, out)


@njit
def _kept_to_rows(grad, xl, indptr, indices, out):
    """``row_dots`` of each row alone, on ``out`` filled with NaN each time: whether it wrote exactly
    that row's values."""
    for i in range(indptr.size - 1):
        out[:] = np.nan
        if not row_dots(grad, i, xl, indices, out, indptr[i], indptr[i + 1]):
            return False
        for e in range(out.shape[0]):
            inside = indptr[i] <= e < indptr[i + 1]
            if inside == np.isnan(out[e, 0]):
                return False
    return True


def test_row_dots_write_only_the_rows_edges():
    _, grad, xl = _case(1, 24, np.float32, 9)
    indptr, indices = _rows(9)
    assert _kept_to_rows(grad, xl, indptr, indices, np.empty((indices.size, 1), np.float32))


@njit
def _kernel_tests(heads, channels):
    return heads_at_once(heads, channels), edges_at_once(heads, channels)


@pytest.mark.parametrize("heads", [1, 2, 3, 8])
@pytest.mark.parametrize("channels", [1, 7, 8, 9, 16, 17, 33])
def test_the_kernels_tests_agree_with_what_the_intrinsics_write(heads, channels):
    """``heads_at_once`` and ``edges_at_once`` (the kernels' choice of loop) say exactly where
    ``leaky_scores`` (several heads) and ``row_dots`` (one head) write."""
    att, xr, xl = _case(heads, channels, np.float32, heads + channels)
    several, one = _kernel_tests(np.int64(heads), np.int64(channels))
    scores = np.full((50, heads), np.nan, np.float32)
    wrote_scores = _all_at_once(att, xr, xl, np.float32(0.2), scores)
    assert several == (heads > 1 and wrote_scores)  # leaky_scores also writes one head of whole vectors
    indptr, indices = _rows(heads)
    dots = np.full((indices.size, heads), np.nan, np.float32)
    assert one == _dots_by_rows(xr, xl, indptr, indices, dots)
    assert several == (heads > 1 and channels % 8 == 0) and one == (heads == 1 and channels % 8 == 0)


def test_typed_contiguous_refuses_arrays_of_mixed_dtypes():
    from numba.core.errors import TypingError

    att, xr, xl = _case(2, 8, np.float32)
    with pytest.raises(TypingError):
        _fits(att, xr, xl.astype(np.float64), np.empty((50, 2), np.float32))
