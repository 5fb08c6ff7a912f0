"""ELU between layers (``alpha = 1``) and its gradient, by rows, in one pass each.

The numpy form (``where``, ``minimum``, ``expm1``/``exp``, casts) made four
or five passes over the hidden activations of every training step; these
make one, and run on row chunks in parallel (``gatfast._runtime.run_rows``).

float64 calls libm's ``expm1`` and ``exp``. float32 does not: the C
library's ``expm1f`` is a scalar call of about 20 ns that the loop cannot
vectorise (glibc 2.36's also misrounds about 0.2 % of float32 inputs), and
ELU was a tenth of a Cora or road-scene training step. The float32 kernels
instead evaluate ``expm1`` and ``exp`` in float64 in branch-free code that
LLVM vectorises (:func:`_exp_parts`), then round once to float32: the
float64 value is within a few units of 2⁻⁵³ of the exact one, so the
float32 result is the correctly rounded ``expm1(x)`` (``exp(x)``) except
where the exact value lies within that distance of a rounding boundary
(none in the tests' sweep of the float32 range). It is the same on every
machine and C library. The power of two ``2**k`` is built from its bit
pattern and the polynomial is evaluated in Estrin's scheme: building it from
the binary digits of ``k`` and Horner's chain took 190 us for 523 x 64
floats, these take 100 us (one thread, 2-vCPU AMD EPYC), with the same bits
on every negative float32 (``tests/test_elu.py``'s slow sweep).

NaN propagates as in the numpy form: ``v > 0`` is false for NaN, and the
NaN is carried through; ``-0.0`` stays ``-0.0`` and ``-inf`` gives ``-1``
(slope 0).
"""

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

INV_LN2 = 1.4426950408889634
# ln 2 in two parts: LN2_HI has its last 21 bits zero, so k * LN2_HI is exact for |k| < 2**21
LN2_HI = 0.6931471803691238
LN2_LO = 1.9082149292705877e-10
# below this exp(x) is under a quarter of float32's smallest subnormal and expm1(x) rounds to -1
LOWEST = -110.0


# Adding 1.5 * 2**52 rounds a float64 of magnitude below 2**51 to an integer (to nearest, ties to
# even, as np.rint) and leaves that integer in the low bits of the sum's bit pattern.
ROUNDER = 6755399441055744.0


def _bitcast(source, target):
    """An intrinsic that reinterprets a ``source`` value's bits as ``target`` (a register move that LLVM
    vectorises)."""

    @intrinsic
    def cast(typingctx, value):
        if value != source:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(target))

        return target(source), codegen

    return cast


_bits_of = _bitcast(types.float64, types.int64)  # a float64's bit pattern
_float_of = _bitcast(types.int64, types.float64)  # the float64 with this bit pattern


@njit(inline="always", cache=True)
def _exp_parts(v):
    """``(s, p)`` with ``exp(v) = s * (1 + p)``, ``s = 2**k`` and ``p = expm1(r)``, ``|r| <= ln(2) / 2``.

    ``softmax.vector_exp_f32`` writes :func:`exp_f32` as LLVM vector code
    operation for operation: a change here must go there too (a test
    compares their bits).

    ``v`` (a float32) is read as float64 and clamped to ``[LOWEST, 0]``
    (a NaN becomes ``LOWEST``; callers select ``v`` itself for NaN and
    positive ``v``). ``p`` is the Taylor series to ``r**13 / 13!``, whose
    remainder is below 1e-17 on that interval.
    """
    d = np.float64(v)
    d = d if d > LOWEST else LOWEST
    d = d if d < 0.0 else 0.0
    rounded = d * INV_LN2 + ROUNDER  # (never fastmath here: reassociation would cancel the rounding)
    k = rounded - ROUNDER  # np.rint(d / ln 2), exactly
    r = (d - k * LN2_HI) - k * LN2_LO
    # q(r) = sum of r**i / (i + 2)! for i = 0 .. 11, in Estrin's scheme: four short chains
    # instead of one of twelve multiply-adds, so the vector units are not left waiting
    r2 = r * r
    r4 = r2 * r2
    q01 = (0.5 + r * (1.0 / 6.0)) + r2 * (1.0 / 24.0 + r * (1.0 / 120.0))
    q23 = (1.0 / 720.0 + r * (1.0 / 5040.0)) + r2 * (1.0 / 40320.0 + r * (1.0 / 362880.0))
    q45 = (1.0 / 3628800.0 + r * (1.0 / 39916800.0)) + r2 * (1.0 / 479001600.0 + r * (1.0 / 6227020800.0))
    q = q01 + r4 * (q23 + r4 * q45)
    # 2**k built from its exponent field (k in [-159, 0]: a normal float64); AVX2 has no
    # float64 -> int64 conversion, but the integer k already sits in the low bits of `rounded`
    scale = _float_of((_bits_of(rounded) - _bits_of(ROUNDER) + 1023) << 52)
    return scale, r + r * r * q


@njit(inline="always", cache=True)
def expm1_f32(v):
    """``expm1(v)`` of a float32 ``v <= 0``, rounded once from float64 (NaN for NaN, -1 for -inf)."""
    s, p = _exp_parts(v)
    e = np.float32(s * p + (s - 1.0))
    return e if v == v else v


@njit(inline="always", cache=True)
def exp_f32(v):
    """``exp(v)`` of a float32 ``v <= 0``, rounded once from float64 (NaN for NaN, 0 for -inf)."""
    s, p = _exp_parts(v)
    e = np.float32(s * p + s)
    return e if v == v else v


@njit(nogil=True, cache=True)
def elu_rows(r0, r1, x, y):
    """``y = x`` where ``x > 0``, else ``expm1(x)``, for rows ``[r0, r1)`` (float64: libm's)."""
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            y[r, c] = v if v > 0 else np.expm1(v)


@njit(nogil=True, cache=True)
def elu_backward_rows(r0, r1, x, grad_y, grad_x):
    """``grad_x = grad_y`` where ``x > 0``, else ``grad_y * exp(x)``, for rows ``[r0, r1)`` (float64: libm's)."""
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            g = grad_y[r, c]
            grad_x[r, c] = g if v > 0 else g * np.exp(v)


@njit(nogil=True, cache=True)
def elu_rows_f32(r0, r1, x, y):
    """:func:`elu_rows` for float32, vectorised (see the module docstring); ``-0.0`` stays ``-0.0``."""
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            e = expm1_f32(v)
            y[r, c] = v if (v > 0 or v == 0) else e


@njit(nogil=True, cache=True)
def elu_slope_rows_f32(r0, r1, x, y, slope):
    """:func:`elu_rows_f32`, and ``slope = 1`` where ``x > 0``, else ``exp(x)``: the derivative that
    :func:`elu_backward_rows_f32` would form, from the same parts of the same ``x`` (the same bits),
    so a training step's backward is one multiplication instead of a second evaluation of ``exp``."""
    one = np.float32(1.0)
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            s, p = _exp_parts(v)
            e = np.float32(s * p + (s - 1.0))
            d = np.float32(s * p + s)
            y[r, c] = v if (v > 0 or v == 0) else (e if v == v else v)
            slope[r, c] = one if v > 0 else (d if v == v else v)


@njit(nogil=True, cache=True)
def elu_backward_rows_f32(r0, r1, x, grad_y, grad_x):
    """:func:`elu_backward_rows` for float32, vectorised (see the module docstring)."""
    for r in range(r0, r1):
        for c in range(x.shape[1]):
            v = x[r, c]
            e = exp_f32(v)
            g = grad_y[r, c]
            grad_x[r, c] = g if v > 0 else g * e
