"""Row-wise loops of the biases: column sums (every layer's bias gradients) and a row vector added to every row.

``numpy``'s ``a.sum(axis=0)`` on a C-contiguous float32 array adds the rows
one by one into the running sums, but through its generic reduction loop:
0.54 ms for 20,399 x 32 float32, where this loop takes 0.10 ms (2-core AMD
EPYC). Same operations, same order (row ``i`` added after row ``i - 1``,
every column on its own), so the same bits as numpy's, for any thread count.
Its broadcast ``out += bias`` is slow on short rows the same way: 17 us for
1000 x 32 float32, where :func:`add_bias_rows` takes 6 us. A layer's
output that the forward kernel does not finish itself (averaged heads, a
root weight or a residual: ``layers.passes.finishes_output``) takes
:func:`add_bias_rows_finite`, which also checks it in the same pass.

The column sums are :func:`sum_rows`, which keeps them in vector registers
for the whole run of rows. Written as loops, every row loaded and stored
the running sums again, and each row's adds waited for the store of the
row before (a store-to-load round trip, several times an add's latency):
the projections' bias gradients took 0.18 of the 1.09 ms of ``small-batch``'s
dense backward (one thread, AMD EPYC with AVX-512, 2 x 20,399 x 32 float32).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .ir_parts import store_vector, vector_groups
from .simd import LANES, element_pointer, load_vector

GROUP = 4  # vectors of sums at once: 32 float32 channels in 4 AVX2 registers, 8 more for the rows


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

        def group(base, count):  # the channels [base, base + 8 count)
            sums = [cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None)) for _ in range(count)]
            offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
            with cgutils.for_range_slice(builder, lo, hi, one, intp) as (i, _):
                row = element_pointer(builder, arr_a, [i, zero])
                for total, off in zip(sums, offsets):
                    builder.store(builder.fadd(builder.load(total), load_vector(builder, row, off, vec_ty)), total)
            start = element_pointer(builder, arr_out, [zero])
            for total, off in zip(sums, offsets):
                store_vector(builder, start, off, builder.load(total))

        first = vector_groups(builder, intp, channels, GROUP, group) if vectorised else zero
        total = cgutils.alloca_once(builder, fty)
        with cgutils.for_range(builder, channels, start=first) as column:
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
