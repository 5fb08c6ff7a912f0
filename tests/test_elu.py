"""ELU in float32: the vectorised kernels against the correctly rounded values.

The reference is ``expm1``/``exp`` in float64 (libm, well under an ulp of
float64) rounded once to float32: where it is the correctly rounded float32,
the kernels must give exactly it. float64 keeps libm's values bit for bit.
"""

import math

import numpy as np
import pytest

from gatfast.kernels.elu import elu_backward_rows_f32, elu_rows_f32
from gatfast.models.activations import (
    activation_backward,
    activation_forward,
    activation_forward_slope,
    multiply_slope,
)

# every negative float32 from -0 down to -inf, as bit patterns
NEGATIVE_BITS = (0x80000000, 0xFF800001)


def _negative_floats(start, stop, step):
    bits = np.arange(start, stop, step, dtype=np.int64).astype(np.uint32)
    return bits.view(np.float32).reshape(1, -1)


def _check_range(start, stop, step):
    x = _negative_floats(start, stop, step)
    y = np.empty_like(x)
    slope = np.empty_like(x)
    elu_rows_f32(0, 1, x, y)
    elu_backward_rows_f32(0, 1, x, np.ones_like(x), slope)
    with np.errstate(under="ignore"):
        want_y = np.expm1(x.astype(np.float64)).astype(np.float32)
        want_slope = np.exp(x.astype(np.float64)).astype(np.float32)
    bad_y = np.flatnonzero(y.view(np.int32) != want_y.view(np.int32))
    bad_slope = np.flatnonzero(slope.view(np.int32) != want_slope.view(np.int32))
    assert bad_y.size == 0, f"expm1 differs at {x[0, bad_y[:5]]}: {y[0, bad_y[:5]]} != {want_y[0, bad_y[:5]]}"
    assert bad_slope.size == 0, f"exp differs at {x[0, bad_slope[:5]]}"
    _check_slope_pass(x, y, slope)


def _check_slope_pass(x, y, gx, grad=None):
    """The training forward's one pass (ELU and its derivative) against the two kernels: the same bits."""
    grad = np.ones_like(x) if grad is None else grad
    y2, slope = activation_forward_slope("elu", x)
    np.testing.assert_array_equal(y2.view(np.int32), y.view(np.int32))
    np.testing.assert_array_equal(multiply_slope(slope, grad).view(np.int32), gx.view(np.int32))


def test_float32_elu_is_correctly_rounded_on_a_sweep_of_negative_floats():
    _check_range(*NEGATIVE_BITS, 4099)  # ~520,000 values spread over every exponent


@pytest.mark.slow
def test_float32_elu_is_correctly_rounded_on_every_negative_float():
    start, stop = NEGATIVE_BITS
    chunk = 1 << 25
    for lo in range(start, stop, chunk):
        _check_range(lo, min(stop, lo + chunk), 1)


def test_float32_elu_special_values():
    x = np.array(
        [[np.nan, -np.inf, np.inf, -0.0, 0.0, -1e-45, -1e-30, -103.97, -104.0, -88.0, 3e38, -3e38]],
        np.float32,
    )
    y = activation_forward("elu", x, check_finite=False)
    g = activation_backward("elu", x, y, np.full_like(x, 2.0), check_finite=False)
    assert np.isnan(y[0, 0]) and np.isnan(g[0, 0])
    want = np.array([-1.0, np.inf, -0.0, 0.0, -1e-45, -1e-30, -1, -1, -1, 3e38, -1], np.float32)
    np.testing.assert_array_equal(y[0, 1:], want)
    assert np.signbit(y[0, 3]) and not np.signbit(y[0, 4])  # -0.0 stays -0.0, as expm1(-0.0)
    with np.errstate(under="ignore", over="ignore"):  # exp(3e38) is inf, and not selected
        slopes = np.exp(x[0, 5:].astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(g[0, 1:5], [0.0, 2.0, 2.0, 2.0])
    np.testing.assert_array_equal(g[0, 5:], 2 * np.where(x[0, 5:] > 0, 1, slopes))
    both = np.concatenate([x, x[:, ::-1]])  # every special value under each upstream value below
    grads = np.array(
        [[2.0, -0.0, np.inf, -3.5, 0.0, 1e-40, 7.0, -np.inf, 1.0, np.nan, 5.0, -2.0]] * 2, np.float32
    )
    y2 = activation_forward("elu", both, check_finite=False)
    _check_slope_pass(both, y2, activation_backward("elu", both, y2, grads, check_finite=False), grads)


def test_slope_pass_on_positive_values_and_other_dtypes():
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(33, 17)) * 4).astype(np.float32)  # a vector body and a tail per row
    g = rng.normal(size=x.shape).astype(np.float32)
    y = activation_forward("elu", x)
    _check_slope_pass(x, y, activation_backward("elu", x, y, g), g)
    for name, arr in (("elu", x.astype(np.float64)), ("relu", x)):
        out, slope = activation_forward_slope(name, arr)  # no slope: the backward evaluates as before
        assert slope is None
        np.testing.assert_array_equal(out, activation_forward(name, arr))
    assert multiply_slope(y, g.astype(np.float64)) is None  # another dtype: activation_backward's case
    assert multiply_slope(y, g[:, :5]) is None


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (0, 4), (2, 0, 3), ()])
def test_float32_elu_gives_the_same_bits_for_any_shape_and_layout(shape):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 4).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    y = activation_forward("elu", x)
    gx = activation_backward("elu", x, y, g)
    flat_y = activation_forward("elu", x.reshape(1, -1))
    flat_g = activation_backward("elu", x.reshape(1, -1), flat_y, g.reshape(1, -1))
    assert y.shape == gx.shape == np.shape(x)
    np.testing.assert_array_equal(y.reshape(1, -1).view(np.int32), flat_y.view(np.int32))
    np.testing.assert_array_equal(gx.reshape(1, -1).view(np.int32), flat_g.view(np.int32))
    if x.ndim == 2 and x.size:
        xt = np.asfortranarray(x)  # another layout: the same values
        np.testing.assert_array_equal(activation_forward("elu", xt), y)


def test_float64_elu_keeps_libm_values():
    # against the C library's expm1 and exp (Python's math), not NumPy's: on CPUs with AVX-512
    # NumPy's own vector float64 exp and expm1 differ from libm in the last bit (9 and 17 of these
    # 360 values on an Intel Xeon)
    x = np.random.default_rng(2).normal(size=(40, 9)) * 5
    y = activation_forward("elu", x)
    np.testing.assert_array_equal(y, np.vectorize(lambda v: v if v > 0 else math.expm1(v))(x))
    g = activation_backward("elu", x, y, np.ones_like(x))
    np.testing.assert_array_equal(g, np.vectorize(lambda v: 1.0 if v > 0 else math.exp(v))(x))
