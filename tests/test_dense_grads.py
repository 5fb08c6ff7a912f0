"""The projections' backward per chunk (``kernels/dense_grads.py``): its documented order of operations, to the bit."""

import numpy as np
import pytest
from fused_order import in_order

from gatfast.kernels import readonly
from gatfast.kernels.dense_grads import BLOCK, dense_grad_chunks


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("features, channels", [(16, 32), (64, 64), (33, 7), (9, 17)])
@pytest.mark.parametrize("shared", [False, True])
def test_each_chunk_is_the_plain_sums_in_row_order(dtype, features, channels, shared):
    """Chunks of several blocks and a short one: each weight partial is one chain of fused multiply-adds over
    the chunk's rows in increasing order (the blocks continue each other's sums), and ``grad_x``'s rows are
    ``g_l @ w_l``, then ``g_r @ w_r`` added, each in its own order, whatever the blocks interleave."""
    rng = np.random.default_rng([features, channels])
    size = 2 * BLOCK + 37
    n = 2 * size + 5  # two whole chunks and a short one
    x = rng.standard_normal((n, features)).astype(dtype)
    g_l, g_r = (
        (rng.standard_normal((n, channels)) * 10.0 ** rng.integers(-3, 4, (n, 1))).astype(dtype)
        for _ in range(2)
    )
    w_l, w_r = (rng.standard_normal((channels, features)).astype(dtype) for _ in range(2))
    sides = 1 if shared else 2
    transposed = channels > features
    shape = (features, channels) if transposed else (channels, features)
    count = -(-n // size)
    gw = np.full((count, sides, *shape), np.nan, dtype)
    gb = np.full((count, sides, channels), np.nan, dtype)
    grad_x = np.full((n, features), np.nan, dtype)
    no_bias = readonly(np.zeros(0, dtype))
    arrays = [readonly(a) for a in (x, g_l, g_r, w_l, w_r)]
    dense_grad_chunks(0, count, size, transposed, *arrays, no_bias, gw, gb, grad_x)
    for k in range(count):
        rows = slice(k * size, min(n, (k + 1) * size))
        for s, g in enumerate((g_l, g_r)[:sides]):
            want = in_order(x[rows].T, g[rows]) if transposed else in_order(g[rows].T, x[rows])
            assert gw[k, s].tobytes() == want.tobytes(), (k, s)
            part = np.zeros(channels, dtype)
            for row in g[rows]:
                part = part + row
            assert gb[k, s].tobytes() == part.tobytes(), (k, s)
    want_x = in_order(g_l, w_l)
    if not shared:
        want_x = in_order(g_r, w_r, start=want_x)
    assert grad_x.tobytes() == want_x.tobytes()


def test_a_range_of_chunks_writes_only_its_chunks_and_grad_x_can_be_skipped():
    """Chunks ``[1, 2)`` of three: the other chunks' partials and ``grad_x`` rows keep their sentinel; with
    ``grad_x`` of no rows the partials are the same bits."""
    rng = np.random.default_rng(3)
    size, n, features, channels = BLOCK + 9, 3 * BLOCK + 20, 24, 40
    x = rng.standard_normal((n, features)).astype(np.float32)
    g_l, g_r = (rng.standard_normal((n, channels)).astype(np.float32) for _ in range(2))
    w_l, w_r = (rng.standard_normal((channels, features)).astype(np.float32) for _ in range(2))
    arrays = [readonly(a) for a in (x, g_l, g_r, w_l, w_r)]
    no_bias = readonly(np.zeros(0, np.float32))
    runs = []
    for rows_x in (n, 0):
        gw = np.full((3, 2, features, channels), np.nan, np.float32)
        gb = np.full((3, 2, channels), np.nan, np.float32)
        grad_x = np.full((rows_x, features), np.nan, np.float32)
        dense_grad_chunks(1, 2, size, True, *arrays, no_bias, gw, gb, grad_x)
        assert np.isnan(gw[[0, 2]]).all() and np.isnan(gb[[0, 2]]).all() and not np.isnan(gw[1]).any()
        if rows_x:
            assert np.isnan(grad_x[:size]).all() and np.isnan(grad_x[2 * size :]).all()
            assert not np.isnan(grad_x[size : 2 * size]).any()
        runs.append(gw[1].tobytes())
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    "change, message",
    [
        ("gw", "gw must have"),
        ("grad_x_rows", "grad_x must have"),
        ("grad_x_width", "grad_x must have"),
        ("w_r", "w_l and w_r"),
    ],
)
def test_arrays_that_do_not_fit_are_refused(change, message):
    """The tiles read and write without bounds checks, so the kernel checks the shapes it is given."""
    n, features, channels = 50, 16, 32
    x = np.ones((n, features), np.float32)
    g = np.ones((n, channels), np.float32)
    w = np.ones((channels, features), np.float32)
    gw = np.empty((1, 2, channels, features), np.float32)
    gb = np.empty((1, 2, channels), np.float32)
    grad_x = np.empty((n, features), np.float32)
    w_r = w
    if change == "gw":
        gw = np.empty((1, 2, features, channels), np.float32)
    elif change == "grad_x_rows":
        grad_x = np.empty((n - 1, features), np.float32)
    elif change == "grad_x_width":
        grad_x = np.empty((n, features + 1), np.float32)
    else:
        w_r = np.ones((channels, features + 1), np.float32)
    with pytest.raises(ValueError, match=message):
        dense_grad_chunks(0, 1, n, False, x, g, g, w, w_r, np.zeros(0, np.float32), gw, gb, grad_x)
