"""Whether an array is all finite, in one call (``gatfast._validate.all_finite`` picks one).

``numpy.isfinite(a).all()`` costs about 2 us on an array of a few hundred
values (a boolean temporary and two calls); the checks run on every
parameter gradient and layer output of a step, so on a small network they
added up to a tenth of the step. Small arrays: a loop that stops at the
first NaN or inf. Large ones: the largest exponent field, a vectorised pass.
"""

import math

from numba import njit


@njit(nogil=True, cache=True)
def all_finite_flat(a):
    """True if the 1-D array ``a`` holds no NaN or inf."""
    for i in range(a.size):
        if not math.isfinite(a[i]):
            return False
    return True


@njit(nogil=True, cache=True)
def max_exponent_bits(bits, mask):
    """The largest ``bits[i] & mask``: with the exponent mask of the float type the bits are the array of, it
    equals the mask exactly when some value is NaN or inf (their exponent bits are all ones).

    Integer max vectorises and never stops early: a pass at memory speed (0.14 ms for 20,399 x 32 float32,
    where numpy's sum, the check it replaces, took 0.20 ms).
    """
    top = bits.dtype.type(0)
    for i in range(bits.size):
        top = max(top, bits[i] & mask)
    return top
