"""Row-wise loops of the biases: column sums (every layer's bias gradients) and a row vector added to every row.

``numpy``'s ``a.sum(axis=0)`` on a C-contiguous float32 array adds the rows
one by one into the running sums, but through its generic reduction loop:
0.54 ms for 20,399 x 32 float32, where a plain loop took 0.10 ms (2-core AMD
EPYC). Same operations, same order (row ``i`` added after row ``i - 1``,
every column on its own), so the same bits as numpy's, for any thread count.
Its broadcast ``out += bias`` is slow on short rows the same way: 17 us for
1000 x 32 float32, where :func:`add_bias_rows` takes 6 us. A layer's
output that the forward kernel does not finish itself (averaged heads, a
root weight or a residual: ``layers.passes.finishes_output``) takes
:func:`add_bias_rows_finite`, which also checks it in the same pass.

The column sums are :func:`sum_rows`, which keeps them in vector registers
over a block of rows at a time. Written as loops, every row loaded and
stored the running sums again, and each row's adds waited for the store of
the row before (a store-to-load round trip, several times an add's
latency): the projections' bias gradients took 0.18 of the 1.09 ms of
``small-batch``'s dense backward. One thread, AMD EPYC with AVX-512, the
loop against :func:`sum_rows` in one process: 20,399 x 32 float32 74-81 us
against 30-32 us, 20,399 x 9 74-78 against 19, 2708 x 7 9.4 against 3.4,
200,000 x 64 1.4-3.6 ms against 1.2 ms.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .ir_parts import lane_rest, store_vector, vector_groups
from .simd import LANES, element_pointer, load_vector

#: Vectors of sums at once: 8 AVX2 registers hold 64 float32 channels, so ``large``'s rows (64 channels) are
#: read in one pass. A block of ``ROW_BLOCK`` rows is added to every group's sums before the next block, so
#: a wider array is still read from memory once (the block's rows stay in the L1 cache for the other
#: groups): a whole pass per group of 4 vectors took 1.15-1.6x the loop's time on 200,000 x 64 float32.
GROUP = 8
ROW_BLOCK = 32


@intrinsic
def sum_rows(typingctx, out, a, lo, hi):
    """``out[c] = Σ_{i in [lo, hi)} a[i, c]``: from +0, the rows added in increasing order, every column on its
    own (the plain loop's operations, so its bits), the sums held in registers.

    ``a`` 2-D and ``out`` 1-D of ``a``'s columns, one float dtype; the channels in whole 8-lane vectors take
    vector registers where both are C-contiguous, the others (all of them otherwise) a scalar register each.
    Reads and writes without bounds checks: ``lo <= hi`` rows of ``a`` and ``out``'s size are the caller's.
    """
    if not (isinstance(out, types.Array) and isinstance(a, types.Array) and out.ndim == 1 and a.ndim == 2):
        return None
    if not (out.dtype == a.dtype and isinstance(a.dtype, types.Float)):
        return None
    sig = types.void(out, a, types.intp, types.intp)
    vectorised = out.layout == "C" and a.layout == "C"

    def codegen(context, builder, signature, args):
        arr_out = context.make_array(signature.args[0])(context, builder, args[0])
        arr_a = context.make_array(signature.args[1])(context, builder, args[1])
        lo, hi = args[2], args[3]
        intp = context.get_value_type(types.intp)
        fty = context.get_value_type(signature.args[0].dtype)
        vec_ty = ir.VectorType(fty, LANES)
        zero = ir.Constant(intp, 0)
        one = ir.Constant(intp, 1)
        channels = builder.extract_value(arr_a.shape, 1)

        start = element_pointer(builder, arr_out, [zero])

        def group(
            r0, r1, base, count, ty=vec_ty
        ):  # rows [r0, r1), channels [base, base + 8 count) or a width
            offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
            # the sums so far (exactly: a stored float reads back the same), kept in registers over the rows
            sums = [
                cgutils.alloca_once_value(builder, load_vector(builder, start, off, ty)) for off in offsets
            ]
            with cgutils.for_range_slice(builder, r0, r1, one, intp) as (i, _):
                row = element_pointer(builder, arr_a, [i, zero])
                for total, off in zip(sums, offsets):
                    builder.store(
                        builder.fadd(builder.load(total), load_vector(builder, row, off, ty)), total
                    )
            for total, off in zip(sums, offsets):
                store_vector(builder, start, off, builder.load(total))

        if vectorised:  # rows outer: each row's channels added side by side, a block of rows at a time
            with cgutils.for_range(builder, channels) as column:
                builder.store(ir.Constant(fty, 0.0), element_pointer(builder, arr_out, [column.index]))
            block = ir.Constant(intp, ROW_BLOCK)
            with cgutils.for_range_slice(builder, lo, hi, block, intp) as (r0, _):
                end = builder.add(r0, block)
                r1 = builder.select(builder.icmp_signed("<", end, hi), end, hi)
                first = vector_groups(
                    builder, intp, channels, GROUP, lambda base, count: group(r0, r1, base, count), half=True
                )
                rest = builder.sub(channels, first)
                lane_rest(
                    builder,
                    rest,
                    first,
                    lambda base, width: group(r0, r1, base, 1, ir.VectorType(fty, width)),
                )
            return context.get_dummy_value()
        total = cgutils.alloca_once(builder, fty)  # any strides: a column at a time, its sum in a register
        with cgutils.for_range(builder, channels) as column:
            c = column.index
            builder.store(ir.Constant(fty, 0.0), total)
            with cgutils.for_range_slice(builder, lo, hi, one, intp) as (i, _):
                value = builder.load(element_pointer(builder, arr_a, [i, c]))
                builder.store(builder.fadd(builder.load(total), value), total)
            builder.store(builder.load(total), element_pointer(builder, arr_out, [c]))
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True)
def column_sums(a, out):
    """``out[c] = Σ_i a[i, c]``, the rows added in increasing order (:func:`sum_rows`)."""
    if out.size != a.shape[1]:  # sum_rows writes without bounds checks
        raise ValueError("out must have one value per column of a")
    sum_rows(out, a, 0, a.shape[0])


@njit(nogil=True, cache=True)
def add_bias_rows(out, bias):
    """``out[i, c] += bias[c]`` for every row ``i``: numpy's ``out += bias``, the same bits."""
    for i in range(out.shape[0]):
        for c in range(out.shape[1]):
            out[i, c] += bias[c]


@njit(nogil=True, cache=True)
def add_bias_rows_finite(out, bias):
    """:func:`add_bias_rows` (no add for a ``bias`` of size 0), and whether ``out`` then holds no NaN or inf.

    One pass where the add and ``all_finite`` took two: each column keeps
    ``Σ (v - v)`` of its values, which is +0 while they are finite and NaN
    from the first NaN or inf on (``inf - inf`` is NaN), so the loop runs
    over the columns innermost, as the add does, and vectorises.
    """
    width = out.shape[1]
    marks = np.zeros(width, out.dtype)
    with_bias = bias.size > 0
    for i in range(out.shape[0]):
        if with_bias:
            for c in range(width):
                v = out[i, c] + bias[c]
                out[i, c] = v
                marks[c] += v - v
        else:
            for c in range(width):
                v = out[i, c]
                marks[c] += v - v
    for c in range(width):
        if not marks[c] == 0:
            return False
    return True
