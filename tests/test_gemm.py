"""The dense products' register tile (``kernels/gemm.py``): its documented order of operations, to the bit."""

from fractions import Fraction

import fused_order
import numpy as np
import pytest
from numba import njit

from gatfast.kernels import gemm, readonly
from gatfast.kernels.gemm import fma, matmul_pair_rows, matmul_rows
from gatfast.layers.dense import dense_backward, dense_projections, tiled


def in_order(a, b, bias, c, accumulate):
    """Σ_k a[:, k] * b[k] in increasing k, each step one fused multiply-add, from 0 (or ``c``), then the bias."""
    return fused_order.in_order(a, b, bias, c if accumulate else None)


def _rounded(exact, dtype):
    """The value of ``dtype`` nearest to the rational ``exact`` (ties to an even last bit)."""
    near = dtype(float(exact))
    candidates = [np.nextafter(near, dtype(-np.inf)), near, np.nextafter(near, dtype(np.inf))]
    bits = np.int32 if dtype == np.float32 else np.int64
    return min(candidates, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.array(v).view(bits)) & 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fma_rounds_once(dtype):
    """``gemm.fma`` is ``a * b + c`` rounded once, checked against exact rational arithmetic; ``c`` near
    ``-a * b`` makes the cancellations where a multiply then an add would lose every bit."""

    @njit
    def fused(a, b, c, out):
        for i in range(out.size):
            out[i] = fma(a[i], b[i], c[i])

    rng = np.random.default_rng(11)
    a, b = (rng.standard_normal(600).astype(dtype) for _ in range(2))
    c = rng.standard_normal(600).astype(dtype)
    c[::3] = -(a[::3] * b[::3])  # the product rounded: the exact result is its rounding error
    out = np.empty_like(a)
    fused(a, b, c, out)
    exact = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)) for x, y, z in zip(a, b, c)]
    want = np.array([_rounded(e, dtype) for e in exact], dtype)
    assert out.tobytes() == want.tobytes()
    assert np.count_nonzero(out[::3]) > 100  # the products' rounding errors, which a multiply-add loses


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "width", [1, 7, 8, 9, 16, 17, 33, 48, 64, 120]
)  # 120: every tile width, then scalars
@pytest.mark.parametrize("depth", [0, 1, 7, 16, 33])
def test_matmul_rows_follows_its_order_of_operations(dtype, width, depth):
    rng = np.random.default_rng(width * 100 + depth)
    n = 2 * gemm.ROW_BLOCK + 7  # two blocks, then 7 rows: a full tile and a short one, or one short tile
    a = rng.standard_normal((n, depth)).astype(dtype)
    b = rng.standard_normal((depth, width)).astype(dtype)
    a[::2] *= 1e3  # magnitudes that differ, so another order shows in the last bits
    for bias in (np.zeros(0, dtype), rng.standard_normal(width).astype(dtype)):
        for accumulate in (False, True):
            c = rng.standard_normal((n, width)).astype(dtype)
            want = in_order(a, b, bias, c, accumulate)
            matmul_rows(0, n, readonly(a), readonly(b), readonly(bias), accumulate, c)
            assert c.tobytes() == want.tobytes()


def test_matmul_rows_writes_only_its_rows_and_takes_strided_input():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((40, 24)).astype(np.float32)
    x = rng.standard_normal((40, 16)).astype(np.float32)
    out = np.full((24, 16), 7.0, np.float32)
    matmul_rows(5, 18, readonly(g.T), readonly(x), readonly(np.zeros(0, np.float32)), False, out)
    np.testing.assert_array_equal(out[5:18], in_order(g.T[5:18], x, np.zeros(0, np.float32), None, False))
    assert (out[:5] == 7).all() and (out[18:] == 7).all()
    before = out.copy()
    matmul_rows(9, 9, readonly(g.T), readonly(x), readonly(np.zeros(0, np.float32)), False, out)  # no rows
    assert out.tobytes() == before.tobytes()


