"""The target pass with edge features (LeakyReLU): each edge's channel terms in vector registers.

``backward_edge.py``'s target pass forms, per edge and head, ``z`` (with the
edge term), the activation and its slope in scratch rows, then adds the
terms to ``∂L/∂a`` and ``P_i`` in separate channel loops, and keeps
``q = ∂L/∂z`` in a buffer row for ``∂L/∂W_E`` (added per group of edges).
:func:`target_edge_terms` does it in one pass over the channels in whole
8-lane vectors with ``z`` and ``s`` in registers, the same operations in
the same order (the same bits); the kernel's loops do the last ``C mod 8``
channels and every channel of other activations. On batches of small graphs
(1 x 32 channels, 4 attributes, one thread, 2-core AMD EPYC) the pass went
from 13.0 to 9.8 ms. :func:`attribute_grads` forms the per-edge gradient
of the attributes (``W_Eᵀ q``) in ``simd.dot3``'s order.

Each ``z`` is a chain of D dependent adds (``edge.py``'s order), and each
``W_Eᵀ q`` a chain of C / 8: one vector (or attribute) at a time, an edge
waited for those chains one after another. Both intrinsics run four of them
side by side (``simd.add_edge_terms`` for ``z``); on a 2-core Intel Xeon
with AVX-512 (2 threads, old and new kernels alternating in one process) the
pass took 0.70-0.83x the time on ``large-edge`` (64 channels, 8 attributes)
and 0.80x on ``small-batch-edge`` (32 channels, 4 attributes).

Each ``W_Eᵀ q`` then still ended in its own horizontal sum (``simd.hsum``:
a chain of three dependent adds and three shuffles to one scalar), D of
them per edge. :func:`attribute_grads` now adds the sums of up to 8
attributes as one tree (``head_sums.hsum_heads``, the same adds lane by
lane, so the same bits): the pass took 0.82x the time at 32 channels and 4
attributes (20,000 nodes, in-degree 10) and 0.94x at 64 channels and 8
attributes (200,000 nodes), one thread, Intel Xeon, old and new kernels
alternating in one process.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .head_sums import hsum_heads
from .ir_parts import (
    all_contiguous,
    arrays_ok,
    element_pointer,
    leaky_setup,
    store_vector,
    vector_groups,
)
from .simd import LANES, add_edge_terms, hsum, load_vector, row_pointer, splat

TARGET_EDGE_GROUP = 4  # vectors whose z are formed side by side (chains of D dependent adds each)


@intrinsic
def target_edge_terms(
    typingctx,
    p_out,
    att_part,
    qb,
    b,
    i,
    h,
    e,
    j,
    k,
    xl,
    xr,
    att,
    u,
    weT,
    dl,
    slope,
    records,
    sign_base,
    head_bytes,
):
    """Edge ``e = (j -> i)``, head ``h`` of the target pass with edge features (LeakyReLU), whole vectors.

    For each channel ``c`` in whole vectors, with ``z`` the pre-activation
    of ``edge.edge_z``: ``att_part[b, h, c] += dl (z if z > 0 else slope
    z)``, ``qb[k, h, c] = (dl att[h, c]) s`` with ``s = 1 if z > 0 else
    slope`` and ``p_out[i, h, c] += dl s``: the per-channel operations of
    ``backward_edge.py``'s loops, without their scratch rows for ``z`` and
    ``s``; and, unless ``records`` is None, the signs ``z > 0`` as bits of
    edge ``e``'s source record (the layout ``sign_base``, ``head_bytes`` of
    ``records.check_records``; one byte per vector). ``qb``'s row ``k`` is the edge's place in the kernel's
    buffer of ``q`` (for ``∂L/∂W_E``). Returns the first channel not done (0
    for arrays that are not C-contiguous).
    """
    has_signs = not isinstance(records, types.NoneType)
    if has_signs and not (
        isinstance(records, types.Array) and records.dtype == types.uint8 and records.ndim == 2
    ):
        return None
    arrays = (p_out, att_part, qb, xl, xr, att, u, weT)
    if not arrays_ok(arrays, (3, 3, 3, 3, 3, 2, 2, 3)):
        return None
    index = types.intp
    sig = types.intp(
        p_out, att_part, qb, index, index, index, index, index, index, xl, xr, att, u, weT, p_out.dtype,
        p_out.dtype, records, index, index,
    )  # fmt: skip
    vectorised = all_contiguous(p_out, att_part, qb, xl, xr, att, weT, *([records] if has_signs else []))

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        if not vectorised:
            return ir.Constant(intp, 0)
        names = ("p_out", "att_part", "qb", "b", "i", "h", "e", "j", "k", "xl", "xr", "att", "u", "weT")
        a, arr, v = leaky_setup(
            context, builder, signature, args, names + ("dl", "slope", "records", "sign_base", "head_bytes")
        )
        vec_ty, zero_v, one_v, slope_v = v.vec, v.zero, v.one, v.slope
        dl = splat(builder, a["dl"], vec_ty)
        h, e, b = a["h"], a["e"], a["b"]
        zero = ir.Constant(intp, 0)
        rows = {
            "p": row_pointer(builder, arr["p_out"], a["i"], h),
            "part": row_pointer(builder, arr["att_part"], b, h),
            "q": row_pointer(builder, arr["qb"], a["k"], h),
            "r": row_pointer(builder, arr["xr"], a["i"], h),
            "l": row_pointer(builder, arr["xl"], a["j"], h),
            "att": element_pointer(builder, arr["att"], [h, zero]),
        }
        channels = builder.extract_value(arr["p_out"].shape, 2)
        if has_signs:  # head h's sign bytes
            rows["signs"] = element_pointer(
                builder, arr["records"], [e, builder.add(a["sign_base"], builder.mul(h, a["head_bytes"]))]
            )

        def vectors(base, count):
            offsets = [builder.add(base, ir.Constant(intp, v * LANES)) for v in range(count)]
            zs = [
                builder.fadd(
                    load_vector(builder, rows["r"], off, vec_ty), load_vector(builder, rows["l"], off, vec_ty)
                )
                for off in offsets
            ]
            for zv, off in zip(
                add_edge_terms(builder, arr["u"], arr["weT"], e, h, zs, offsets, vec_ty), offsets
            ):
                positive = builder.fcmp_ordered(">", zv, zero_v)
                if has_signs:  # lane k -> bit k
                    byte = builder.gep(rows["signs"], [builder.udiv(off, ir.Constant(intp, LANES))])
                    builder.store(builder.bitcast(positive, ir.IntType(LANES)), byte)
                act = builder.select(positive, zv, builder.fmul(slope_v, zv))
                part = load_vector(builder, rows["part"], off, vec_ty)
                store_vector(builder, rows["part"], off, builder.fadd(part, builder.fmul(dl, act)))
                s = builder.select(positive, one_v, slope_v)
                q = builder.fmul(builder.fmul(dl, load_vector(builder, rows["att"], off, vec_ty)), s)
                store_vector(builder, rows["q"], off, q)
                p_sum = builder.fadd(load_vector(builder, rows["p"], off, vec_ty), builder.fmul(dl, s))
                store_vector(builder, rows["p"], off, p_sum)

        return vector_groups(builder, intp, channels, TARGET_EDGE_GROUP, vectors)

    return sig, codegen


@intrinsic
def attribute_grads(typingctx, grad_u, e, weT, qb, k):
    """``grad_u[e, d] = Σ_h Σ_c weT[h, d, c] * qb[k, h, c]`` for every ``d``: ``W_Eᵀ q`` of edge ``e``.

    Per ``d``, exactly ``(0 + dot3(weT, 0, d, qb, k, 0)) + dot3(weT, 1, d,
    qb, k, 1) + ...`` (``simd.dot3``'s order, so the same bits), with up to
    8 values of ``d`` side by side (blocks of 8, then 4, then one at a
    time): one ``d`` at a time, an edge waited for a chain of C / 8
    dependent adds per ``d``. Where the channels fill whole vectors, a
    block's horizontal sums also run side by side, as one tree
    (``head_sums.hsum_heads``: lane ``k`` is ``simd.hsum`` of the ``k``-th
    vector sum) instead of one scalar tree per ``d``. Returns whether it
    wrote them: False for ``weT`` or ``qb`` not C-contiguous, where the
    caller sums with ``dot3``.
    """
    if not arrays_ok((grad_u, weT, qb), (2, 3, 3)) or not isinstance(grad_u.dtype, types.Float):
        return None
    sig = types.boolean(grad_u, types.intp, weT, qb, types.intp)
    vectorised = all_contiguous(weT, qb)

    def codegen(context, builder, signature, args):
        if not vectorised:
            return ir.Constant(ir.IntType(1), 0)
        intp = context.get_value_type(types.intp)
        arr_g, arr_w, arr_q = (
            context.make_array(signature.args[k])(context, builder, args[k]) for k in (0, 2, 3)
        )
        e, k = args[1], args[4]
        fty = context.get_value_type(signature.args[0].dtype)
        vec_ty = ir.VectorType(fty, LANES)
        heads, dims, channels = (builder.extract_value(arr_w.shape, axis) for axis in range(3))
        chunks = builder.udiv(channels, ir.Constant(intp, LANES))
        tail_start = builder.mul(chunks, ir.Constant(intp, LANES))

        whole = builder.icmp_unsigned("==", tail_start, channels)

        def head_sums(ds, h):
            """Per ``d`` the 8-lane vector sum of ``weT[h, d] * q[h]`` over the whole vectors."""
            q_row = row_pointer(builder, arr_q, k, h)
            w_rows = [row_pointer(builder, arr_w, h, d) for d in ds]
            accs = [cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None)) for _ in ds]
            with cgutils.for_range(builder, chunks) as chunk:
                off = builder.mul(chunk.index, ir.Constant(intp, LANES))
                q = load_vector(builder, q_row, off, vec_ty)
                for acc, w_row in zip(accs, w_rows):
                    term = builder.fmul(load_vector(builder, w_row, off, vec_ty), q)
                    builder.store(builder.fadd(builder.load(acc), term), acc)
            return q_row, w_rows, [builder.load(acc) for acc in accs]

        def block(d0, count):
            ds = [builder.add(d0, ir.Constant(intp, k)) for k in range(count)]
            with builder.if_else(whole) as (trees_side_by_side, with_tail):
                with trees_side_by_side:  # every d's tree at once: lane k of hsum_heads is hsum of d0 + k
                    sums = cgutils.alloca_once_value(builder, ir.Constant(vec_ty, None))
                    with cgutils.for_range(builder, heads) as head:
                        totals = hsum_heads(builder, head_sums(ds, head.index)[2])
                        builder.store(builder.fadd(builder.load(sums), totals), sums)
                    for lane, d in enumerate(ds):
                        value = builder.extract_element(builder.load(sums), ir.Constant(ir.IntType(32), lane))
                        builder.store(value, element_pointer(builder, arr_g, [e, d]))
                with with_tail:
                    sums = [cgutils.alloca_once_value(builder, ir.Constant(fty, 0.0)) for _ in ds]
                    with cgutils.for_range(builder, heads) as head:
                        q_row, w_rows, vectors = head_sums(ds, head.index)
                        totals = [cgutils.alloca_once_value(builder, hsum(builder, v)) for v in vectors]
                        with cgutils.for_range(builder, channels, start=tail_start) as tail:
                            qc = builder.load(builder.gep(q_row, [tail.index]))
                            for total, w_row in zip(totals, w_rows):
                                term = builder.fmul(builder.load(builder.gep(w_row, [tail.index])), qc)
                                builder.store(builder.fadd(builder.load(total), term), total)
                        for total_sum, total in zip(sums, totals):
                            builder.store(
                                builder.fadd(builder.load(total_sum), builder.load(total)), total_sum
                            )
                    for total_sum, d in zip(sums, ds):
                        builder.store(builder.load(total_sum), element_pointer(builder, arr_g, [e, d]))

        # blocks of 8 attributes, then 4, then one at a time: hsum_heads adds up to 8 trees side by side
        eights = builder.mul(builder.udiv(dims, ir.Constant(intp, 8)), ir.Constant(intp, 8))
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0), eights, ir.Constant(intp, 8), intp) as (
            d0,
            _,
        ):
            block(d0, 8)
        four = builder.icmp_unsigned(">=", builder.sub(dims, eights), ir.Constant(intp, 4))
        with builder.if_then(four):
            block(eights, 4)
        singles = builder.add(eights, builder.select(four, ir.Constant(intp, 4), ir.Constant(intp, 0)))
        with cgutils.for_range(builder, dims, start=singles) as loop:
            block(loop.index, 1)
        return ir.Constant(ir.IntType(1), 1)

    return sig, codegen
