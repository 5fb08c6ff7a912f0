"""The forward kernels' softmax, bit for bit.

Scores are made exact (one channel per head, ``att = 1``, ``xr = 0``, ``xl >= 0``: the score of edge
``j -> i`` in head ``h`` is ``xl[j, h]``), so the weights can be formed here with the kernel's operations in
order: each row's scores less their maximum, the exponential, the row's sum in edge order and one division;
in any chunks of rows. The exponential is the C library's (as Numba calls it) for one head and for float64,
and ``elu.exp_f32`` for several float32 heads (``kernels/softmax.py``).
"""

import math

import numpy as np
import pytest
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from gatfast.kernels import ACTIVATIONS, gatv2_forward_edge_rows, gatv2_forward_rows
from gatfast.kernels.elu import exp_f32
from gatfast.kernels.prefetch import PREFETCH_DISTANCE, WINDOW
from gatfast.kernels.softmax import row_deltas, softmax_row, vector_exp_f32

N = 3000  # about 13,500 edges
HUB = 200


def _graph(seed):
    """Rows of in-degree 0 to 9, a hub row of HUB edges, and empty rows."""
    rng = np.random.default_rng(seed)
    degrees = rng.integers(0, 10, N)
    degrees[[0, 17, 18, N - 1]] = 0
    degrees[40] = HUB
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    return indptr, rng.integers(0, N, indptr[-1]).astype(np.int64)


@njit
def _libm_exp(d):
    return math.exp(d)  # float32: the C library's expf, as in the kernel's loops


def _exp(d, dtype, heads):
    if dtype == np.float64:
        return math.exp(d)
    return exp_f32(d) if heads > 1 else _libm_exp(d)


def _weights(indptr, indices, x, dtype):
    """The weights of every head of ``x`` (n, H) by the kernel's operations in order."""
    heads = x.shape[1]
    alpha = np.empty((indices.size, heads), dtype)
    for i in range(indptr.size - 1):
        lo, hi = indptr[i], indptr[i + 1]
        for h in range(heads if hi > lo else 0):
            scores = x[indices[lo:hi], h]
            shifted = (scores - scores.max()).astype(dtype)
            w = np.array([_exp(d, dtype, heads) for d in shifted], dtype)
            denom = dtype(0)
            for v in w:
                denom = dtype(denom + v)
            alpha[lo:hi, h] = w * (dtype(1) / denom)
    return alpha


