"""``kernels.transpose``: a matrix's transpose as a new C-contiguous array, in tiles, the same values."""

import numpy as np
import pytest

from gatfast.kernels import transpose
from gatfast.kernels.transpose import TILE, transpose_into


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 7, TILE - 1, TILE, TILE + 1, 33, 1433])
@pytest.mark.parametrize("cols", [1, 8, TILE, TILE + 1, 64])
def test_the_transpose_of_a_c_contiguous_matrix_is_a_new_c_contiguous_copy(dtype, rows, cols):
    a = np.random.default_rng(rows * 100 + cols).standard_normal((rows, cols)).astype(dtype)
    a.flat[::5] = -0.0  # the sign of zero is kept: a copy, no arithmetic
    a.flat[1::7] = np.nan
    got = transpose(a)
    assert got.dtype == a.dtype and got.shape == (cols, rows) and got.flags.c_contiguous
    assert not np.shares_memory(got, a)
    assert got.tobytes() == np.ascontiguousarray(a.T).tobytes()


@pytest.mark.parametrize(
    "make",
    [
        lambda a: np.asfortranarray(a),  # its transpose is C-contiguous: still a copy
        lambda a: a[:, ::2],  # strided: numpy's copy
        lambda a: a.astype(np.int64),  # not float: numpy's copy
        lambda a: a[:0],  # empty
        lambda a: a[0],  # 1-D
        lambda a: a.astype(">f4"),  # float32 in the other byte order
    ],
)
def test_other_arrays_get_a_copy_of_numpys_transpose(make):
    a = make(np.arange(6 * 20, dtype=np.float32).reshape(6, 20))
    got = transpose(a)
    assert got.flags.c_contiguous and not np.shares_memory(got, a)
    np.testing.assert_array_equal(got, a.T)


def test_a_readonly_input_is_read_and_the_output_is_new():
    a = np.arange(40.0).reshape(5, 8)
    a.setflags(write=False)
    got = transpose(a)
    assert got.flags.writeable
    np.testing.assert_array_equal(got, a.T)


def test_the_kernel_refuses_an_output_of_another_shape():
    a = np.zeros((3, 5))
    with pytest.raises(ValueError, match="shape reversed"):
        transpose_into(a, np.empty((3, 5)))
