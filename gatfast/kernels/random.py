"""Counter-based random numbers: a uniform draw is a hash of (key, id, column).

Dropout masks and neighbour samples drawn this way depend only on what they
apply to (a node, an edge, a graph, identified by a global id) and on a key
derived from the seed, the epoch and the batch, never on the order of calls,
the thread count or how a batch is split into shards. That is what lets a
data-parallel run over shards give the same result as one process.

The hash is SplitMix64's finaliser (Steele, Lea and Flood, 2014) applied to
the key mixed with the id and the column; the top 53 bits give a float64 in
``[0, 1)``. All arithmetic is on uint64 and wraps. Serial: a few nanoseconds a draw, small next to the
attention kernels, and safe in forked children.
"""

import math

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_SCALE = 1.0 / 9007199254740992.0  # 2**-53


@njit(inline="always", cache=True)
def mix(z):
    """SplitMix64's finaliser of ``z + golden ratio`` (uint64 in, uint64 out)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def derive_key(key, values):
    """A new key from ``key`` and a sequence of int64 ``values`` (context: kind, layer, epoch, ...)."""
    k = np.uint64(key)
    for v in values:
        k = mix(k ^ mix(np.uint64(v)))
    return k


@njit(inline="always", cache=True)
def draw_bits(key, ident, column):
    """The 53 random bits of ``(key, ident, column)`` as an int64 in ``[0, 2**53)``."""
    h = mix(key ^ mix(np.uint64(ident) * np.uint64(0x100000001B3) + np.uint64(column)))
    return np.int64(h >> np.uint64(11))


@njit(inline="always", cache=True)
def uniform_at(key, ident, column):
    """The uniform draw in ``[0, 1)`` for ``(key, ident, column)``: ``draw_bits * 2**-53``."""
    return np.float64(draw_bits(key, ident, column)) * _SCALE


def keep_threshold(p):
    """The int64 ``t`` with ``uniform_at(...) >= p`` exactly when ``draw_bits(...) >= t``, for ``p`` in [0, 1].

    A draw is ``bits * 2**-53`` with an integer ``bits``, and scaling ``p``
    by a power of two is exact, so ``bits * 2**-53 >= p`` holds exactly when
    ``bits >= ceil(p * 2**53)``. Comparing integers skips the conversion to
    float64, which AVX2 has no instruction for (a third of a dropout mask's
    time).
    """
    return np.int64(math.ceil(float(p) * 9007199254740992.0))


@njit(nogil=True, cache=True)
def keyed_uniform_rows(r0, r1, key, ids, out):
    """``out[r, c] = U(key, ids[r], c)`` for rows ``[r0, r1)`` of a (len(ids), width) float64 ``out``."""
    k = np.uint64(key)
    for r in range(r0, r1):
        for c in range(out.shape[1]):
            out[r, c] = uniform_at(k, ids[r], c)


@njit(nogil=True, cache=True)
def keyed_keep_rows(r0, r1, key, ids, slots, threshold, scale, out):
    """Rows ``[r0, r1)`` of keyed dropout multipliers: ``out[slots[r], c] = scale`` if the draw of
    ``(key, ids[r], c)`` is kept (``draw_bits >= threshold``, see :func:`keep_threshold`), else 0.

    ``slots`` places row ``r`` of the draws in ``out`` (an empty ``slots``:
    row ``r`` itself), so the rows of one graph's edges and of the self
    loops a layer adds land where the attention graph has them.
    """
    k = np.uint64(key)
    zero = out.dtype.type(0)
    direct = slots.size == 0
    for r in range(r0, r1):
        row = r if direct else slots[r]
        ident = ids[r]
        for c in range(out.shape[1]):
            out[row, c] = scale if draw_bits(k, ident, c) >= threshold else zero


@njit(cache=True)
def keyed_uniform_pairs(key, rows, cols, out):
    """``out[e] = U(key, rows[e], cols[e])``: one draw per stored entry of a sparse matrix."""
    k = np.uint64(key)
    for e in range(rows.size):
        out[e] = uniform_at(k, rows[e], cols[e])


@njit(nogil=True, cache=True)
def keyed_dropout_rows(r0, r1, key, ids, x, threshold, scale, mask, y, overflow):
    """Rows ``[r0, r1)`` of keyed inverted dropout: ``mask = scale * (U(key, ids[r], c) >= p)``, ``y = x * mask``.

    ``threshold`` is ``keep_threshold(p)``. The draws are :func:`uniform_at`'s, so the multipliers equal
    ``((uniform(ids, width) >= p) / (1 - p)).astype(x.dtype)`` bit for bit,
    without the float64 draws, the boolean and the cast in memory. Sets
    ``overflow[0] = 1`` if a ``y`` is not finite (a huge ``x`` times
    ``1 / (1 - p)``, or a NaN or inf in ``x``), so the output needs no
    second pass to be checked.
    """
    k = np.uint64(key)
    zero = mask.dtype.type(0)
    largest = np.finfo(y.dtype).max
    bad = 0
    for r in range(r0, r1):
        ident = ids[r]
        for c in range(x.shape[1]):
            m = scale if draw_bits(k, ident, c) >= threshold else zero
            mask[r, c] = m
            y[r, c] = x[r, c] * m
        # a separate integer reduction over the row (in L1): a float one in the loop above stops
        # it vectorising (4x slower); NaN compares False
        for c in range(x.shape[1]):
            bad |= not (abs(y[r, c]) <= largest)
    if bad:
        overflow[0] = 1
