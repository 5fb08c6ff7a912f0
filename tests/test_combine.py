"""``kernels.combine.combine_rows``: weighted sums of gathered rows, the same bits as the plain loop."""

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from gatfast.kernels.combine import combine_rows
from gatfast.kernels.ir_parts import ALL_HEADS
from gatfast.kernels.prefetch import PREFETCH_DISTANCE
from gatfast.kernels.sparse import csr_dense_matmul2_rows, csr_dense_matmul_rows


@numba.njit
def _combined(indptr, indices, src, coef, scale, out):
    for i in range(indptr.size - 1):
        for h in range(src.shape[1]):
            combine_rows(out, i, h, src, indices, coef, scale, indptr[i], indptr[i + 1])


@numba.njit
def _combined_all_heads(indptr, indices, src, coef, scale, out):
    for i in range(indptr.size - 1):
        combine_rows(out, i, ALL_HEADS, src, indices, coef, scale, indptr[i], indptr[i + 1])


@numba.njit
def _combined_2d(indptr, indices, src, coef, scale, out):
    for i in range(indptr.size - 1):
        combine_rows(out, i, 0, src, indices, coef, scale, indptr[i], indptr[i + 1])


def plain_loop(indptr, indices, src, coef, scale):
    """The old loop order, in numpy: ``out[i] = 0``, then ``out[i] += w_k * src[j]`` per term."""
    rows = indptr.size - 1
    out = np.zeros((rows,) + src.shape[1:], src.dtype)
    for i in range(rows):
        for k in range(indptr[i], indptr[i + 1]):
            w = coef[k] * scale[k] if scale.shape[0] else coef[k]
            out[i] = out[i] + (w[..., None] if src.ndim == 3 else w) * src[indices[k]]
    return out


def _case(seed, rows, sources, heads, channels, dtype, index_dtype=np.int64, max_degree=9):
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, max_degree + 1, rows)
    degree[::5] = 0  # rows without terms get zeros
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(index_dtype)
    indices = rng.integers(0, sources, indptr[-1]).astype(index_dtype)
    # magnitudes over twelve orders, so any other summation order shows in the last bits
    src = rng.standard_normal((sources, heads, channels)) * 10.0 ** rng.uniform(-6, 6, (sources, heads, 1))
    coef = rng.standard_normal((indptr[-1], heads))
    scale = (rng.random((indptr[-1], heads)) >= 0.5) * 2.5
    return indptr, indices, src.astype(dtype), coef.astype(dtype), scale.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# tails alone, single vectors, whole groups of 32, groups followed by single vectors and a tail (40, 57)
@pytest.mark.parametrize("channels", [1, 7, 8, 9, 16, 17, 31, 32, 33, 40, 57, 64, 71])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("with_scale", [False, True])
def test_combine_rows_gives_the_plain_loops_bits(dtype, channels, heads, with_scale):
    indptr, indices, src, coef, scale = _case(channels * 10 + heads, 40, 30, heads, channels, dtype)
    if not with_scale:
        scale = scale[:0]
    out = np.full((40, heads, channels), np.nan, dtype)  # every element must be written
    _combined(indptr, indices, src, coef, scale, out)
    want = plain_loop(indptr, indices, src, coef, scale)
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# whole vectors (every head in one run: a group of 4 vectors spans 4 heads at 8 channels, 2 at 16) and
# widths that are not (head by head inside the intrinsic), contiguous and strided
@pytest.mark.parametrize(
    ("heads", "channels"), [(1, 8), (2, 8), (8, 8), (3, 16), (5, 24), (2, 40), (3, 7), (4, 17)]
)
@pytest.mark.parametrize("with_scale", [False, True])
@pytest.mark.parametrize("strided", [False, True])
def test_combine_rows_of_all_heads_gives_the_plain_loops_bits(dtype, heads, channels, with_scale, strided):
    indptr, indices, src, coef, scale = _case(channels * 10 + heads, 40, 30, heads, channels, dtype)
    if not with_scale:
        scale = scale[:0]
    if strided:
        src = np.repeat(src, 2, axis=2)[:, :, ::2]
        out = np.full((40, heads, 2 * channels), np.nan, dtype)[:, :, ::2]
    else:
        out = np.full((40, heads, channels), np.nan, dtype)
    _combined_all_heads(indptr, indices, src, coef, scale, out)
    want = plain_loop(indptr, indices, np.ascontiguousarray(src), coef, scale)
    assert np.ascontiguousarray(out).tobytes() == want.tobytes()


@pytest.mark.parametrize(("heads", "channels"), [(4, 8), (3, 17)])
def test_combine_rows_of_all_heads_writes_only_its_row(heads, channels):
    indptr, indices, src, coef, _ = _case(5, 6, 10, heads, channels, np.float64)
    out = np.full((6, heads, channels), 7.0)

    @numba.njit
    def one(out):
        combine_rows(out, 4, ALL_HEADS, src, indices, coef, coef[:0], indptr[4], indptr[5])

    one(out)
    want = plain_loop(indptr, indices, src, coef, coef[:0])
    np.testing.assert_array_equal(out[4], want[4])
    mask = np.ones(out.shape, bool)
    mask[4] = False
    assert (out[mask] == 7.0).all()