@pytest.mark.parametrize("rows", [5, 3000])  # one chunk, and row chunks on threads
def test_dense_paths_match_blas(rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 16)).astype(np.float32)
    W_l, W_r = (rng.standard_normal((32, 16)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal(32).astype(np.float32)
    xl, xr = np.empty((rows, 32), np.float32), np.empty((rows, 32), np.float32)
    assert tiled(x, xl)
    dense_projections(x, [(W_l, b, xl), (W_r, None, xr)])
    np.testing.assert_allclose(xl, x @ W_l.T + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xr, x @ W_r.T, rtol=1e-5, atol=1e-5)
    g_l, g_r = (
        rng.standard_normal((rows, 32)).astype(np.float32),
        rng.standard_normal((rows, 32)).astype(np.float32),
    )
    grad_x = np.empty_like(x)
    gW_l, gb_l, gW_r, gb_r = dense_backward(x, g_l, g_r, W_l, W_r, grad_x, True)
    np.testing.assert_allclose(grad_x, g_l @ W_l + g_r @ W_r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gW_l, g_l.T @ x, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gb_r, g_r.sum(axis=0), rtol=1e-4, atol=1e-3)


def test_narrow_or_strided_outputs_stay_with_blas():
    x = np.ones((10, 4), np.float32)
    assert not tiled(x, np.empty((10, 15), np.float32))  # under one tile of float32 columns
    assert tiled(x.astype(np.float64), np.empty((10, 8)))  # a float64 tile is 8 wide
    assert not tiled(x, np.empty((10, 32), np.float32)[:, ::2])
    assert not tiled(x, np.empty((10, 32), np.float64))


def test_vector_width_follows_the_cpu_numba_compiles_for(monkeypatch):
    """AVX-512 registers only where Numba's target has AVX-512: a named target (a portable cache) or
    features without it get the AVX2 width, which runs everywhere."""
    import llvmlite.binding as llvm
    from numba.core import config

    from gatfast.kernels import gemm

    monkeypatch.setattr(config, "CPU_NAME", None)
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    assert gemm.compiles_for_avx512() == bool(llvm.get_host_cpu_features().get("avx512f", False))
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,+avx512f,+avx512bw")
    assert gemm.compiles_for_avx512()
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,-avx512f")
    assert not gemm.compiles_for_avx512()
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setattr(config, "CPU_NAME", "haswell")
    assert not gemm.compiles_for_avx512()
    monkeypatch.setattr(config, "CPU_NAME", "host")
    assert gemm.compiles_for_avx512() == bool(llvm.get_host_cpu_features().get("avx512f", False))
    assert gemm.VECTOR_BYTES == (64 if gemm.WIDE else 32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_tile_follows_the_order_and_writes_only_its_columns(dtype):
    """Each tile width called directly (the 4-vector tile too, which matmul_rows leaves out on AVX2), into
    a column slice of a wider array, whose other columns must keep their sentinel; and split at every vector
    boundary between two outputs (``matmul_pair_rows``), each vector reading its own weights and bias. The
    rows run in sub-tiles of the tile's rows, the last one short: one row, one short tile, one full, and
    two full ones and a row."""
    from numba import njit

    tiles = {4: gemm._tile4, 2: gemm._tile2, 1: gemm._tile1}
    lanes = gemm.VECTOR_BYTES // np.dtype(dtype).itemsize
    rng = np.random.default_rng(5)
    n, depth = 2 * max(gemm.TILE_ROWS.values()) + 3, 19  # room for every rows below
    a = rng.standard_normal((n, depth)).astype(dtype)
    a[::2] *= 1e3
    for vectors, tile in tiles.items():
        width = vectors * lanes

        @njit
        def one_tile(a, b, c, bias, b2, c2, bias2, split, i0, rows, accumulate):
            tile(a, b, c, bias, b2, c2, bias2, split, i0, rows, 0, accumulate, bias.size + bias2.size > 0)

        b = rng.standard_normal((depth, width)).astype(dtype)
        bias = rng.standard_normal(width).astype(dtype)
        for split in range(0, width + 1, lanes):  # width: no second output
            tile_rows = gemm.TILE_ROWS[vectors]
            # a short last sub-tile stores its own rows only
            for rows in (1, tile_rows - 1, tile_rows, 8, 2 * tile_rows - 1, 2 * tile_rows + 1):
                for accumulate in (False, True):
                    outputs = [
                        np.full((n, split + 3), 7.0, dtype),
                        np.full((n, width - split + 3), 7.0, dtype),
                    ]
                    parts = [outputs[0][:, :split], outputs[1][:, : width - split]]
                    start = rng.standard_normal((rows, width)).astype(dtype)
                    parts[0][1 : 1 + rows] = start[:, :split]
                    parts[1][1 : 1 + rows] = start[:, split:]
                    want = in_order(a[1 : 1 + rows], b, bias, start, accumulate)
                    weights = [np.ascontiguousarray(b[:, :split]), np.ascontiguousarray(b[:, split:])]
                    biases = [bias[:split].copy(), bias[split:].copy()]
                    one_tile(
                        readonly(a), readonly(weights[0]), parts[0], readonly(biases[0]),
                        readonly(weights[1]), parts[1], readonly(biases[1]), split, 1, rows, accumulate,
                    )  # fmt: skip
                    got = np.concatenate([parts[0][1 : 1 + rows], parts[1][1 : 1 + rows]], axis=1)
                    assert got.tobytes() == want.tobytes(), (vectors, split, rows, accumulate)
                    for out, part in zip(outputs, parts):
                        cols = part.shape[1]
                        assert (
                            (out[:, cols:] == 7).all()
                            and (out[0] == 7).all()
                            and (out[1 + rows :] == 7).all()
                        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "widths", [(1, 1), (7, 9), (8, 8), (16, 16), (16, 17), (17, 16), (32, 32), (33, 7), (64, 64)]
)
def test_matmul_pair_rows_is_two_matmuls_bit_for_bit(dtype, widths):
    """Both projections in one pass: each output the bits of :func:`matmul_rows` (the documented order),
    whether the first output's width is whole vectors (one pass over both) or not (one after the other),
    with both biases, none, or one only; rows outside ``[r0, r1)`` untouched."""
    w1, w2 = widths
    rng = np.random.default_rng(w1 * 100 + w2)
    n, depth = 2 * gemm.ROW_BLOCK + 11, 17  # rows 2 to n - 2: two blocks and a short one
    a = rng.standard_normal((n, depth)).astype(dtype)
    a[::3] *= 1e3
    b1, b2 = (rng.standard_normal((depth, w)).astype(dtype) for w in widths)
    none = np.zeros(0, dtype)
    for bias1, bias2 in [
        (rng.standard_normal(w1).astype(dtype), rng.standard_normal(w2).astype(dtype)),
        (none, none),
        (rng.standard_normal(w1).astype(dtype), none),
        (none, rng.standard_normal(w2).astype(dtype)),
    ]:
        c1, c2 = np.full((n, w1), 7.0, dtype), np.full((n, w2), 7.0, dtype)
        end = n - 2
        matmul_pair_rows(
            2, end, readonly(a), readonly(b1), readonly(bias1), c1, readonly(b2), readonly(bias2), c2
        )
        for c, b, bias in ((c1, b1, bias1), (c2, b2, bias2)):
            assert c[2:end].tobytes() == in_order(a[2:end], b, bias, None, False).tobytes()
            assert (c[:2] == 7).all() and (c[end:] == 7).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "rows, features, channels",
    [(5, 16, 32), (300, 64, 16), (300, 17, 17), (5000, 16, 33), (5000, 48, 16), (0, 16, 16)],
)  # one chunk and several, both orientations of gᵀ x, widths past the last full vector, no rows
@pytest.mark.parametrize(
    "shared, with_bias, want_x", [(False, True, True), (True, False, True), (False, True, False)]
)
def test_tiled_dense_backward(monkeypatch, dtype, rows, features, channels, shared, with_bias, want_x):
    """The tiled backward (``kernels/dense_grads.py``) against float64 products, and the same bits on one
    thread as on two: its chunks and their sums do not depend on the thread count. Every size takes the
    tile here, also those below ``TILED_BACKWARD_ROWS`` (no rows, one short block)."""
    import numba

    from gatfast.layers import dense

    calls = []
    kernel = dense.dense_grad_chunks
    monkeypatch.setattr(dense, "TILED_BACKWARD_ROWS", 0)
    monkeypatch.setattr(dense, "dense_grad_chunks", lambda *a: calls.append(a[:2]) or kernel(*a))
    rng = np.random.default_rng(rows + features + channels)
    x = rng.standard_normal((rows, features)).astype(dtype)
    g_l = rng.standard_normal((rows, channels)).astype(dtype)
    g_r = None if shared else rng.standard_normal((rows, channels)).astype(dtype)
    W_l = rng.standard_normal((channels, features)).astype(dtype)
    W_r = None if shared else rng.standard_normal((channels, features)).astype(dtype)
    assert tiled(g_l, x)
    runs = []
    for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
        numba.set_num_threads(threads)
        try:
            grad_x = np.full_like(x, np.nan) if want_x else None
            runs.append((dense_backward(x, g_l, g_r, W_l, W_r, grad_x, with_bias), grad_x))
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    (got, grad_x), (again, grad_x2) = runs
    if numba.config.NUMBA_NUM_THREADS >= 2:  # else both runs had one thread
        for a, b in zip(got, again):
            assert (a is None) == (b is None) and (a is None or a.tobytes() == b.tobytes())
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-10}
    x64 = x.astype(np.float64)
    want = [g_l.T @ x64, g_l.sum(0) if with_bias else None]
    want += [None, None] if shared else [g_r.T @ x64, g_r.sum(0) if with_bias else None]
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == dtype and a.flags.c_contiguous
            np.testing.assert_allclose(a, b, **tol)
    if want_x:
        assert grad_x.tobytes() == grad_x2.tobytes() or numba.config.NUMBA_NUM_THREADS < 2
        expected = g_l @ W_l.astype(np.float64) + (0 if shared else g_r @ W_r.astype(np.float64))
        np.testing.assert_allclose(grad_x, expected, **tol)
    assert calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 34, 127, 128, 300])
