"""A row's softmax and its backward for several heads, as vector code over the heads.

A row's softmax written as loops (each head: the maximum, the
exponentials and their sum, the division) spent most of its time on the
loops themselves and on the C library's ``expf``: on Cora's graph (4.9
edges a row) it took 8.7 ns per weight at 8 heads as at one. At 8 heads x
8 channels (one thread, Intel Xeon) a kernel of the softmax alone took 0.93
ms and the whole forward kernel 1.05 ms (its parts overlap), and leaving
out ``expf`` saved 0.34 ms. :func:`softmax_row` runs the loops over a
row's edges once per 8 float32 heads instead, the heads in the lanes of a
vector (the last ``H mod 8`` in a vector of that width), with the
exponential of :func:`vector_exp_f32`. Each head gets the loops'
operations in the loops' order: the maximum over the edges in order, the
shifted scores' exponentials, their sum in edge order and one division.
The forward kernel took 0.63-0.70x the time at 8 heads x 8 channels and 16
x 4, 0.76-0.80x at 4 x 16, 0.93x at 3 x 17 and 1.0x at 2 x 32 (Cora's
graph, one thread, Intel Xeon, both kernels alternating in one process);
with ``head_sums.py`` as well, 0.52x at 8 x 8 (1.09 -> 0.57 ms) and 0.70x
at 4 x 16. :func:`row_deltas` does the softmax's backward (``δ`` from
``A``) the same way, in float32 and float64 (no exponential there): the
target pass took 0.75x the time at 8 x 8 and 0.84x at 4 x 16.

The exponential is ``elu.exp_f32`` written as vector operations: the same
IEEE operations in the same order, so the same bits (a correctly rounded
float32 ``exp`` but where the exact value lies within about 2⁻⁵³ of a
rounding boundary; ``tests/test_softmax.py`` sweeps every negative float32),
on every machine, where the C library's ``expf`` misrounded 5 of 13,516
weights. A change to one of the two must go to the other.

The softmax of one head, and of float64, is left to the kernels' loops
(:func:`softmax_row` returns False), with the C library's ``exp``: with one
head the lanes would have to be edges, and one row's chain of dependent
vector operations (the maximum, the exponential, the sum in edge order)
took longer than the loops, whose exponentials of successive edges overlap
(1.27-1.40x the forward kernel's time at 1 x 32 and 1 x 64, Cora's graph).

The vector code sits in LLVM functions of its own (``ir_parts.outlined``).
"""

import struct

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .elu import INV_LN2, LN2_HI, LN2_LO, LOWEST, ROUNDER
from .ir_parts import array_args, array_from, element_pointer, lane_groups, outlined

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_BOOL = ir.IntType(1)


def _dconst(vec_ty, value):
    return ir.Constant(vec_ty, [ir.Constant(vec_ty.element, value)] * vec_ty.count)


def vector_exp_f32(builder, v):
    """``elu.exp_f32`` of each lane of ``v`` (a float32 vector): the same operations, so the same bits."""
    f64v = ir.VectorType(ir.DoubleType(), v.type.count)
    i64v = ir.VectorType(_I64, v.type.count)

    def c(x):
        return _dconst(f64v, x)

    d = builder.fpext(v, f64v)
    d = builder.select(builder.fcmp_ordered(">", d, c(LOWEST)), d, c(LOWEST))
    d = builder.select(builder.fcmp_ordered("<", d, c(0.0)), d, c(0.0))
    rounded = builder.fadd(builder.fmul(d, c(INV_LN2)), c(ROUNDER))
    k = builder.fsub(rounded, c(ROUNDER))
    r = builder.fsub(builder.fsub(d, builder.fmul(k, c(LN2_HI))), builder.fmul(k, c(LN2_LO)))
    r2 = builder.fmul(r, r)
    r4 = builder.fmul(r2, r2)

    def pair(a, b, cc, dd):  # (a + r b) + r2 (cc + r dd), as _exp_parts writes each q
        left = builder.fadd(c(a), builder.fmul(r, c(b)))
        right = builder.fadd(c(cc), builder.fmul(r, c(dd)))
        return builder.fadd(left, builder.fmul(r2, right))

    q01 = pair(0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0)
    q23 = pair(1.0 / 720.0, 1.0 / 5040.0, 1.0 / 40320.0, 1.0 / 362880.0)
    q45 = pair(1.0 / 3628800.0, 1.0 / 39916800.0, 1.0 / 479001600.0, 1.0 / 6227020800.0)
    q = builder.fadd(q01, builder.fmul(r4, builder.fadd(q23, builder.fmul(r4, q45))))
    rounder_bits = _dconst(i64v, struct.unpack("<q", struct.pack("<d", ROUNDER))[0])
    exponent = builder.add(builder.sub(builder.bitcast(rounded, i64v), rounder_bits), _dconst(i64v, 1023))
    s = builder.bitcast(builder.shl(exponent, _dconst(i64v, 52)), f64v)
    p = builder.fadd(r, builder.fmul(builder.fmul(r, r), q))
    e = builder.fptrunc(builder.fadd(builder.fmul(s, p), s), v.type)
    return builder.select(builder.fcmp_ordered("==", v, v), e, v)


