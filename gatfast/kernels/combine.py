"""Weighted sums of gathered rows, ``out[i, h] = Σ_k w_k src[idx[k], h]``, with the sums kept in registers.

The aggregation of the forward pass and the sparse products are this one
operation. Written as a loop over ``k`` with the channel loop inside
(``out[i, h, c] += w * src[j, h, c]``), every term stores the output row and
the next term loads it again: LLVM may not keep the row in registers, since
``out`` and ``src`` might overlap. :func:`combine_rows` emits the other loop
order itself: for each group of up to 32 channels (four 8-lane vectors) it
runs over ``k`` with the partial sums in vector registers and stores them
once. Measured on a 2-core AMD EPYC, one thread: Cora's sparse products
(49,216 nonzeros, two right-hand sides of width 64) went from 1.34 to
0.61 ms. The layout decides at compile time, not per row: a per-row
check of the strides cost the sparse products a quarter of their time.

Every channel's sum is the same sequence of IEEE operations as the plain
loop, ``((0 + w_lo s_lo) + w_(lo+1) s_(lo+1)) + ...`` in ``k`` order (a
multiply, then an add, never fused), so the result is the same bits, for
an ``out`` that does not overlap ``src`` (the loop stored each partial sum
before reading the next term; every caller's output is its own array). The
last ``C mod 8`` channels run in the plain loop order on the output row.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .ir_parts import element_pointer, for_heads, store_vector, times_scale, vector_groups
from .simd import LANES, load_vector, row_pointer, splat

GROUP = 4  # vectors summed at once: 4 sums (8 float64 registers on AVX2) plus a row and a weight


def _row_start(builder, ary, ndim, row, h):
    """Pointer to ``ary[row, h, 0]`` (3-D) or ``ary[row, 0]`` (2-D)."""
    if ndim == 3:
        return row_pointer(builder, ary, row, h)
    return element_pointer(builder, ary, [row, ir.Constant(row.type, 0)])


def _types_ok(out, src, idx, coef, scale):
    arrays = (out, src, idx, coef, scale)
    if not all(isinstance(a, types.Array) for a in arrays):
        return False
    if out.ndim not in (2, 3) or src.ndim != out.ndim or idx.ndim != 1:
        return False
    if coef.ndim not in (1, 2) or scale.ndim != coef.ndim:
        return False
    return (
        isinstance(out.dtype, types.Float)
        and out.dtype == src.dtype == coef.dtype == scale.dtype
        and isinstance(idx.dtype, types.Integer)
    )


@intrinsic
def combine_rows(typingctx, out, i, h, src, idx, coef, scale, lo, hi):
    """``out[i, h, :] = Σ_{k in [lo, hi)} w_k * src[idx[k], h, :]`` with ``w_k = coef[k, h] (* scale[k, h])``.

    ``out`` and ``src`` are 3-D (rows, H, C), or both 2-D (rows, C), where
    ``h`` only picks the column of ``coef`` and ``scale``; ``coef`` and
    ``scale`` are (K, H), or both 1-D (K,) for one weight per ``k``. With
    3-D rows, ``h = ir_parts.ALL_HEADS`` sums every head of row ``i``: where
    the channels are C-contiguous and several heads fill whole vectors, as one
    run of ``H * C`` channels (each vector weighted by its own head's
    ``w_k``), so the loop over ``k`` runs once per group of vectors, not
    once per head; otherwise head by head (one head: as ``h = 0``). A
    ``scale`` of length 0 means no second factor (otherwise attention
    dropout's multipliers: ``w_k`` is the product, formed as the plain loop
    forms it). An empty range writes zeros. The vector code needs
    contiguous channels: it is compiled where Numba types both ``out`` and
    ``src`` C-contiguous (the layer's buffers); other layouts get the plain
    loop, with the same bits.
    """
    if not _types_ok(out, src, idx, coef, scale):
        return None
    sig = types.void(out, types.intp, types.intp, src, idx, coef, scale, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        a_out, a_src, a_idx, a_coef, a_scale = (
            context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 3, 4, 5, 6)
        )
        i, h_arg, lo, hi = args[1], args[2], args[7], args[8]
        intp = context.get_value_type(types.intp)
        fty = context.get_value_type(signature.args[0].dtype)
        vec_ty = ir.VectorType(fty, LANES)
        one = ir.Constant(intp, 1)
        ndim = signature.args[0].ndim
        contiguous = signature.args[0].layout == "C" and signature.args[3].layout == "C"
        coef_ndim = signature.args[5].ndim
        channels = builder.extract_value(a_out.shape, ndim - 1)
        has_scale = builder.icmp_signed(">", builder.extract_value(a_scale.shape, 0), ir.Constant(intp, 0))
        unit = cgutils.alloca_once_value(builder, ir.Constant(fty, 1.0))

        def weight(k, h):
            """``w_k`` of head ``h``."""
            w = builder.load(element_pointer(builder, a_coef, [k, h][:coef_ndim]))
            return times_scale(
                builder, w, has_scale, element_pointer(builder, a_scale, [k, h][:coef_ndim]), unit
            )

        def source_row(k, h):
            """Pointer to ``src[idx[k], h, 0]``."""
            j = context.cast(
                builder,
                builder.load(element_pointer(builder, a_idx, [k])),
                signature.args[4].dtype,
                types.intp,
            )
            return _row_start(builder, a_src, ndim, j, h)

        def sum_vectors(po, base, count, head_of, row_head):
            """Channels ``[base, base + 8 count)`` of the row at ``po``: ``count`` vector sums over all k,
            then one store each; vector ``v``'s weights are those of head ``head_of(offset)``."""
            offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
            heads_v = [head_of(off) for off in offsets]
            sums = [cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None)) for _ in range(count)]
            with cgutils.for_range_slice(builder, lo, hi, one, intp) as (k, _):
                ps = source_row(k, row_head)
                for s, off, hv in zip(sums, offsets, heads_v):
                    wv = splat(builder, weight(k, hv), vec_ty)
                    builder.store(
                        builder.fadd(
                            builder.load(s), builder.fmul(wv, load_vector(builder, ps, off, vec_ty))
                        ),
                        s,
                    )
            for s, off in zip(sums, offsets):
                store_vector(builder, po, off, builder.load(s))

        def channel(ptr, ary, c):
            """Pointer to channel ``c`` of the row at ``ptr`` (any stride of the last axis)."""
            if contiguous:
                return builder.gep(ptr, [c])
            step = builder.mul(c, builder.extract_value(ary.strides, ndim - 1))
            return builder.bitcast(
                builder.gep(builder.bitcast(ptr, ir.IntType(8).as_pointer()), [step]), ptr.type
            )

        def plain_order(po, h, first):
            """Channels ``[first, C)`` of head ``h`` in the plain loop order, on the output row."""
            with cgutils.for_range(builder, channels, start=first) as loop:
                builder.store(ir.Constant(fty, 0.0), channel(po, a_out, loop.index))
            with builder.if_then(builder.icmp_signed("<", first, channels)):
                with cgutils.for_range_slice(builder, lo, hi, one, intp) as (k, _):
                    w, ps = weight(k, h), source_row(k, h)
                    with cgutils.for_range(builder, channels, start=first) as loop:
                        p = channel(po, a_out, loop.index)
                        x = builder.load(channel(ps, a_src, loop.index))
                        builder.store(builder.fadd(builder.load(p), builder.fmul(w, x)), p)

        def head_run(row_head, width, head_of, fused):
            """The channels ``[0, width)`` of row ``i`` from head ``row_head`` (``ir_parts.for_heads``)."""
            po = _row_start(builder, a_out, ndim, i, row_head)
            if not contiguous:
                plain_order(po, row_head, ir.Constant(intp, 0))
                return
            first = vector_groups(
                builder,
                intp,
                width,
                GROUP,
                lambda base, count: sum_vectors(po, base, count, head_of, row_head),
            )
            if not fused:  # fused runs are whole vectors
                plain_order(po, row_head, first)  # the last C mod 8

        if ndim == 2:  # h picks the weights' column; ALL_HEADS (one head of rows) is column 0
            h = builder.select(
                builder.icmp_signed("<", h_arg, ir.Constant(intp, 0)), ir.Constant(intp, 0), h_arg
            )
            head_run(h, channels, lambda _offset: h, False)
        else:
            heads = builder.extract_value(a_out.shape, 1)
            for_heads(builder, h_arg, heads, channels, head_run, fusable=contiguous)
        return context.get_dummy_value()

    return sig, codegen
