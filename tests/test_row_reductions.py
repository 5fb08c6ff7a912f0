"""Row kernels of the layers: ``column_sum`` (bias gradients, numpy's bits), ``add_bias_finite`` and ``all_finite``."""

import numpy as np
import pytest
from numba import njit

from gatfast._validate import all_finite
from gatfast.kernels import column_sum
from gatfast.kernels.reduce import column_sums, sum_rows
from gatfast.layers.rowwise import add_bias_finite


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 7, 1000, 20_399])
@pytest.mark.parametrize("width", [0, 1, 2, 7, 8, 9, 16, 17, 33, 256])
def test_column_sum_gives_numpy_bits(dtype, rows, width):
    a = np.random.default_rng(rows * 1000 + width).standard_normal((rows, width)).astype(dtype)
    a[::3] *= 1e4  # magnitudes that differ, so a different order shows in the last bits
    got = column_sum(a)
    assert got.dtype == a.dtype and got.shape == (width,)
    np.testing.assert_array_equal(got, a.sum(axis=0))


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::2],  # strided columns: numpy's path
        lambda a: np.asfortranarray(a),
        lambda a: a.astype(np.float16),
    ],
)
def test_column_sum_other_layouts_and_dtypes(make):
    a = make(np.random.default_rng(0).standard_normal((50, 10)).astype(np.float32))
    got = column_sum(a)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, a.sum(axis=0))


def test_column_sum_keeps_the_sign_of_zero_as_numpy_does():
    a = np.full((4, 3), -0.0, np.float32)
    a[2, 1] = 0.0
    got = column_sum(a)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(a.sum(axis=0)))


def test_column_sum_keeps_nan_and_inf_and_leaves_the_input_alone():
    a = np.ones((5, 3), np.float32)
    a[1, 0], a[2, 2] = np.nan, np.inf
    before = a.copy()
    got = column_sum(a)
    assert np.isnan(got[0]) and got[1] == 5 and got[2] == np.inf
    np.testing.assert_array_equal(a, before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 33])
def test_add_bias_finite_adds_like_numpy_and_reports_finiteness(dtype, width):
    rng = np.random.default_rng(width)
    out = rng.standard_normal((300, width)).astype(dtype)
    bias = rng.standard_normal(width).astype(dtype)
    want = out + bias
    got = out.copy()
    assert add_bias_finite(got, bias)
    np.testing.assert_array_equal(got, want)
    for bad in (np.nan, np.inf, -np.inf):
        got = out.copy()
        got[123, width - 1] = bad
        assert not add_bias_finite(got, bias)
    big = np.finfo(dtype).max
    got, over = out.copy(), bias.copy()
    got[7, 0], over[0] = big, big  # finite values whose sum overflows
    assert not add_bias_finite(got, over)


def test_add_bias_finite_without_bias_or_on_other_layouts():
    out = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert add_bias_finite(out.copy(), None)
    out[1, 1] = np.nan
    assert not add_bias_finite(out.copy(), None)
    strided = np.zeros((3, 8), np.float32)[:, ::2]
    assert add_bias_finite(strided, np.ones(4, np.float32))
    np.testing.assert_array_equal(strided, 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [10, 4095, 4096, 100_003])
def test_all_finite_finds_every_nan_and_inf(dtype, size):
    a = np.random.default_rng(size).standard_normal(size).astype(dtype)
    assert all_finite(a) and all_finite(a.reshape(-1, 1))
    info = np.finfo(dtype)
    extremes = np.array([info.max, -info.max, info.tiny / 4, -0.0], dtype)
    a[: extremes.size] = extremes  # huge values whose sum overflows and subnormals are finite
    assert all_finite(a)
    for bad in (np.nan, np.inf, -np.inf, -np.nan):
        for where in (0, size // 2, size - 1):
            b = a.copy()
            b[where] = bad
            assert not all_finite(b)
            assert not all_finite(b[::-1])  # not contiguous: numpy's path


def test_all_finite_other_dtypes():
    assert all_finite(np.ones(10_000, np.float16))
    assert not all_finite(np.full(10_000, np.inf, np.float16))
    assert all_finite(np.arange(10_000))


def test_column_sum_of_another_byte_order_is_numpys():
    a = np.arange(12.0, dtype=">f4").reshape(4, 3)  # not a type the kernel is compiled for
    got = column_sum(a)
    np.testing.assert_array_equal(got, a.sum(axis=0))


@njit(cache=False)
def _sum_rows_of(out, a, lo, hi):
    sum_rows(out, a, lo, hi)


def _plain_row_sums(a, lo, hi):
    """The loop ``sum_rows`` replaces: from +0, row ``lo``, then ``lo + 1``, ... added to every column."""
    total = np.zeros(a.shape[1], a.dtype)
    for i in range(lo, hi):
        total = total + a[i]
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 16, 17, 32, 33, 65])
@pytest.mark.parametrize("layout", ["C", "strided rows", "strided columns"])
def test_sum_rows_adds_the_rows_in_order_in_every_layout(dtype, width, layout):
    """``reduce.sum_rows`` (the dense backward's bias sums, ``column_sums``): the plain loop's bits over any
    range of rows, whether the columns take vector registers (C-contiguous) or scalar ones."""
    rng = np.random.default_rng(width)
    base = rng.standard_normal((300, 2 * width)).astype(dtype)
    base[::4] *= 1e5  # magnitudes that differ, so another order shows in the last bits
    a = {
        "C": np.ascontiguousarray(base[:, :width]),
        "strided rows": base[::2, :width],
        "strided columns": base[:, ::2],
    }[layout]
    for lo, hi in ((0, a.shape[0]), (3, 97), (50, 50), (a.shape[0] - 1, a.shape[0])):
        padded = np.full(width + 9, 7.0, dtype)  # sentinels after out: nothing is written past it
        out = padded[:width]
        out[:] = np.nan
        _sum_rows_of(out, a, lo, hi)
        assert np.all(padded[width:] == 7.0)
        np.testing.assert_array_equal(
            out.view(f"u{out.itemsize}"), _plain_row_sums(a, lo, hi).view(f"u{out.itemsize}")
        )


def test_sum_rows_keeps_nan_and_inf_and_column_sums_checks_its_output():
    a = np.ones((20, 17), np.float32)
    a[5, 3], a[7, 9], a[8, 9], a[1, 16] = np.nan, np.inf, -np.inf, np.inf
    out = np.empty(17, np.float32)
    column_sums(a, out)
    assert np.isnan(out[3]) and np.isnan(out[9]) and out[16] == np.inf
    assert np.all(out[[0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15]] == 20)
    with pytest.raises(ValueError, match="one value per column"):
        column_sums(a, np.empty(16, np.float32))


@pytest.mark.parametrize("width", [3, 17, 33])
def test_sum_rows_keeps_the_sign_of_zero_and_writes_a_strided_out(width):
    """A column of -0.0 sums to +0.0 (it starts from +0, as the loop did); a C-contiguous ``a`` with a
    strided ``out`` takes the scalar sums, with the same bits as the vector ones."""
    a = np.full((40, width), -0.0, np.float32)
    a[:, 1] = np.random.default_rng(width).standard_normal(40)
    contiguous = np.empty(width, np.float32)
    _sum_rows_of(contiguous, a, 0, 40)
    assert not np.signbit(contiguous[0]) and contiguous[0] == 0.0
    strided = np.full(2 * width, np.nan, np.float32)
    _sum_rows_of(strided[::2], a, 0, 40)
    np.testing.assert_array_equal(strided[::2].view(np.uint32), contiguous.view(np.uint32))
    assert np.all(np.isnan(strided[1::2]))
