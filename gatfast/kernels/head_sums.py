"""The scores of every head of an edge at once, and the target pass's ``A_ij`` of one head for a
row's edges at once.

``simd.leaky_score`` sums one head's channels: a vector sum per 8
channels, then the 8 lanes added in a fixed tree (``simd.hsum``: shuffles,
an extract and three adds to one scalar), stored to ``alpha[e, h]`` alone.
With 8 heads of 8 channels (Cora's layer) an edge made eight such trees and
eight scalar stores, which the softmax then read back as one vector
(``softmax.py``). :func:`leaky_scores` runs the trees of up to 8 heads side
by side: the heads' vector sums are interleaved by shuffles so that each add
of the tree adds the same two lanes for 8 heads at once
(:func:`hsum_heads`), and the results come out as one vector, stored to
``alpha[e, h:h + 8]``. Every head's score is the same sequence of IEEE
operations as ``simd.leaky_score``'s, so the same bits. With the vector
softmax, the forward kernel took 0.84x the time at 8 heads x 8 channels and
0.93x at 4 x 16 (Cora's graph, one thread, Intel Xeon, alternating in one
process); the same trees for several heads' ``A_ij``, written into the
target pass, made it slower, even at one head where they never ran, and
are not used (one head's, below, sit in a function of their own).

One head has no heads to interleave, but a row has edges: :func:`row_dots`
runs the trees of up to 8 of a row's edges side by side the same way for
the target pass's ``A_ij``, so that each edge's chain of dependent adds no
longer waits on the last one's, and stores them as one vector
(``upstream[e:e + 8, 0]``), the same bits as ``simd.dot_rows``. The target
pass on ``small-batch``'s layer (1 x 32, 101,995 edges, one thread, Intel
Xeon) took 2.03 against 2.25 ms (the two forms interleaved in one process,
fastest of 20-30 rounds, vCPU 1; 2.00 against 2.22 on vCPU 0; 0.936x in
alternating fresh processes); on Cora's 8 x 8, where it never runs, 0.661
against 0.656 ms. The same form for the forward kernel's scores
(``leaky_score``'s trees, written into its row loop: called, it cost more
than it saved) gave 0.94-0.95x the kernel's time on ``small-batch``'s and
``large``'s layers in one slow phase of the machine, but 1.00-1.01x and
1.08x in fast ones: not kept.

Both do heads whose channels fill whole 8-lane vectors (``C mod 8 == 0``)
in C-contiguous arrays, and return False otherwise (nothing written).
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .ir_parts import (
    all_contiguous,
    array_args,
    array_from,
    element_pointer,
    lane_groups,
    load_index,
    one_head_in_vectors,
    outlined,
    whole_vectors,
)
from .simd import LANES, load_vector, row_pointer, splat

_I32 = ir.IntType(32)
_BOOL = ir.IntType(1)


def _shuffle(builder, a, b, idx):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, len(idx)), [_I32(k) for k in idx]))


def hsum_heads(builder, sums):
    """The ``simd.hsum`` of each of up to 8 vector sums, as one vector (lane ``k``: ``sums[k]``'s).

    Missing heads are zero vectors; their lanes are not meant to be stored.
    The three levels add, for every head, ``l_c + l_(c+4)``, then ``q_0 +
    q_2`` and ``q_1 + q_3``, then those two: ``hsum``'s tree.
    """
    zero = ir.Constant(sums[0].type, None)
    sums = list(sums) + [zero] * (LANES - len(sums))
    # level 1: [a0+a4, a1+a5, a2+a6, a3+a7, b0+b4, ...] for the pairs (a, b)
    quads = [
        builder.fadd(
            _shuffle(builder, a, b, [0, 1, 2, 3, 8, 9, 10, 11]),
            _shuffle(builder, a, b, [4, 5, 6, 7, 12, 13, 14, 15]),
        )
        for a, b in zip(sums[0::2], sums[1::2])
    ]
    # level 2: [qa0+qa2, qa1+qa3, qb0+qb2, qb1+qb3, qc0+qc2, ...] for the pairs of quads
    pairs = [
        builder.fadd(
            _shuffle(builder, x, y, [0, 1, 4, 5, 8, 9, 12, 13]),
            _shuffle(builder, x, y, [2, 3, 6, 7, 10, 11, 14, 15]),
        )
        for x, y in zip(quads[0::2], quads[1::2])
    ]
    # level 3: [pa0+pa1, pb0+pb1, ...]
    x, y = pairs
    return builder.fadd(
        _shuffle(builder, x, y, [0, 2, 4, 6, 8, 10, 12, 14]),
        _shuffle(builder, x, y, [1, 3, 5, 7, 9, 11, 13, 15]),
    )


def _all_heads(builder, heads, channels, fty, out, e, lanes):
    """``out[e, h]`` = the ``simd.hsum`` of head ``h``'s vector sum ``0 + lanes(h, 0) + lanes(h, 8) + ...``
    (``simd._reduction``'s sum), for every head, 8 heads side by side. Returns whether it did
    (``C mod 8 == 0``)."""
    intp = heads.type
    eight = ir.Constant(intp, LANES)
    vec_ty = ir.VectorType(fty, LANES)
    whole = whole_vectors(builder, channels)

    def group(first, count):
        accs = [cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None)) for _ in range(count)]
        with cgutils.for_range(builder, builder.udiv(channels, eight)) as loop:
            base = builder.mul(loop.index, eight)
            for k, acc in enumerate(accs):
                h = builder.add(first, ir.Constant(intp, k))
                builder.store(builder.fadd(builder.load(acc), lanes(h, base, vec_ty)), acc)
        total = hsum_heads(builder, [builder.load(acc) for acc in accs])
        part = total if count == LANES else _shuffle(builder, total, total, list(range(count)))
        target = builder.bitcast(element_pointer(builder, out, [e, first]), part.type.as_pointer())
        builder.store(part, target, align=1)

    with builder.if_then(whole):
        lane_groups(builder, heads, group)
    return whole


def _arrays_fit(arrays, ndims):
    if not all(isinstance(a, types.Array) and isinstance(a.dtype, types.Float) for a in arrays):
        return False
    return tuple(a.ndim for a in arrays) == ndims and len({a.dtype for a in arrays}) == 1


@intrinsic
def leaky_scores(typingctx, att, xr, i, xl, j, slope, out, e):
    """``out[e, h] = simd.leaky_score(att, xr, i, xl, j, h, slope)`` for every head ``h``; returns whether
    it did (True for whole vectors in C-contiguous arrays, else False: nothing written)."""
    if not _arrays_fit((att, xr, xl, out), (2, 3, 3, 2)):
        return None
    sig = types.boolean(att, xr, types.intp, xl, types.intp, att.dtype, out, types.intp)
    vectorised = all_contiguous(att, xr, xl, out)

    def codegen(context, builder, signature, args):
        if not vectorised:
            return ir.Constant(_BOOL, 0)
        arr_att, arr_r, arr_l, arr_out = (
            context.make_array(signature.args[k])(context, builder, args[k]) for k in (0, 1, 3, 6)
        )
        i, j, slope, e = args[2], args[4], args[5], args[7]
        fty = context.get_value_type(signature.args[0].dtype)

        def lanes(h, base, vec_ty):  # simd.leaky_score's operations
            pa = element_pointer(builder, arr_att, [h])
            z = builder.fadd(
                load_vector(builder, row_pointer(builder, arr_r, i, h), base, vec_ty),
                load_vector(builder, row_pointer(builder, arr_l, j, h), base, vec_ty),
            )
            positive = builder.fcmp_ordered(">", z, ir.Constant(vec_ty, None))
            act = builder.select(positive, z, builder.fmul(splat(builder, slope, vec_ty), z))
            return builder.fmul(load_vector(builder, pa, base, vec_ty), act)

        heads, channels = (builder.extract_value(arr_att.shape, k) for k in (0, 1))
        return _all_heads(builder, heads, channels, fty, arr_out, e, lanes)

    return sig, codegen


@intrinsic
def row_dots(typingctx, grad, i, xl, indices, out, lo, hi):
    """``out[e, 0] = simd.dot_rows(grad, i, xl, indices[e], 0)`` for the edges ``e`` in ``[lo, hi)`` of row
    ``i`` (the target pass's ``A_ij``), one head (``ir_parts.edges_at_once``), up to 8 edges side by side: each
    edge's vector sum, then their trees interleaved as the heads' are (:func:`hsum_heads`) and the
    results stored as one vector. Returns whether it did (one head of whole vectors in C-contiguous
    arrays, ``ir_parts.typed_contiguous``; else False, nothing written).

    One edge's ``A_ij`` is a chain of dependent adds (a vector sum per 8
    channels, then the tree); one edge at a time, the next edge's chain
    waited on this one's. Side by side the edges' chains overlap, and the
    row ``grad[i]`` is loaded once per 8 edges. The code is a function of
    its own (``ir_parts.outlined``): written into the target pass's row
    loop, it made that pass 1.3-1.45x slower, at 8 heads too, where it
    never ran.
    """
    if not _arrays_fit((grad, xl, out), (3, 3, 2)) or not _index_array(indices):
        return None
    sig = types.boolean(grad, types.intp, xl, indices, out, types.intp, types.intp)
    vectorised = all_contiguous(grad, xl, out)

    def codegen(context, builder, signature, args):
        if not vectorised:
            return ir.Constant(_BOOL, 0)
        arr_g, arr_l, arr_idx, arr_out = (
            context.make_array(signature.args[k])(context, builder, args[k]) for k in (0, 2, 3, 4)
        )
        i, lo, hi = args[1], args[5], args[6]
        heads, channels = (builder.extract_value(arr_g.shape, k) for k in (1, 2))
        intp = heads.type
        eight = ir.Constant(intp, LANES)
        zero = ir.Constant(intp, 0)
        one = ir.Constant(intp, 1)
        fits = builder.and_(
            builder.and_(
                one_head_in_vectors(builder, heads, channels),
                builder.icmp_unsigned("==", builder.extract_value(arr_out.shape, 1), one),
            ),
            builder.icmp_signed("<=", lo, hi),  # a row's count of edges is never negative
        )
        vec_ty = ir.VectorType(arr_out.data.type.pointee, LANES)
        idx_ty = signature.args[3]
        g_row = row_pointer(builder, arr_g, i, zero)
        args = array_args(builder, arr_idx) + array_args(builder, arr_l) + array_args(builder, arr_out)

        def body(fb, params):
            idx, xl, out = (array_from(fb, params[a:b]) for a, b in ((0, 2), (2, 6), (6, 9)))
            lo, hi, channels, g_row = params[9:13]

            def group(first, width):  # the edges lo + first ... lo + first + width - 1
                e0 = fb.add(lo, first)
                rows = [
                    row_pointer(
                        fb, xl, load_index(context, fb, idx, idx_ty, fb.add(e0, ir.Constant(intp, k))), zero
                    )
                    for k in range(width)
                ]
                accs = [cgutils.alloca_once_value(fb, ir.Constant(vec_ty, None)) for _ in range(width)]
                with cgutils.for_range(fb, fb.udiv(channels, eight)) as loop:
                    base = fb.mul(loop.index, eight)
                    g = load_vector(fb, g_row, base, vec_ty)
                    for acc, l_row in zip(accs, rows):  # simd.dot_rows's operations
                        fb.store(fb.fadd(fb.load(acc), fb.fmul(g, load_vector(fb, l_row, base, vec_ty))), acc)
                total = hsum_heads(fb, [fb.load(acc) for acc in accs])
                part = total if width == LANES else _shuffle(fb, total, total, list(range(width)))
                fb.store(
                    part, fb.bitcast(element_pointer(fb, out, [e0, zero]), part.type.as_pointer()), align=1
                )

            lane_groups(fb, fb.sub(hi, lo), group)

        with builder.if_then(fits):
            # the index dtype in the name: int32 and uint32 are one LLVM type, cast differently
            outlined(builder, f"gatfast.row_dots.{idx_ty.dtype}", args + [lo, hi, channels, g_row], body)
        return fits

    return sig, codegen


def _index_array(indices):
    return isinstance(indices, types.Array) and indices.ndim == 1 and isinstance(indices.dtype, types.Integer)