@pytest.mark.parametrize(
    "shared, with_bias, want_x", [(False, True, True), (True, False, True), (False, True, False)]
)
def test_only_a_whole_block_of_rows_takes_the_tiled_backward(
    monkeypatch, dtype, rows, shared, with_bias, want_x
):
    """Fewer rows than one block of the tiled backward take BLAS's calls (as fast or about as fast there, and a
    first run on a tiny graph then compiles one kernel less); either agrees with float64 products, with
    every output's presence, shape, dtype and layout as the tile gives them."""
    from gatfast.layers import dense

    calls = []
    kernel = dense.dense_grad_chunks
    monkeypatch.setattr(dense, "dense_grad_chunks", lambda *a: calls.append(a[:2]) or kernel(*a))
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 34)).astype(dtype)
    g_l = rng.standard_normal((rows, 64)).astype(dtype)
    g_r = None if shared else rng.standard_normal((rows, 64)).astype(dtype)
    W_l = rng.standard_normal((64, 34)).astype(dtype)
    W_r = None if shared else rng.standard_normal((64, 34)).astype(dtype)
    grad_x = np.full_like(x, np.nan) if want_x else None
    got = dense_backward(x, g_l, g_r, W_l, W_r, grad_x, with_bias)
    assert bool(calls) == (rows >= dense.TILED_BACKWARD_ROWS) and dense.TILED_BACKWARD_ROWS == 128
    x64 = x.astype(np.float64)
    want = [g_l.T @ x64, g_l.sum(0) if with_bias else None]
    want += [None, None] if shared else [g_r.T @ x64, g_r.sum(0) if with_bias else None]
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-10}
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == dtype and a.flags.c_contiguous and a.shape == b.shape
            np.testing.assert_allclose(a, b, **tol)
    if want_x:
        expected = g_l @ W_l.astype(np.float64) + (0 if shared else g_r @ W_r.astype(np.float64))
        np.testing.assert_allclose(grad_x, expected, **tol)