@pytest.mark.parametrize("edge", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# softmax.py: 8 heads a vector, then the rest as a vector of 1-7 lanes
@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 17])
def test_weights_are_the_exponentials_of_the_shifted_scores_normalised(edge, dtype, heads):
    indptr, indices = _graph(3)
    n = indptr.size - 1
    rng = np.random.default_rng(4)
    x = (rng.random((n, heads)) * 30).astype(dtype)  # scores 0-30: exponentials over 13 orders of magnitude
    xl = x.reshape(n, heads, 1).copy()
    xr = np.zeros((n, heads, 1), dtype)
    att = np.ones((heads, 1), dtype)
    want = _weights(indptr, indices, x, dtype)
    head = (indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"], PREFETCH_DISTANCE)
    tail = (np.zeros((0, heads), dtype), np.zeros(0, dtype), False)
    for cuts in ([0, n], [0, 1, 17, 18, 40, 41, n - 1, n], list(range(0, n, 7)) + [n]):
        alpha = np.full((indices.size, heads), np.nan, dtype)
        out = np.empty((n, heads, 1), dtype)
        for lo, hi in zip(cuts, cuts[1:]):
            if edge:  # W_E u = 0: the same scores
                u, weT = np.ones((indices.size, 2), dtype), np.zeros((heads, 2, 1), dtype)
                gatv2_forward_edge_rows(lo, hi, *head, u, weT, *tail, alpha, out)
            else:
                gatv2_forward_rows(lo, hi, *head, *tail, alpha, out)
        assert alpha.tobytes() == want.tobytes()


@pytest.mark.parametrize("heads", [1, 3, 8])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_nan_or_inf_score_gives_nan_weights_in_its_row_and_head_only(heads, value):
    """A NaN score, or an infinite one (``inf - inf`` in the shift gives a NaN weight, and the sum spreads
    it), spoils the weights of its head in the rows that read it, and nothing else."""
    indptr, indices = _graph(5)
    n = indptr.size - 1
    x = np.tile(np.linspace(0, 5, n).astype(np.float32)[:, None], (1, heads))
    row, head = 40, heads - 1
    x[indices[indptr[row]], head] = value
    xl = x.reshape(n, heads, 1).copy()
    alpha = np.empty((indices.size, heads), np.float32)
    out = np.empty((n, heads, 1), np.float32)
    gatv2_forward_rows(
        0, n, indptr, indices, xl, np.zeros_like(xl), np.ones((heads, 1), np.float32), np.float32(0.2),
        ACTIVATIONS["leaky_relu"], WINDOW, np.zeros((0, heads), np.float32), np.zeros(0, np.float32), False,
        alpha, out,
    )  # fmt: skip
    bad = np.zeros((indices.size, heads), bool)
    for i in range(n):  # every row that reads the bad score's source
        if (indices[indptr[i] : indptr[i + 1]] == indices[indptr[row]]).any():
            bad[indptr[i] : indptr[i + 1], head] = True
    assert np.isnan(alpha[bad]).all() and np.isfinite(alpha[~bad]).all()


@intrinsic
def _vector_exp(typingctx, src, dst, k):
    """``dst[k:k + 8] = vector_exp_f32(src[k:k + 8])``."""
    sig = types.void(src, dst, types.intp)

    def codegen(context, builder, signature, args):
        vec = ir.VectorType(ir.FloatType(), 8)
        a, b = (context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 1))
        load_from = builder.bitcast(builder.gep(a.data, [args[2]]), vec.as_pointer())
        store_to = builder.bitcast(builder.gep(b.data, [args[2]]), vec.as_pointer())
        builder.store(vector_exp_f32(builder, builder.load(load_from, align=4)), store_to, align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit
def _both_exps(x, vector, scalar):
    for k in range(0, x.size - 7, 8):
        _vector_exp(x, vector, k)
    for k in range(x.size):
        scalar[k] = exp_f32(x[k])


def _same_exps(x):
    x = np.concatenate([x, np.zeros(-x.size % 8, np.float32)])
    vector, scalar = np.empty_like(x), np.empty_like(x)
    _both_exps(x, vector, scalar)
    return vector.tobytes() == scalar.tobytes()


def test_the_vector_exponential_is_exp_f32_bit_for_bit():
    rng = np.random.default_rng(0)
    negative = rng.integers(0, 1 << 31, 1 << 20, dtype=np.uint64).astype(np.uint32) | np.uint32(1 << 31)
    special = [0.0, -0.0, -np.inf, np.nan, -1e-45, -1e-38, -87.3, -88.7, -103.9, -104.0, -110.0, -1e30]
    x = np.concatenate([negative.view(np.float32), np.array(special, np.float32)])
    assert _same_exps(x)


@pytest.mark.slow
def test_the_vector_exponential_is_exp_f32_on_every_negative_float():
    chunk = 1 << 25
    for lo in range(1 << 31, 1 << 32, chunk):
        assert _same_exps(np.arange(lo, lo + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)), lo


@njit
def _softmax_row_did(alpha):
    return softmax_row(alpha, 0, alpha.shape[0])


def test_softmax_row_leaves_one_head_float64_and_strided_rows_to_the_loops():
    for alpha in (np.ones((5, 1), np.float32), np.ones((5, 3)), np.ones((5, 6), np.float32)[:, ::2]):
        before = alpha.copy()
        assert not _softmax_row_did(alpha)
        assert alpha.tobytes() == before.tobytes()
    assert _softmax_row_did(np.ones((5, 3), np.float32))


@njit
def _deltas_loops(alpha, upstream, delta, start, end):
    """``backward.upstream_delta``'s loops."""
    for h in range(alpha.shape[1]):
        mean_a = alpha.dtype.type(0.0)
        for e in range(start, end):
            mean_a += alpha[e, h] * upstream[e, h]
        for e in range(start, end):
            delta[e, h] = alpha[e, h] * (upstream[e, h] - mean_a)


@njit
def _deltas_vector(alpha, upstream, delta, start, end):
    return row_deltas(alpha, upstream, delta, start, end)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# 8 heads a vector, then the rest as a vector of 1-7 lanes
@pytest.mark.parametrize("heads", [2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 17])
def test_row_deltas_give_the_loops_bits(dtype, heads):
    indptr, _ = _graph(7)
    rng = np.random.default_rng(heads)
    nnz = indptr[-1]
    alpha = rng.random((nnz, heads)).astype(dtype)
    # magnitudes over eight orders, so any other summation order shows in the last bits
    upstream = (rng.standard_normal((nnz, heads)) * 10.0 ** rng.uniform(-4, 4, (nnz, 1))).astype(dtype)
    upstream[5, heads - 1], upstream[9, 0], alpha[11, 0] = np.nan, np.inf, -np.inf
    want = np.full((nnz, heads), 7.0, dtype)
    got = np.full((nnz, heads), 7.0, dtype)
    for i in range(indptr.size - 1):
        _deltas_loops(alpha, upstream, want, indptr[i], indptr[i + 1])
        assert _deltas_vector(alpha, upstream, got, indptr[i], indptr[i + 1])
    assert np.isnan(want).any() and (want != 7.0).any()
    assert got.tobytes() == want.tobytes()


def test_row_deltas_leave_one_head_and_strided_rows_to_the_loops():
    one = np.ones((5, 1), np.float32)
    assert not _deltas_vector(one, one, one.copy(), 0, 5)
    strided = np.ones((5, 6), np.float32)[:, ::2]
    delta = np.full((5, 3), 7.0, np.float32)
    assert not _deltas_vector(strided, strided, delta, 0, 5)
    assert (delta == 7.0).all()