@intrinsic
def softmax_row(typingctx, alpha, start, end):
    """The scores ``alpha[start:end]`` become each head's softmax weights, as vector code (the module
    docstring). Returns whether it did: True for a C-contiguous float32 ``alpha``, else False (nothing
    done: the caller's loops do it). A row without edges is left alone."""
    if not (isinstance(alpha, types.Array) and alpha.ndim == 2 and isinstance(alpha.dtype, types.Float)):
        return None
    sig = types.boolean(alpha, types.intp, types.intp)
    vectorised = alpha.dtype == types.float32 and alpha.layout == "C"

    def codegen(context, builder, signature, args):
        if not vectorised:
            return ir.Constant(_BOOL, 0)
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        start, end = args[1], args[2]
        heads = builder.extract_value(arr.shape, 1)
        several = builder.icmp_signed(">", heads, ir.Constant(start.type, 1))

        def body(fb, params):
            rows, heads, start, end = array_from(fb, params[:3]), params[3], params[4], params[5]
            lane_groups(fb, heads, lambda h, width: _head_group(fb, rows, start, end, h, width))

        with builder.if_then(builder.and_(several, builder.icmp_signed(">", end, start))):
            outlined(
                builder, "gatfast.softmax_heads.float32", array_args(builder, arr) + [heads, start, end], body
            )
        return several

    return sig, codegen


def _head_rows(builder, arr, h, width):
    """``(load(e), store(value, e))`` of the heads ``[h, h + width)`` of row ``e`` of a 2-D array."""
    fty = arr.data.type.pointee
    vec_ty = ir.VectorType(fty, width)
    size = 4 if isinstance(fty, ir.FloatType) else 8  # the element's alignment

    def at(e):
        return builder.bitcast(element_pointer(builder, arr, [e, h]), vec_ty.as_pointer())

    def load(e):
        return builder.load(at(e), align=size)

    def store(value, e):
        builder.store(value, at(e), align=size)

    return load, store


def _head_group(builder, arr, start, end, h, width):
    """Heads ``[h, h + width)`` of the row: per lane, the loops' maximum, exponentials, sum and division."""
    intp = start.type
    one = ir.Constant(intp, 1)
    vec_ty = ir.VectorType(ir.FloatType(), width)
    load, store = _head_rows(builder, arr, h, width)
    top = cgutils.alloca_once_value(builder, load(start))
    with cgutils.for_range_slice(builder, builder.add(start, one), end, one, intp) as (e, _):
        a, m = load(e), builder.load(top)
        builder.store(builder.select(builder.fcmp_ordered(">", a, m), a, m), top)
    row_max = builder.load(top)
    denom = cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None))
    with cgutils.for_range_slice(builder, start, end, one, intp) as (e, _):
        w = vector_exp_f32(builder, builder.fsub(load(e), row_max))
        store(w, e)
        builder.store(builder.fadd(builder.load(denom), w), denom)
    ones = ir.Constant(vec_ty, [ir.Constant(vec_ty.element, 1.0)] * width)
    inv = builder.fdiv(ones, builder.load(denom))
    with cgutils.for_range_slice(builder, start, end, one, intp) as (e, _):
        store(builder.fmul(load(e), inv), e)


@intrinsic
def row_deltas(typingctx, alpha, upstream, delta, start, end):
    """``delta[e, h] = alpha[e, h] * (upstream[e, h] - Σ_e' alpha[e', h] upstream[e', h])`` over the row
    ``[start, end)``, the sum in edge order: the softmax's backward, for several heads as vector code over
    the heads (as :func:`softmax_row`; the loops' operations, the same bits). Returns whether it did: True
    for several heads in C-contiguous arrays of one float dtype, else False (nothing done)."""
    arrays = (alpha, upstream, delta)
    if not all(
        isinstance(a, types.Array) and a.ndim == 2 and isinstance(a.dtype, types.Float) for a in arrays
    ):
        return None
    sig = types.boolean(alpha, upstream, delta, types.intp, types.intp)
    vectorised = len({a.dtype for a in arrays}) == 1 and all(a.layout == "C" for a in arrays)

    def codegen(context, builder, signature, args):
        if not vectorised:
            return ir.Constant(_BOOL, 0)
        a_alpha, a_up, a_delta = (
            context.make_array(t)(context, builder, v) for t, v in zip(signature.args[:3], args[:3])
        )
        start, end = args[3], args[4]
        heads = builder.extract_value(a_alpha.shape, 1)
        several = builder.icmp_signed(">", heads, ir.Constant(start.type, 1))

        def body(fb, params):
            alpha_rows, up_rows, delta_rows = (array_from(fb, params[k : k + 3]) for k in (0, 3, 6))
            heads, start, end = params[9:12]
            one = ir.Constant(start.type, 1)

            def group(h, width):
                load_a, _ = _head_rows(fb, alpha_rows, h, width)
                load_u, _ = _head_rows(fb, up_rows, h, width)
                _, store_d = _head_rows(fb, delta_rows, h, width)
                vec_ty = ir.VectorType(alpha_rows.data.type.pointee, width)
                mean = cgutils.alloca_once_value(fb, ir.Constant(vec_ty, None))
                with cgutils.for_range_slice(fb, start, end, one, start.type) as (e, _):
                    fb.store(fb.fadd(fb.load(mean), fb.fmul(load_a(e), load_u(e))), mean)
                mean_a = fb.load(mean)
                with cgutils.for_range_slice(fb, start, end, one, start.type) as (e, _):
                    store_d(fb.fmul(load_a(e), fb.fsub(load_u(e), mean_a)), e)

            lane_groups(fb, heads, group)

        with builder.if_then(several):
            row_args = sum((array_args(builder, a) for a in (a_alpha, a_up, a_delta)), [])
            outlined(
                builder,
                f"gatfast.row_deltas_heads.{signature.args[0].dtype}",
                row_args + [heads, start, end],
                body,
            )
        return several

    return sig, codegen