def test_dense_backward_refuses_arrays_that_do_not_fit(monkeypatch):
    """The tiled backward reads without bounds checks: sizes that do not fit are refused first."""
    from gatfast.layers import dense

    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 16)).astype(np.float32)
    g = rng.standard_normal((40, 32)).astype(np.float32)
    W = rng.standard_normal((32, 16)).astype(np.float32)
    grad_x = np.empty_like(x)
    with pytest.raises(ValueError, match="grad_l"):
        dense_backward(x, None, g, W, W, grad_x, True)
    with pytest.raises(ValueError, match="one row per x row"):
        dense_backward(x, g[:39], None, W, None, grad_x, True)
    with pytest.raises(ValueError, match="one row per x row"):
        dense_backward(x, g, g[:39], W, W, grad_x, True)
    with pytest.raises(ValueError, match="W_l"):
        dense_backward(x, g, None, W[:, :15], None, grad_x, True)
    with pytest.raises(ValueError, match="W_r"):
        dense_backward(x, g, g, W, None, grad_x, True)
    # weights of another dtype take BLAS's path, also with enough rows for the tile (which would not compile)
    rows = 2 * dense.TILED_BACKWARD_ROWS
    xb, gb = (
        rng.standard_normal((rows, 16)).astype(np.float32),
        rng.standard_normal((rows, 32)).astype(np.float32),
    )
    calls = []
    kernel = dense.dense_grad_chunks
    monkeypatch.setattr(dense, "dense_grad_chunks", lambda *a: calls.append(a[:2]) or kernel(*a))
    got = dense_backward(xb, gb, gb, W, W.astype(np.float64), np.empty_like(xb), True)
    np.testing.assert_allclose(got[2], gb.T @ xb, rtol=1e-5, atol=1e-4)
    assert not calls
    dense_backward(xb, gb, gb, W, W, np.empty_like(xb), True)
    assert calls  # the same arrays with one dtype: the tile
    with pytest.raises(ValueError, match="grad_x"):
        dense_backward(x, g, None, W, None, grad_x[:39], True)


