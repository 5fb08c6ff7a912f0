"""The layers' row-block passes (``gatfast/layers/rowwise.py``) and the chunked finiteness check: the same bits
as one pass over everything, or as the fixed blocks, at any thread count; every NaN and inf found, in any chunk."""

import numba
import numpy as np
import pytest

from gatfast import GATv2Layer, _runtime
from gatfast._runtime import PARALLEL_ELEMENTS
from gatfast._validate import FINITE_CHUNK, all_finite
from gatfast.graph import CSRGraph
from gatfast.kernels import num_att_blocks
from gatfast.layers.rowwise import BIAS_CHUNK, COLUMN_BLOCK_ROWS, add_bias_finite, bias_gradient

needs_two_threads = pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="Numba was started with fewer than 2 threads"
)
THREADS = [1, 2] if numba.config.NUMBA_NUM_THREADS >= 2 else [1]


def spread(shape, dtype, seed):
    """Values over 8 orders of magnitude: any other summation order shows in the last bits."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 4, shape)).astype(dtype)


def blocked_sum(a, rows):
    """The bias gradient's order, written with numpy: each block summed row by row, block sums in order."""
    total = a[:rows].sum(axis=0)
    for start in range(rows, a.shape[0], rows):
        total = total + a[start : start + rows].sum(axis=0)
    return total


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "rows, width",
    [
        (COLUMN_BLOCK_ROWS, 3),  # one block: numpy's own bits
        (COLUMN_BLOCK_ROWS + 1, 2),  # two blocks, one call on the calling thread (below PARALLEL_ELEMENTS)
        (3 * COLUMN_BLOCK_ROWS + 5, 1),  # one column: numpy's pairwise sum inside each block
        (PARALLEL_ELEMENTS // 33 + 7, 33),  # on the pool
        (PARALLEL_ELEMENTS // 64 * 2 + 1, 64),
    ],
)
def test_bias_gradient_sums_fixed_blocks_in_order(threads, dtype, rows, width):
    a = spread((rows, width), dtype, rows)
    with _runtime.threads(threads):
        got = bias_gradient(a)
    assert got.dtype == a.dtype and got.shape == (width,)
    np.testing.assert_array_equal(got, blocked_sum(a, COLUMN_BLOCK_ROWS))
    if rows <= COLUMN_BLOCK_ROWS:
        np.testing.assert_array_equal(got, a.sum(axis=0))


def test_bias_gradient_keeps_nan_and_inf_from_any_block():
    a = np.ones((PARALLEL_ELEMENTS // 8 + 3, 8), np.float32)
    a[-1, 0], a[COLUMN_BLOCK_ROWS + 1, 3] = np.nan, np.inf
    got = bias_gradient(a)
    assert np.isnan(got[0]) and got[3] == np.inf and got[1] == a.shape[0]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 17, 33, 64])
def test_add_bias_finite_on_the_pool_adds_like_numpy(threads, dtype, width):
    rows = PARALLEL_ELEMENTS // width + 11  # past the threshold, with a short last chunk
    out = spread((rows, width), dtype, width)
    bias = spread(width, dtype, width + 1)
    want = out + bias
    with _runtime.threads(threads):
        assert add_bias_finite(out, bias)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("threads", THREADS)
def test_add_bias_finite_on_the_pool_finds_nan_and_inf_in_any_chunk(threads):
    width = 16
    rows = PARALLEL_ELEMENTS // width + 5
    chunk_rows = BIAS_CHUNK // width
    base = spread((rows, width), np.float32, 3)
    bias = np.ones(width, np.float32)
    with _runtime.threads(threads):
        for row in (0, chunk_rows - 1, chunk_rows, rows // 2, rows - 1):
            for bad in (np.nan, np.inf, -np.inf):
                out = base.copy()
                out[row, width - 1] = bad
                assert not add_bias_finite(out, bias)
                assert not add_bias_finite(out, None)
        out = base.copy()
        out[rows - 1, 0], over = np.finfo(np.float32).max, bias.copy()
        over[0] = np.finfo(np.float32).max  # finite values whose sum overflows, in the last chunk
        assert not add_bias_finite(out, over)
        assert add_bias_finite(base.copy(), None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 9, 17, 33, 64])
def test_add_bias_finite_in_one_pass_adds_like_numpy_and_finds_every_nan_and_inf(dtype, width):
    """Below the pool's threshold: one kernel adds and checks (each column's running ``Σ (v - v)``)."""
    rows = 37
    info = np.finfo(dtype)
    base = spread((rows, width), dtype, width + 2)
    base[0, 0], base[-1, 0] = info.max, -0.0  # the largest finite value, and -0 + 0 (+0): finite
    bias = spread(width, dtype, width + 3)
    bias[0] = 0.0
    for b in (bias, None):
        out = base.copy()
        want = out + b if b is not None else out.copy()
        assert add_bias_finite(out, b)
        assert out.tobytes() == want.tobytes()
    for row, col in ((0, 0), (rows // 2, width // 2), (rows - 1, width - 1)):
        for bad in (np.nan, np.inf, -np.inf):
            for b in (bias, None):
                out = base.copy()
                out[row, col] = bad
                assert not add_bias_finite(out, b)
    over = bias.copy()
    over[0] = info.max  # finite values whose sum overflows
    assert not add_bias_finite(base.copy(), over)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_on_the_pool_finds_nan_and_inf_in_any_chunk(threads, dtype):
    size = PARALLEL_ELEMENTS + FINITE_CHUNK // 2 + 3  # a short last chunk
    a = np.random.default_rng(0).standard_normal(size).astype(dtype)
    info = np.finfo(dtype)
    a[:3] = (info.max, -info.max, info.tiny / 4)
    with _runtime.threads(threads):
        assert all_finite(a) and all_finite(a.reshape(-1, 1))
        for where in (0, FINITE_CHUNK - 1, FINITE_CHUNK, size // 2, size - 1):
            for bad in (np.nan, np.inf, -np.inf):
                b = a.copy()
                b[where] = bad
                assert not all_finite(b)


@pytest.mark.parametrize("threads", THREADS)
def test_big_arrays_of_other_layouts_and_shapes_take_the_plain_path_with_the_same_results(threads):
    rows = PARALLEL_ELEMENTS // 16 + 3
    wide = spread((rows, 32), np.float32, 11)
    strided = wide[:, ::2]  # 16 columns, not contiguous
    fortran = np.asfortranarray(wide[:, :16])
    bias = spread(16, np.float32, 12)
    with _runtime.threads(threads):
        for out in (strided.copy(), fortran.copy()):
            want = out + bias
            assert add_bias_finite(out, bias)
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(
                bias_gradient(out), blocked_sum(np.ascontiguousarray(out), COLUMN_BLOCK_ROWS)
            )
        out = strided.copy()
        out[-1, -1] = np.nan
        assert not add_bias_finite(out, bias)
        # a bias of another dtype: numpy's broadcast add, the same values
        out, bias64 = wide[:, :16].copy(), bias.astype(np.float64)
        want = out + bias64.astype(np.float32)
        assert add_bias_finite(out, bias64)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("threads", THREADS)
def test_rows_wider_than_a_chunk_and_empty_arrays(threads):
    width = 2 * BIAS_CHUNK + 1  # one row per block, each wider than the bias pass's chunk
    out = spread((PARALLEL_ELEMENTS // width + 2, width), np.float32, 13)
    bias = spread(width, np.float32, 14)
    want = out + bias
    with _runtime.threads(threads):
        assert add_bias_finite(out, bias)
        np.testing.assert_array_equal(out, want)
        out[-1, width // 2] = np.inf
        assert not add_bias_finite(out, None)
        for shape in [(0, 5), (5, 0), (0, 0), (COLUMN_BLOCK_ROWS + 1, 0)]:
            empty = np.zeros(shape, np.float32)
            assert add_bias_finite(empty, np.zeros(shape[1], np.float32))
            got = bias_gradient(empty)
            assert got.shape == (shape[1],) and not got.any()


def test_wrong_bias_shapes_and_one_dimensional_gradients_are_refused():
    out = np.zeros((PARALLEL_ELEMENTS // 64 + 1, 64), np.float32)
    for bad in (np.zeros(32, np.float32), np.zeros((1, 64), np.float32), np.zeros(65, np.float32)):
        with pytest.raises(ValueError, match="bias must have shape"):
            add_bias_finite(out, bad)
        with pytest.raises(ValueError, match="bias must have shape"):
            add_bias_finite(out[:10], bad)
    for grad in (np.zeros(10, np.float32), np.zeros(COLUMN_BLOCK_ROWS + 1, np.float32), np.zeros((2, 2, 2))):
        with pytest.raises(ValueError, match="grad must be 2-D"):
            bias_gradient(grad)


@needs_two_threads
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_layer_past_the_thresholds_gives_the_same_bits_on_one_and_two_threads(dtype):
    # 20,000 nodes x 64 outputs: every pass runs in chunks on the pool
    n, degree = 20_000, 3
    rng = np.random.default_rng(5)
    rows = np.repeat(np.arange(n), degree)
    cols = rng.integers(0, n, rows.size)
    graph = CSRGraph.from_edge_index(np.stack([cols, rows]), num_nodes=n)
    layer = GATv2Layer(8, 16, heads=4, dtype=dtype, seed=1)
    layer.params["bias"] = spread(64, dtype, 7)
    x = spread((n, 8), dtype, 8)
    grad_out = spread((n, 64), dtype, 9)
    assert n * 64 >= PARALLEL_ELEMENTS and n > COLUMN_BLOCK_ROWS
    results = []
    old = numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            out, cache = layer.forward(graph, x)
            results.append((out, layer.backward(cache, grad_out)))
    finally:
        numba.set_num_threads(old)
    (out1, g1), (out2, g2) = results
    np.testing.assert_array_equal(out1, out2)
    assert g1.keys() == g2.keys()
    for name in g1:
        np.testing.assert_array_equal(g1[name], g2[name], err_msg=name)
    # concatenated heads: the target pass's blocks of rows (backward.check_bias_part), then the blocks in order
    np.testing.assert_array_equal(g1["bias"], blocked_sum(grad_out, -(-n // num_att_blocks(n))))
