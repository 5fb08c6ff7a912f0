"""The Θ_R term in the paper's pairwise form (see docs/MATH.md).

``P_i = a ⊙ Σ_{j<k} α_ij α_ik (A_ij - A_ik)(s_ij - s_ik)``, a sum over
unordered pairs of in-edges: O(deg²) per row, against the O(deg) form
``a ⊙ Σ_k s_ik δ_ik`` the target pass writes. The two agree to rounding;
this kernel overwrites the target pass's ``P_i`` when the pairwise form is
asked for (``theta_r="pairwise"``), so the fast passes carry no trace of it
and it is compiled only when used.

A row's sums over its pairs stay in vector registers (:func:`pair_sums`):
written as a loop over the channels inside the loop over pairs, every pair
loaded and stored the row of sums again and waited on the store of the
pair before, a store-to-load round trip per pair.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .activations import act_slope
from .edge import edge_z
from .ir_parts import all_contiguous, arrays_ok, lane_rest, store_vector, vector_groups
from .simd import LANES, element_pointer, load_vector, row_pointer, splat

#: vectors of sums at once: with the 4 rows ``s[e1]`` they keep, 8 of AVX2's 16 registers (float32)
GROUP = 4


@njit(nogil=True, cache=True)
def gatv2_pairwise_theta_r_rows(
    r0, r1, indptr, indices, xl, xr, att, slope, kind, u, weT, alpha, upstream, p_out
):
    """``p_out[i]`` = the pairwise ``P_i`` for rows ``[r0, r1)``.

    ``upstream`` (E, H) holds ``A_ij`` from the target pass. ``u`` (E, D)
    and ``weT`` (H, D, C) add the edge term to ``z_ij``; ``u`` of shape
    (0, D) means no edge features. The slopes ``s_ik`` of a row are
    computed once (scratch of the rows' largest in-degree x H x C, made once
    per call), then every pair costs a subtraction, a multiplication and an
    addition per channel (never fused: :func:`pair_sums`).
    """
    heads = p_out.shape[1]
    channels = p_out.shape[2]
    has_edge = u.shape[0] > 0
    zb = np.empty((1, heads, channels), dtype=xl.dtype)
    degree = 0
    for i in range(r0, r1):
        degree = max(degree, indptr[i + 1] - indptr[i])
    s = np.empty((degree, heads, channels), dtype=xl.dtype)
    for i in range(r0, r1):
        start = indptr[i]
        end = indptr[i + 1]
        for e in range(start, end):
            j = indices[e]
            if has_edge:
                edge_z(zb, xr, i, xl, j, u, weT, e)
            else:
                for h in range(heads):
                    for c in range(channels):
                        zb[0, h, c] = xr[i, h, c] + xl[j, h, c]
            for h in range(heads):
                for c in range(channels):
                    s[e - start, h, c] = act_slope(zb[0, h, c], kind, slope)
        for h in range(heads):
            pair_sums(p_out, i, h, s, alpha, upstream, start, end)
            for c in range(channels):
                p_out[i, h, c] *= att[h, c]


@intrinsic
def pair_sums(typingctx, p_out, i, h, s, alpha, upstream, start, end):
    """``p_out[i, h, c] = Σ_{e1 < e2} w (s[e1 - start, h, c] - s[e2 - start, h, c])`` over the pairs of edges of
    ``[start, end)``, ``w = alpha[e1, h] alpha[e2, h] (upstream[e1, h] - upstream[e2, h])``.

    Every channel's sum is the plain loop's: from +0, the pairs in order (``e1``, then ``e2``), each term
    ``w * (s1 - s2)`` added, a multiply then an add, never fused; so the same bits. The channels in whole
    8-lane vectors keep their sums in vector registers (where ``p_out`` and ``s`` are C-contiguous), the
    others one scalar register each. Reads and writes without bounds checks (the caller's rows).
    """
    arrays = (p_out, s, alpha, upstream)
    if not arrays_ok(arrays, (3, 3, 2, 2)) or not all(isinstance(x.dtype, types.Float) for x in arrays):
        return None
    sig = types.void(p_out, types.intp, types.intp, s, alpha, upstream, types.intp, types.intp)
    vectorised = all_contiguous(p_out, s)

    def codegen(context, builder, signature, args):
        arr_p, arr_s, arr_a, arr_u = (
            context.make_array(signature.args[k])(context, builder, args[k]) for k in (0, 3, 4, 5)
        )
        i, h, start, end = args[1], args[2], args[6], args[7]
        intp = context.get_value_type(types.intp)
        fty = context.get_value_type(signature.args[0].dtype)
        vec_ty = ir.VectorType(fty, LANES)
        one = ir.Constant(intp, 1)
        channels = builder.extract_value(arr_p.shape, 2)

        def pairs(body):
            """``body(e1, e2, w)`` for the pairs in order, ``w`` as the plain loop forms it."""
            with cgutils.for_range_slice(builder, start, end, one, intp) as (e1, _):
                a1 = builder.load(element_pointer(builder, arr_a, [e1, h]))
                u1 = builder.load(element_pointer(builder, arr_u, [e1, h]))
                first = body.first(e1)
                with cgutils.for_range_slice(builder, builder.add(e1, one), end, one, intp) as (e2, _):
                    a2 = builder.load(element_pointer(builder, arr_a, [e2, h]))
                    u2 = builder.load(element_pointer(builder, arr_u, [e2, h]))
                    w = builder.fmul(builder.fmul(a1, a2), builder.fsub(u1, u2))
                    body.term(first, e2, w)

        def s_row(e):
            return row_pointer(builder, arr_s, builder.sub(e, start), h)

        class Vectors:  # the channels [base, base + 8 count), or [base, base + width): sums in registers
            def __init__(self, base, count, ty=vec_ty):
                self.ty = ty
                self.offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
                self.sums = [cgutils.alloca_once_value(builder, ir.Constant(ty, None)) for _ in range(count)]

            def first(self, e1):
                return [load_vector(builder, s_row(e1), off, self.ty) for off in self.offsets]

            def term(self, s1, e2, w):
                wv = splat(builder, w, self.ty)
                for total, one_s1, off in zip(self.sums, s1, self.offsets):
                    diff = builder.fsub(one_s1, load_vector(builder, s_row(e2), off, self.ty))
                    builder.store(builder.fadd(builder.load(total), builder.fmul(wv, diff)), total)

        def group(base, count, ty=vec_ty):
            sums = Vectors(base, count, ty)
            pairs(sums)
            row = row_pointer(builder, arr_p, i, h)
            for total, off in zip(sums.sums, sums.offsets):
                store_vector(builder, row, off, builder.load(total))

        if vectorised:  # w formed once a pair for all the channels
            first = vector_groups(builder, intp, channels, GROUP, group)
            rest = builder.sub(channels, first)
            lane_rest(builder, rest, first, lambda base, width: group(base, 1, ir.VectorType(fty, width)))
            return context.get_dummy_value()
        total = cgutils.alloca_once(builder, fty)

        class Scalar:  # any strides: channel c, its sum in a scalar register
            def __init__(self, c):
                self.c = c

            def first(self, e1):
                return builder.load(element_pointer(builder, arr_s, [builder.sub(e1, start), h, self.c]))

            def term(self, s1, e2, w):
                s2 = builder.load(element_pointer(builder, arr_s, [builder.sub(e2, start), h, self.c]))
                builder.store(builder.fadd(builder.load(total), builder.fmul(w, builder.fsub(s1, s2))), total)

        with cgutils.for_range(builder, channels) as column:
            builder.store(ir.Constant(fty, 0.0), total)
            pairs(Scalar(column.index))
            builder.store(builder.load(total), element_pointer(builder, arr_p, [i, h, column.index]))
        return context.get_dummy_value()

    return sig, codegen