def test_blas_backward_holds_blas_at_one_thread(monkeypatch):
    """Below TILED_BACKWARD_ROWS the backward's products go to BLAS, which must not wake its own threads
    there, whoever calls (a bipartite layer sizes its hold by its source side only); after the call
    BLAS has its count back."""
    from threadpoolctl import threadpool_info

    from gatfast._runtime import BLAS_SMALL
    from gatfast.layers import dense

    def blas_threads():
        return max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)

    before = blas_threads()
    if before == 1:
        pytest.skip("BLAS runs on one thread here anyway")
    seen = []
    real = dense.column_sum
    monkeypatch.setattr(dense, "column_sum", lambda a: seen.append(blas_threads()) or real(a))
    rows, features, channels = dense.TILED_BACKWARD_ROWS - 1, 64, 64
    assert rows * features * channels >= BLAS_SMALL
    rng = np.random.default_rng(4)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    g = rng.standard_normal((rows, channels)).astype(np.float32)
    W = rng.standard_normal((channels, features)).astype(np.float32)
    dense_backward(x, g, g, W, W, np.empty_like(x), True)
    assert seen == [1, 1] and blas_threads() == before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [1, 7, 17, 33])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("rows", [5000, 40_000])  # 3 and 20 chunks (NumPy sums one column pairwise from 8)
def test_tiled_dense_backward_bias_sums_are_the_plain_loops_bits(dtype, channels, shared, rows):
    """The projections' bias gradients from the tiled backward (``reduce.sum_rows`` per chunk): each chunk's
    rows added in order from zero, then the chunks' partials in order, bit for bit."""
    from gatfast.layers.dense import chunk_rows

    rng = np.random.default_rng([channels, rows])
    features = 16
    x = rng.standard_normal((rows, features)).astype(dtype)
    g_l, g_r = (
        (rng.standard_normal((rows, channels)) * 10.0 ** rng.integers(-3, 4, (rows, 1))).astype(dtype)
        for _ in range(2)
    )
    W_l, W_r = (rng.standard_normal((channels, features)).astype(dtype) for _ in range(2))
    grad_x = np.empty_like(x)
    _, gb_l, _, gb_r = dense_backward(
        x, g_l, None if shared else g_r, W_l, None if shared else W_r, grad_x, True
    )
    size = chunk_rows(rows)
    for got, g in ((gb_l, g_l), (gb_r, g_r)):
        if got is None:
            assert shared
            continue
        want = None
        for start in range(0, rows, size):
            part = np.zeros(channels, dtype)
            for row in g[start : start + size]:
                part = part + row
            want = part if want is None else want + part
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{got.itemsize}"))


def test_matmul_pair_rows_refuses_shapes_its_tiles_would_overrun():
    f = np.float32
    a, b = readonly(np.ones((6, 4), f)), readonly(np.ones((4, 16), f))
    none = readonly(np.zeros(0, f))
    c = np.empty((6, 16), f)
    for bad in [
        (a, readonly(np.ones((5, 16), f)), none, c, b, none, c),  # b's rows are not a's columns
        (a, b, none, np.empty((6, 8), f), b, none, c),  # c narrower than b
        (a, b, readonly(np.ones(3, f)), c, b, none, c),  # a bias of another width
        (a, b, none, np.empty((4, 16), f), b, none, c),  # fewer rows of c than asked for
    ]:
        with pytest.raises(ValueError):
            matmul_pair_rows(0, 6, *bad)
