"""Whether a small array is all finite, in one call.

``numpy.isfinite(a).all()`` costs about 2 us on an array of a few hundred
values (a boolean temporary and two calls); the checks run on every
parameter gradient and layer output of a step, so on a small network they
added up to a tenth of the step. This loop stops at the first NaN or inf.
"""

import math

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def all_finite_flat(a):
    """True if the 1-D array ``a`` holds no NaN or inf."""
    for i in range(a.size):
        if not math.isfinite(a[i]):
            return False
    return True


@njit(nogil=True, cache=True)
def add_bias_all_finite(out, bias):
    """``out += bias`` (a row vector, on every row of the 2-D ``out``); True if the result holds no NaN or inf.

    One pass instead of numpy's broadcast add (slow on rows of a few dozen
    values: 0.29 ms for 20,399 x 32 float32) and a second pass to check. A
    non-finite value turns its column's ``v * 0`` sum into NaN, and the
    columns' sums vectorise where a test per value would not.
    """
    zero = out.dtype.type(0.0)
    width = out.shape[1]
    nan_sum = np.zeros(width, out.dtype)
    for i in range(out.shape[0]):
        for c in range(width):
            v = out[i, c] + bias[c]
            out[i, c] = v
            nan_sum[c] += v * zero
    for c in range(width):
        if nan_sum[c] != zero:
            return False
    return True


@njit(nogil=True, cache=True)
def max_exponent_bits(bits, mask):
    """The largest ``bits[i] & mask``: with the exponent mask of the float type the bits are the array of, it
    equals the mask exactly when some value is NaN or inf (their exponent bits are all ones).

    Integer max vectorises and never stops early: a pass at memory speed (0.12 ms for 20,399 x 32 float32,
    where numpy's pairwise sum took 0.32 ms under load).
    """
    top = bits.dtype.type(0)
    for i in range(bits.size):
        top = max(top, bits[i] & mask)
    return top