@pytest.mark.parametrize("channels", [1, 7, 9, 33, 64])
def test_combine_rows_on_2d_rows_with_one_weight_per_term_and_int32_indices(channels):
    indptr, indices, src, coef, _ = _case(channels, 25, 50, 1, channels, np.float32, np.int32)
    src2, coef1 = src[:, 0], coef[:, 0]
    out = np.full((25, channels), np.nan, np.float32)
    _combined_2d(indptr, indices, src2, coef1, coef1[:0], out)
    want = plain_loop(indptr, indices, src2, coef1, coef1[:0])
    assert out.tobytes() == want.tobytes()


@numba.njit
def _combined_2d_all_heads(indptr, indices, src, coef, scale, out):
    for i in range(indptr.size - 1):
        combine_rows(out, i, ALL_HEADS, src, indices, coef, scale, indptr[i], indptr[i + 1])


def test_combine_rows_of_all_heads_on_2d_rows_takes_the_first_column_of_weights():
    """2-D rows have one head: ``ALL_HEADS`` weights them by ``coef[:, 0]``, never by a column before it."""
    indptr, indices, src, coef, scale = _case(11, 25, 50, 2, 17, np.float32)
    src2 = np.ascontiguousarray(src[:, 0])
    out = np.full((25, 17), np.nan, np.float32)
    _combined_2d_all_heads(indptr, indices, src2, coef, scale, out)
    want = plain_loop(indptr, indices, src2, coef[:, 0], scale[:, 0])
    assert out.tobytes() == want.tobytes()


def test_combine_rows_writes_only_its_row_and_head():
    indptr, indices, src, coef, _ = _case(3, 6, 10, 2, 17, np.float64)
    out = np.full((6, 2, 17), 7.0)

    @numba.njit
    def one(out):
        combine_rows(out, 4, 1, src, indices, coef, coef[:0], indptr[4], indptr[5])

    one(out)
    want = plain_loop(indptr, indices, src, coef, coef[:0])
    np.testing.assert_array_equal(out[4, 1], want[4, 1])
    mask = np.ones(out.shape, bool)
    mask[4, 1] = False
    assert (out[mask] == 7.0).all()


def test_combine_rows_refuses_mixed_dtypes_at_compile_time():
    indptr, indices, src, coef, _ = _case(1, 3, 4, 1, 8, np.float32)
    with pytest.raises(numba.TypingError):
        _combined(
            indptr,
            indices,
            src,
            coef.astype(np.float64),
            coef[:0].astype(np.float64),
            np.empty((3, 1, 8), np.float32),
        )


def _sparse(rows, cols, seed, dtype):
    a = sp.random_array((rows, cols), density=0.05, random_state=seed, format="csr", dtype=np.float64)
    return sp.csr_array(a * 10.0 ** np.random.default_rng(seed).uniform(-6, 6, (rows, 1)), dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 33, 64])
def test_sparse_products_give_the_plain_loops_bits_for_any_row_layout(dtype, width):
    """Contiguous rows take ``combine_rows``, strided ones the plain loop: the same bits either way."""
    a = _sparse(60, 40, width, dtype)
    rng = np.random.default_rng(width)
    dense = rng.standard_normal((40, width)).astype(dtype)
    strided = np.zeros((40, 2 * width), dtype)[:, ::2]
    strided[...] = dense
    bias = rng.standard_normal(width).astype(dtype)
    product = plain_loop(a.indptr, a.indices, dense, a.data, a.data[:0])
    want = product + bias
    for d in (dense, strided):
        out = np.empty((60, width), dtype)
        csr_dense_matmul_rows(0, 60, a.indptr, a.indices, a.data, d, bias, out)
        assert out.tobytes() == want.tobytes()
    out_a = np.empty((60, 2 * width), dtype)[:, ::2]  # strided output rows
    out_b = np.empty((60, width), dtype)
    csr_dense_matmul2_rows(0, 60, a.indptr, a.indices, a.data, dense, dense, bias, bias[:0], out_a, out_b)
    assert np.ascontiguousarray(out_a).tobytes() == want.tobytes()
    assert out_b.tobytes() == product.tobytes()


def _strided_copy(a):
    """The values of ``a`` in an array whose last axis has stride 2 elements (not contiguous channels)."""
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)[..., ::2]
    big[...] = a
    return big


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [1, 7, 8, 9, 16, 17, 33])
@pytest.mark.parametrize("dropout", [False, True])
def test_forward_aggregation_gives_the_same_bits_on_both_paths(dtype, channels, dropout):
    """Contiguous channels aggregate through ``combine_rows``, strided ones through the loop.

    Only the output's layout changes: strided inputs would also move the scores off their SIMD path.
    """
    from gatfast.kernels import gatv2_forward_rows

    heads, rows = 2, 30
    indptr, indices, xl, _, scale = _case(channels, rows, rows, heads, channels, dtype)
    rng = np.random.default_rng(channels)
    xr = rng.standard_normal(xl.shape).astype(dtype)
    att = rng.standard_normal((heads, channels)).astype(dtype)
    edge_scale = scale if dropout else scale[:0]
    results = []
    for layout in (np.ascontiguousarray, _strided_copy):
        alpha = np.empty((indices.size, heads), dtype)
        out = layout(np.full((rows, heads, channels), np.nan, dtype))
        head = (indptr, indices, xl, xr, att, dtype(0.2), 0, PREFETCH_DISTANCE)
        gatv2_forward_rows(0, rows, *head, edge_scale, np.zeros(0, dtype), False, alpha, out)
        results.append((alpha, np.ascontiguousarray(out)))
    (alpha, out), (alpha_s, out_s) = results
    assert alpha.tobytes() == alpha_s.tobytes()
    assert out.tobytes() == out_s.tobytes()
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out, plain_loop(indptr, indices, xl, alpha, edge_scale))
