"""The forward kernels' softmax, bit for bit.

Scores are made exact (one channel, ``att = 1``, ``xr = 0``, ``xl >= 0``: the score of edge ``j -> i`` is
``xl[j]``), so the weights can be formed here with the kernel's operations in order: each row's scores less
their maximum, the exponential (the C library's, as Numba calls it), the row's sum in edge order and one
division; in any chunks of rows.
"""

import math

import numpy as np
import pytest
from numba import njit

from gatfast.kernels import ACTIVATIONS, gatv2_forward_edge_rows, gatv2_forward_rows

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
    return math.exp(d)  # float32: the C library's expf, as in the kernel


def _exp(d, dtype):
    return _libm_exp(d) if dtype == np.float32 else math.exp(d)


def _weights(indptr, indices, x, dtype):
    alpha = np.empty(indices.size, dtype)
    for i in range(indptr.size - 1):
        lo, hi = indptr[i], indptr[i + 1]
        if hi == lo:
            continue
        scores = x[indices[lo:hi]]
        shifted = (scores - scores.max()).astype(dtype)
        w = np.array([_exp(d, dtype) for d in shifted], dtype)
        denom = dtype(0)
        for v in w:
            denom = dtype(denom + v)
        alpha[lo:hi] = w * (dtype(1) / denom)
    return alpha


@pytest.mark.parametrize("edge", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weights_are_the_exponentials_of_the_shifted_scores_normalised(edge, dtype):
    indptr, indices = _graph(3)
    n = indptr.size - 1
    rng = np.random.default_rng(4)
    x = (rng.random(n) * 30).astype(dtype)  # scores 0-30: exponentials over 13 orders of magnitude
    xl = x.reshape(n, 1, 1).copy()
    xr = np.zeros((n, 1, 1), dtype)
    att = np.ones((1, 1), dtype)
    want = _weights(indptr, indices, x, dtype)
    head = (indptr, indices, xl, xr, att, dtype(0.2), ACTIVATIONS["leaky_relu"])
    tail = (np.zeros((0, 1), dtype), np.zeros(0, dtype), False)
    for cuts in ([0, n], [0, 1, 17, 18, 40, 41, n - 1, n], list(range(0, n, 7)) + [n]):
        alpha = np.full((indices.size, 1), np.nan, dtype)
        out = np.empty((n, 1, 1), dtype)
        for lo, hi in zip(cuts, cuts[1:]):
            if edge:  # W_E u = 0: the same scores
                u, weT = np.ones((indices.size, 2), dtype), np.zeros((1, 2, 1), dtype)
                gatv2_forward_edge_rows(lo, hi, *head, u, weT, *tail, alpha, out)
            else:
                gatv2_forward_rows(lo, hi, *head, *tail, alpha, out)
        assert alpha[:, 0].tobytes() == want.tobytes()


def test_a_nan_score_gives_nan_weights_in_its_row_only():
    indptr, indices = _graph(5)
    n = indptr.size - 1
    x = np.linspace(0, 5, n).astype(np.float32)
    row = 40
    x[indices[indptr[row]]] = np.nan
    xl = x.reshape(n, 1, 1).copy()
    alpha = np.empty((indices.size, 1), np.float32)
    out = np.empty((n, 1, 1), np.float32)
    gatv2_forward_rows(
        0, n, indptr, indices, xl, np.zeros_like(xl), np.ones((1, 1), np.float32), np.float32(0.2),
        ACTIVATIONS["leaky_relu"], np.zeros((0, 1), np.float32), np.zeros(0, np.float32), False, alpha, out,
    )  # fmt: skip
    bad = np.zeros(indices.size, bool)
    for i in range(n):  # every row that reads the NaN score's source
        if (indices[indptr[i] : indptr[i + 1]] == indices[indptr[row]]).any():
            bad[indptr[i] : indptr[i + 1]] = True
    assert np.isnan(alpha[bad]).all() and np.isfinite(alpha[~bad]).all()
